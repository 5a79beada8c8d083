"""The Avro → Arrow (Parquet) mapping of the lake's columns, and the converters that feed it.

Each schema version is compiled once into an Arrow schema plus a tree of small converters that
turn fastavro's decoded values into what `pa.array` accepts, so no record walks the schema.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable

import pyarrow as pa

from kafka_lake.avro_types import AvroType, logical_type, named_types, non_null_members, resolve, type_name
from kafka_lake.catalog import SchemaVersion

# None means fastavro's value already is what Arrow takes, so the column skips conversion.
Converter = Callable[[Any], Any] | None
Pseudonymize = Callable[[Any], "str | None"]

SCHEMA_VERSION_METADATA = "kafka_lake.schema_version"

KAFKA_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("_kafka_topic", pa.string(), nullable=False),
    pa.field("_kafka_partition", pa.int32(), nullable=False),
    pa.field("_kafka_offset", pa.int64(), nullable=False),
    pa.field("_kafka_timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
    pa.field("_kafka_key", pa.binary(), nullable=True),
)

DEAD_LETTER_SCHEMA = pa.schema(
    [*KAFKA_COLUMNS, pa.field("value", pa.binary(), nullable=True), pa.field("error", pa.string(), nullable=False)]
)

_BASE_TYPES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
    "enum": pa.string(),
    "fixed": pa.binary(),
}
# Exactly the logical types fastavro converts (its LOGICAL_READERS); others land as their base type.
_LOGICAL = {
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
    ("string", "uuid"): pa.string(),
}
# The Python type fastavro returns for each (base type, logical type), to pick a union's member.
_PYTHON_TYPES = {
    ("boolean", None): bool,
    ("int", None): int,
    ("long", None): int,
    ("float", None): float,
    ("double", None): float,
    ("string", None): str,
    ("bytes", None): bytes,
    ("array", None): list,
    ("map", None): dict,
    ("bytes", "decimal"): decimal.Decimal,
    ("int", "date"): datetime.date,
    ("int", "time-millis"): datetime.time,
    ("long", "time-micros"): datetime.time,
    ("long", "timestamp-millis"): datetime.datetime,
    ("long", "timestamp-micros"): datetime.datetime,
    ("long", "local-timestamp-millis"): datetime.datetime,
    ("long", "local-timestamp-micros"): datetime.datetime,
    ("string", "uuid"): uuid.UUID,
}
_NAMED = ("record", "error", "enum", "fixed")
_INT32_RANGE = range(-(2**31), 2**31)


@dataclass(frozen=True)
class ArrowMapping:
    """One schema version's table schema and the converters from fastavro's records to its columns."""

    schema: pa.Schema
    converters: tuple[Converter, ...]  # one per top-level Avro field, in schema order

    def record_columns(self, records: list[dict]) -> list[pa.Array]:
        """The Avro fields' columns of `records` (decoded with `return_named_type=True`)."""
        columns = []
        for field, convert in zip(self.schema, self.converters):  # stops before the Kafka columns
            values = list(map(itemgetter(field.name), records))
            if convert is not None:
                values = list(map(convert, values))
            columns.append(pa.array(values, type=field.type))
        return columns


def arrow_schema_for(version: SchemaVersion, pii_fields: tuple[tuple[str, ...], ...]) -> pa.Schema:
    """The lake table schema of a version: its top-level fields, then the Kafka columns."""
    return _Compiler(version.schema, pseudonymize=None).mapping(version, pii_fields).schema


def arrow_mapping_for(
    version: SchemaVersion, pii_fields: tuple[tuple[str, ...], ...], pseudonymize: Pseudonymize | None
) -> ArrowMapping:
    """Compiles a version's mapping; `pseudonymize` fills the pii fields."""
    if pii_fields and pseudonymize is None:
        raise ValueError(f"pii fields of {version.file} need a pseudonymizer; refusing to land them in clear")
    return _Compiler(version.schema, pseudonymize).mapping(version, pii_fields)


@dataclass(frozen=True)
class _Mapped:
    type: pa.DataType
    nullable: bool
    convert: Converter


class _Compiler:
    def __init__(self, schema: dict, pseudonymize: Pseudonymize | None):
        self.names = named_types(schema)
        # fastavro tags union values with full names; named_types keys each node by short and full name.
        self.full_names: dict[int, str] = {}
        for name, node in self.names.items():
            if len(name) > len(self.full_names.get(id(node), "")):
                self.full_names[id(node)] = name
        self.pseudonymize = pseudonymize
        self.open_records: set[int] = set()

    def mapping(self, version: SchemaVersion, pii_fields: tuple[tuple[str, ...], ...]) -> ArrowMapping:
        fields, converters = self.record_fields(version.schema, frozenset(pii_fields))
        schema = pa.schema([*fields, *KAFKA_COLUMNS], metadata={SCHEMA_VERSION_METADATA: str(version.version)})
        return ArrowMapping(schema, tuple(converters))

    def record_fields(self, record: dict, pii: frozenset[tuple[str, ...]]) -> tuple[list[pa.Field], list[Converter]]:
        if id(record) in self.open_records:
            raise ValueError(f"record {record.get('name')!r} contains itself; Parquet has no recursive types")
        self.open_records.add(id(record))
        fields, converters = [], []
        for avro_field in record.get("fields", []):
            name = avro_field["name"]
            if (name,) in pii:
                mapped = _Mapped(pa.string(), True, self.pii_converter(avro_field["type"]))
            else:
                mapped = self.mapped(avro_field["type"], frozenset(p[1:] for p in pii if len(p) > 1 and p[0] == name))
            fields.append(pa.field(name, mapped.type, nullable=mapped.nullable))
            converters.append(mapped.convert)
        self.open_records.discard(id(record))
        return fields, converters

    def mapped(self, node: AvroType, pii: frozenset[tuple[str, ...]] = frozenset()) -> _Mapped:
        node = resolve(node, self.names)
        kind = type_name(node)
        if kind == "union":
            return self.union(node, pii)
        if kind in ("record", "error"):
            fields, converters = self.record_fields(node, pii)
            return _Mapped(pa.struct(fields), False, _record_converter(fields, converters))
        if kind == "array":
            item = self.mapped(node["items"])
            return _Mapped(pa.list_(pa.field("element", item.type, item.nullable)), False, _list_converter(item.convert))
        if kind == "map":
            value = self.mapped(node["values"])
            return _Mapped(
                pa.map_(pa.string(), pa.field("value", value.type, value.nullable)), False, _map_converter(value.convert)
            )
        logical = logical_type(node)
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = node["precision"], node.get("scale", 0)
            decimal_type = pa.decimal128 if precision <= 38 else pa.decimal256
            return _Mapped(decimal_type(precision, scale), False, None)
        if (kind, logical) in _LOGICAL:
            return _Mapped(_LOGICAL[kind, logical], False, str if logical == "uuid" else None)
        if kind not in _BASE_TYPES:
            raise ValueError(f"Avro type {node!r} has no Arrow mapping (unknown type name?)")
        return _Mapped(_BASE_TYPES[kind], kind == "null", None)

    def union(self, union: list, pii: frozenset[tuple[str, ...]]) -> _Mapped:
        members = [resolve(member, self.names) for member in non_null_members(union)]
        has_null = len(members) < len(union)
        if len(members) == 1:  # ["null", T] or ["T"]: the union is just T, nullable if null is a member
            inner = self.mapped(members[0], pii)
            convert = _nullable_converter(inner.convert, tagged=self.is_named(members[0]))
            return _Mapped(inner.type, has_null or inner.nullable, convert)
        mapped = [self.mapped(member) for member in members]
        fields = [pa.field(f"member{i}", m.type, nullable=True) for i, m in enumerate(mapped)]
        by_name: dict[str, tuple[str, Converter]] = {}
        by_python_type: dict[type, list[tuple[str, bool, Converter]]] = {}
        for field, member, member_mapped in zip(fields, members, mapped):
            if self.is_named(member):
                by_name[self.full_names[id(member)]] = (field.name, member_mapped.convert)
            else:
                python_type = _python_type(member)
                int32_only = type_name(member) == "int" and logical_type(member) is None
                by_python_type.setdefault(python_type, []).append((field.name, int32_only, member_mapped.convert))
        return _Mapped(pa.struct(fields), has_null, _union_converter([f.name for f in fields], by_name, by_python_type))

    def is_named(self, node: AvroType) -> bool:
        return type_name(node) in _NAMED

    def pii_converter(self, node: AvroType) -> Converter:
        pseudonymize = self.pseudonymize
        if pseudonymize is None or type_name(resolve(node, self.names)) != "union":
            return pseudonymize
        # A named type in a union comes back as (name, value); the pseudonym is of the value.
        return lambda value: pseudonymize(value[1] if type(value) is tuple else value)


def _python_type(node: AvroType) -> type:
    kind = type_name(node)
    return _PYTHON_TYPES.get((kind, logical_type(node)), _PYTHON_TYPES[kind, None])


def _record_converter(fields: list[pa.Field], converters: list[Converter]) -> Converter:
    converted = [(field.name, convert) for field, convert in zip(fields, converters) if convert is not None]
    if not converted:
        return None

    def convert_record(record: dict) -> dict:
        out = dict(record)  # a copy: converting twice (after a failed batch) must not pseudonymize twice
        for name, convert in converted:
            out[name] = convert(out[name])
        return out

    return convert_record


def _list_converter(convert_item: Converter) -> Converter:
    if convert_item is None:
        return None
    return lambda items: [convert_item(item) for item in items]


def _map_converter(convert_value: Converter) -> Converter:
    if convert_value is None:
        return None
    return lambda entries: {key: convert_value(value) for key, value in entries.items()}


def _nullable_converter(convert: Converter, tagged: bool) -> Converter:
    # fastavro returns a named type in a union as (name, value), even when its only sibling is null.
    if tagged:
        if convert is None:
            return lambda value: None if value is None else value[1]
        return lambda value: None if value is None else convert(value[1])
    if convert is None:
        return None
    return lambda value: None if value is None else convert(value)


def _union_converter(
    member_names: list[str],
    by_name: dict[str, tuple[str, Converter]],
    by_python_type: dict[type, list[tuple[str, bool, Converter]]],
) -> Converter:
    def member_for(value: Any) -> tuple[str, Converter]:
        for member, int32_only, convert in by_python_type.get(type(value), ()):
            if not int32_only or value in _INT32_RANGE:
                return member, convert
        raise ValueError(f"a {type(value).__name__} value {value!r} fits none of the union members {member_names}")

    def convert_union(value: Any) -> dict | None:
        if value is None:
            return None
        if type(value) is tuple:
            member, convert = by_name[value[0]]
            value = value[1]
        else:
            member, convert = member_for(value)
        out = dict.fromkeys(member_names)
        out[member] = value if convert is None else convert(value)
        return out

    return convert_union
