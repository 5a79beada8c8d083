"""The Avro → Arrow (Parquet) mapping of the lake's columns, and the converters that feed it decoded values.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.kafka.records import KAFKA_COLUMNS
from kafka_lake.schemas.avro_types import (
    NAMED_KINDS,
    AvroType,
    logical_type,
    named_types,
    non_null_members,
    refers_back,
    resolve,
    type_name,
)
from kafka_lake.schemas.connect_types import (
    DEBEZIUM_TIME,
    MICRO_TIME,
    MICRO_TIMESTAMP,
    NANO_TIME,
    NANO_TIMESTAMP,
    TIMESTAMP,
    VARIABLE_SCALE_DECIMAL,
    ZONED_TIMESTAMP,
    connect_name,
    debezium_timestamp,
    variable_scale_decimal_text,
    zoned_timestamp,
)
from kafka_lake.table_spec import RAW_SCHEMA_VERSION, SchemaVersion

# None means fastavro's value already is what Arrow takes, so the column skips conversion.
Converter = Callable[[Any], Any] | None
Pseudonymize = Callable[[Any], "str | None"]

SCHEMA_VERSION_METADATA = "kafka_lake.schema_version"
# Field metadata of a column whose values need a word beyond their type; the table catalog's column comment.
COMMENT_METADATA = b"comment"

BASE_ARROW_TYPES = {
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
# Keyed by (Avro type, logicalType); a type without a logicalType is never looked up here.
_LOGICAL: dict[tuple[str, str | None], pa.DataType] = {
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
_INT32_RANGE = range(-(2**31), 2**31)


@dataclass(frozen=True)
class ArrowMapping:
    """One schema version's table schema and the converters from fastavro's records to its columns."""

    schema: pa.Schema
    converters: tuple[Converter, ...]  # one per top-level Avro field, in schema order
    field_names: tuple[str, ...]  # the Avro name of each top-level field, which `rename` may have given another column

    def record_columns(self, records: list[dict]) -> list[pa.Array]:
        """The Avro fields' columns of `records` (decoded with `return_named_type=True`); a value no column holds
        raises `ColumnMisfit` naming its field."""
        columns = []
        for name, column, convert in zip(self.field_names, self.schema, self.converters):  # stops before the Kafka columns
            values = list(map(itemgetter(name), records))
            try:
                if convert is not None:
                    values = list(map(convert, values))
                columns.append(pa.array(values, type=column.type))
            except UNFIT_FOR_ARROW as error:
                raise ColumnMisfit.at(name, error) from None
        return columns


class ColumnMisfit(ValueError):
    """A decoded value its column cannot hold, naming the field where it sits (`address.zip`, `items[].price`)."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why

    @classmethod
    def at(cls, step: str, error: Exception) -> ColumnMisfit:
        """`error`, raised by the value at `step` (a field name, `[]` for an item, `{}` for a map value) or below."""
        if isinstance(error, ColumnMisfit):
            joined = f"{step}{error.path}" if error.path.startswith(("[", "{")) else f"{step}.{error.path}"
            return cls(joined, error.why)
        return cls(step, str(error) or type(error).__name__)


# What converting a decoded value or building its column raises for a value the column cannot hold.
UNFIT_FOR_ARROW = (pa.ArrowException, ValueError, TypeError, OverflowError)


# A raw table (`format: raw`): the value's bytes as they are, then the Kafka columns, in `schema_version=0`.
RAW_MAPPING = ArrowMapping(
    pa.schema([pa.field("value", pa.binary()), *KAFKA_COLUMNS], metadata={SCHEMA_VERSION_METADATA: str(RAW_SCHEMA_VERSION)}),
    (None,), ("value",))


def arrow_schema_for(version: SchemaVersion, pii_fields: tuple[tuple[str, ...], ...],
                     rename: Mapping[str, str] | None = None) -> pa.Schema:
    """The lake table schema of a version: its top-level fields (named by `rename` where it says), then the Kafka
    columns."""
    return _Compiler(version.schema, pseudonymize=None).mapping(version, pii_fields, rename).schema


def arrow_mapping_for(
    version: SchemaVersion, pii_fields: tuple[tuple[str, ...], ...], pseudonymize: Pseudonymize | None,
    rename: Mapping[str, str] | None = None,
) -> ArrowMapping:
    """Compiles a version's mapping; `pseudonymize` fills the pii fields."""
    if pii_fields and pseudonymize is None:
        raise ValueError(f"pii fields of {version.file} need a pseudonymizer; refusing to land them in clear")
    return _Compiler(version.schema, pseudonymize).mapping(version, pii_fields, rename)


def column_at(table: pa.Table, path: tuple[str, ...]) -> pa.ChunkedArray:
    """The column at a field path through struct columns, null where a struct on the path is null."""
    column = table.column(path[0])
    return pc.struct_field(column, list(path[1:])) if len(path) > 1 else column


def column_comment(column: pa.Field) -> str:
    """What a reader of a column must know that its type does not say (a decimal held as text, JSON text), or ""."""
    return (column.metadata or {}).get(COMMENT_METADATA, b"").decode()


@dataclass(frozen=True)
class _Mapped:
    type: pa.DataType
    convert: Converter
    # (path below this value, note) for the values a reader must know more about; they become the column's comment.
    notes: tuple[tuple[str, str], ...] = ()


def _notes_below(prefix: str, notes: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{'.' if path and not path.startswith(('[', '{')) else ''}{path}", note) for path, note in notes)


def _comment(notes: tuple[tuple[str, str], ...]) -> str:
    return "; ".join(f"{path}: {note}" if path else note for path, note in notes)


class _Compiler:
    """Compiles each schema version once into an Arrow schema plus a tree of small converters that turn fastavro's
    decoded values into what `pa.array` accepts, so no record walks the schema."""

    def __init__(self, schema: dict, pseudonymize: Pseudonymize | None):
        self.names = named_types(schema)
        # fastavro tags union values with full names; named_types keys each node by short and full name.
        self.full_names: dict[int, str] = {}
        for name, node in self.names.items():
            if len(name) > len(self.full_names.get(id(node), "")):
                self.full_names[id(node)] = name
        self.pseudonymize = pseudonymize
        self.open_records: list[int] = []  # the records whose fields are being mapped, outermost first

    def mapping(self, version: SchemaVersion, pii_fields: tuple[tuple[str, ...], ...],
                rename: Mapping[str, str] | None) -> ArrowMapping:
        rename = rename or {}
        names, mapped = self.record_fields(version.schema, frozenset(pii_fields))
        columns = []
        for name, field in zip(names, mapped):
            comment = _comment(field.notes)
            columns.append(pa.field(rename.get(name, name), field.type,
                                    metadata={COMMENT_METADATA: comment} if comment else None))
        schema = pa.schema([*columns, *KAFKA_COLUMNS], metadata={SCHEMA_VERSION_METADATA: str(version.version)})
        return ArrowMapping(schema, tuple(field.convert for field in mapped), tuple(names))

    def record_fields(self, record: dict, pii: frozenset[tuple[str, ...]]) -> tuple[list[str], list[_Mapped]]:
        self.open_records.append(id(record))
        names, mapped = [], []
        for avro_field in record.get("fields", []):
            name = avro_field["name"]
            if refers_back(avro_field["type"], self.open_records, self.names):
                field = self.recurring(record, avro_field["type"], (name,) in pii)
            elif (name,) in pii:
                field = _Mapped(pa.string(), self.pii_converter(avro_field["type"]))
            else:
                field = self.mapped(avro_field["type"], frozenset(p[1:] for p in pii if len(p) > 1 and p[0] == name))
            names.append(name)
            mapped.append(field)
        self.open_records.pop()
        return names, mapped

    def recurring(self, record: dict, node: AvroType, pii: bool) -> _Mapped:
        """A field where a record recurs: Parquet has no recursive types, so it holds the value as JSON text."""
        convert = _json_converter(self.pseudonymize if pii else None)
        name = self.full_names.get(id(record), record.get("name"))
        note = f"JSON text of a value of recursive record {name} ({JSON_FORM})"
        return _Mapped(pa.string(), convert, (("", ("pseudonymized " if pii else "") + note),))

    def mapped(self, node: AvroType, pii: frozenset[tuple[str, ...]] = frozenset()) -> _Mapped:
        node = resolve(node, self.names)
        kind = type_name(node)
        if kind == "union":
            return self.union(node, pii)
        connect = _CONNECT_COLUMNS.get((kind, connect_name(node)))
        if connect is not None:
            return connect
        if kind in ("record", "error"):
            names, mapped = self.record_fields(node, pii)
            fields = [pa.field(name, field.type) for name, field in zip(names, mapped)]
            notes = tuple(note for name, field in zip(names, mapped) for note in _notes_below(name, field.notes))
            return _Mapped(pa.struct(fields), _record_converter(names, [field.convert for field in mapped]), notes)
        if kind == "array":
            item = self.mapped(node["items"])
            return _Mapped(pa.list_(pa.field("element", item.type)), _list_converter(item.convert),
                           _notes_below("[]", item.notes))
        if kind == "map":
            value = self.mapped(node["values"])
            return _Mapped(pa.map_(pa.string(), pa.field("value", value.type)), _map_converter(value.convert),
                           _notes_below("{}", value.notes))
        logical = logical_type(node)
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = node["precision"], node.get("scale", 0)
            if precision <= MAX_DECIMAL_PRECISION:
                return _Mapped(pa.decimal128(precision, scale), None)
            return _Mapped(pa.string(), _decimal_text_converter(precision, scale), (("", decimal_as_text(precision, scale)),))
        if (kind, logical) in _LOGICAL:
            return _Mapped(_LOGICAL[kind, logical], str if logical == "uuid" else None)
        if kind not in BASE_ARROW_TYPES:
            raise ValueError(f"Avro type {node!r} has no Arrow mapping (unknown type name?)")
        return _Mapped(BASE_ARROW_TYPES[kind], None)

    def union(self, union: list, pii: frozenset[tuple[str, ...]]) -> _Mapped:
        members = [resolve(member, self.names) for member in non_null_members(union)]
        if len(members) == 1:  # ["null", T] or ["T"]: the union is just T
            inner = self.mapped(members[0], pii)
            return _Mapped(inner.type, _nullable_converter(inner.convert, tagged=self.is_named(members[0])), inner.notes)
        mapped = [self.mapped(member) for member in members]
        fields = [pa.field(f"member{i}", m.type) for i, m in enumerate(mapped)]
        notes = tuple(note for field, m in zip(fields, mapped) for note in _notes_below(field.name, m.notes))
        by_name: dict[str, tuple[str, Converter]] = {}
        by_python_type: dict[type, list[tuple[str, bool, Converter]]] = {}
        for field, member, member_mapped in zip(fields, members, mapped):
            if self.is_named(member):
                by_name[self.full_names[id(member)]] = (field.name, member_mapped.convert)
            else:
                python_type = python_type_of(member)
                int32_only = type_name(member) == "int" and logical_type(member) is None
                by_python_type.setdefault(python_type, []).append((field.name, int32_only, member_mapped.convert))
        return _Mapped(pa.struct(fields), _union_converter([f.name for f in fields], by_name, by_python_type), notes)

    def is_named(self, node: AvroType) -> bool:
        return type_name(node) in NAMED_KINDS

    def pii_converter(self, node: AvroType) -> Converter:
        pseudonymize = self.pseudonymize
        if pseudonymize is None or type_name(resolve(node, self.names)) != "union":
            return pseudonymize
        # A named type in a union comes back as (name, value); the pseudonym is of the value.
        return lambda value: pseudonymize(value[1] if type(value) is tuple else value)


# --- values Parquet readers cannot hold as Avro has them: wide decimals and recursive records, as text -----------

# The widest decimal Spark, Hive, Glue and Athena read (decimal128); DuckDB reads wider ones as a lossy double.
MAX_DECIMAL_PRECISION = 38
# A recursive value nested deeper than this many arrays, maps and records is a dead letter: deep enough for real
# trees, and far below where a decoder runs out of stack.
MAX_JSON_DEPTH = 100
JSON_FORM = "keys sorted, bytes as base64, decimals as exact text, times in ISO 8601"


def decimal_as_text(precision: int, scale: int) -> str:
    return (f"decimal({precision},{scale}) as its exact text (precision over {MAX_DECIMAL_PRECISION}, which readers "
            f"cannot hold)")


def _decimal_text_converter(precision: int, scale: int) -> Converter:
    def to_text(value: decimal.Decimal) -> str:
        # fastavro rounds a value with more digits than the precision to fit it: its exponent then moved.
        if value.as_tuple().exponent != -scale:
            raise ValueError(f"a decimal({precision},{scale}) value has more than {precision} digits")
        return format(value, "f")

    return to_text


def _json_converter(pseudonymize: Pseudonymize | None) -> Converter:
    def to_json(value: Any) -> str | None:
        if value is None:
            return None
        text = json_text(value)
        return pseudonymize(text) if pseudonymize is not None else text

    return to_json


def json_text(value: Any) -> str:
    """A decoded Avro value as deterministic JSON text: keys sorted, no spaces, UTF-8; bytes and fixed as base64
    (as Spark's `to_json` writes binary), decimals as their exact text, dates, times and timestamps in ISO 8601
    (Python's `isoformat`), uuids as text, NaN and infinities as the strings "NaN", "Infinity", "-Infinity"; a
    union holds its branch's value, a named type's branch (name, value) too."""
    return json.dumps(_jsonable(value, 0), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _jsonable(value: Any, depth: int) -> Any:
    kind = type(value)
    if value is None or kind in (str, int, bool):
        return value
    if kind is tuple:  # (name, value): a named type's branch of a union
        return _jsonable(value[1], depth)
    if kind in (dict, list):
        if depth >= MAX_JSON_DEPTH:
            raise ValueError(f"a recursive value is nested more than {MAX_JSON_DEPTH} levels deep")
        if kind is dict:
            return {key: _jsonable(item, depth + 1) for key, item in value.items()}
        return [_jsonable(item, depth + 1) for item in value]
    if kind is float:
        return value if math.isfinite(value) else "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if kind is bytes:
        return base64.b64encode(value).decode("ascii")
    if kind is decimal.Decimal:
        return format(value, "f")
    if kind in (datetime.datetime, datetime.date, datetime.time):
        return value.isoformat()
    return str(value)  # a uuid


_TIME_COUNT = "a time since midnight, negative or past a day as the database's TIME holds, in"
# Kafka Connect and Debezium types without an Avro twin (see `connect_types`), by (Avro type, connect.name).
_CONNECT_COLUMNS: dict[tuple[str, str | None], _Mapped] = {
    ("long", TIMESTAMP): _Mapped(pa.timestamp("ms", tz="UTC"), debezium_timestamp("ms")),
    ("long", MICRO_TIMESTAMP): _Mapped(pa.timestamp("us", tz="UTC"), debezium_timestamp("us")),
    ("long", NANO_TIMESTAMP): _Mapped(pa.timestamp("us", tz="UTC"), debezium_timestamp("ns")),
    # A database's TIME as a signed count since midnight: negative, or past a day (see `connect_types`).
    ("int", DEBEZIUM_TIME): _Mapped(pa.int32(), None, (("", f"{DEBEZIUM_TIME}: {_TIME_COUNT} milliseconds"),)),
    ("long", MICRO_TIME): _Mapped(pa.int64(), None, (("", f"{MICRO_TIME}: {_TIME_COUNT} microseconds"),)),
    ("long", NANO_TIME): _Mapped(pa.int64(), lambda nanos: nanos // 1000, (
        ("", f"{NANO_TIME}: {_TIME_COUNT} microseconds (the nanoseconds below them cut)"),)),
    # RFC 3339 text with an offset, to UTC; the digits past the microsecond are cut.
    ("string", ZONED_TIMESTAMP): _Mapped(pa.timestamp("us", tz="UTC"), zoned_timestamp),
    ("record", VARIABLE_SCALE_DECIMAL): _Mapped(pa.string(), variable_scale_decimal_text, (
        ("", "Debezium VariableScaleDecimal as its exact decimal text"),)),
}


def python_type_of(node: AvroType) -> type:
    kind = type_name(node)
    return _PYTHON_TYPES.get((kind, logical_type(node)), _PYTHON_TYPES[kind, None])


def _record_converter(names: list[str], converters: list[Converter]) -> Converter:
    converted = [(name, convert) for name, convert in zip(names, converters) if convert is not None]
    if not converted:
        return None

    def convert_record(record: dict) -> dict:
        out = dict(record)  # a copy: converting twice (after a failed batch) must not pseudonymize twice
        for name, convert in converted:
            try:
                out[name] = convert(out[name])
            except UNFIT_FOR_ARROW as error:
                raise ColumnMisfit.at(name, error) from None
        return out

    return convert_record


def _list_converter(convert_item: Converter) -> Converter:
    if convert_item is None:
        return None

    def convert_list(items: list) -> list:
        try:
            return [convert_item(item) for item in items]
        except UNFIT_FOR_ARROW as error:
            raise ColumnMisfit.at("[]", error) from None

    return convert_list


def _map_converter(convert_value: Converter) -> Converter:
    if convert_value is None:
        return None

    def convert_map(entries: dict) -> dict:
        try:
            return {key: convert_value(value) for key, value in entries.items()}
        except UNFIT_FOR_ARROW as error:
            raise ColumnMisfit.at("{}", error) from None

    return convert_map


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
