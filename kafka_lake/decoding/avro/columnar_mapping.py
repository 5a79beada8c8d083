"""The columnar path's mapping: a native reader's Arrow output of a spliced Avro block, checked and converted column
by column into exactly the columns the record path builds from fastavro's values.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.event_time import END_SECOND, FIRST_SECOND
from kafka_lake.schemas.arrow_mapping import BASE_ARROW_TYPES, ArrowMapping, python_type_of
from kafka_lake.schemas.avro_types import (
    NAMED_KINDS,
    AvroType,
    logical_type,
    named_types,
    non_null_members,
    resolve,
    rewritten,
    type_name,
)
from kafka_lake.schemas.connect_types import (
    INFINITE_COUNTS,
    MICRO_TIMESTAMP,
    NANO_TIME,
    NANO_TIMESTAMP,
    TIMESTAMP,
    VARIABLE_SCALE_DECIMAL,
    ZONED_TIMESTAMP,
    connect_name,
)
from kafka_lake.table_spec import SchemaVersion

# (string values, whether they repeat) → their pseudonyms, null stays null
ColumnPseudonymize = Callable[[pa.Array, bool], pa.Array]
_REPEATS_BELOW = 0.8  # distinct values per value under which hashing each distinct value once pays

# Logical types kept for the columnar reader, with the [low, high] range where fastavro converts the value
# (Python's dates and datetimes stop at years 1 and 9999; a time of day stops short of 24 h).
_DAY_MS, _DAY_US = 86_400_000, 86_400_000_000
_FIRST_DAY, _LAST_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31, in days since 1970-01-01
_FIRST_S, _LAST_S = FIRST_SECOND, END_SECOND - 1  # 0001-01-01T00:00:00 and 9999-12-31T23:59:59
_COLUMNAR_LOGICAL_RANGES: dict[tuple[str, str | None], tuple[int, int]] = {
    ("int", "date"): (_FIRST_DAY, _LAST_DAY),
    ("int", "time-millis"): (0, _DAY_MS - 1),
    ("long", "time-micros"): (0, _DAY_US - 1),
    ("long", "timestamp-millis"): (_FIRST_S * 1000, _LAST_S * 1000 + 999),
    ("long", "timestamp-micros"): (_FIRST_S * 10**6, _LAST_S * 10**6 + 999_999),
    ("long", "local-timestamp-millis"): (_FIRST_S * 1000, _LAST_S * 1000 + 999),
    ("long", "local-timestamp-micros"): (_FIRST_S * 10**6, _LAST_S * 10**6 + 999_999),
}
# Debezium's timestamps in milli- and microseconds, by connect.name: the same ranges; PostgreSQL's infinities (Long.MAX
# and Long.MIN) lie outside them and are landed at the years' ends by the record path's converter.
DEBEZIUM_TIMESTAMP_RANGES: dict[str | None, tuple[int, int]] = {
    TIMESTAMP: _COLUMNAR_LOGICAL_RANGES["long", "timestamp-millis"],
    MICRO_TIMESTAMP: _COLUMNAR_LOGICAL_RANGES["long", "timestamp-micros"],
}
_UUID_TEXT = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_PII_SCALARS = ("string", "int", "long", "boolean", "enum")  # whose text pyarrow's cast writes as Python's str does


class NotColumnar(ValueError):
    """Why a schema version is decoded record by record with fastavro rather than as columns."""


@dataclass(frozen=True)
class ColumnarMapping:
    """One schema version's columnar decoding: the schema the spliced block declares and the node per field."""

    block_schema: dict  # the writer schema as the native reader must see it (uuid read as its plain string)
    schema: pa.Schema  # the table schema, equal to `ArrowMapping.schema`
    fields: tuple[tuple[str, _Node], ...]

    def field_lengths(self, decoded: pa.RecordBatch) -> list[np.ndarray]:
        """Per field, the bytes of each record's value in Avro's canonical encoding; their sum is the record's."""
        return [node.lengths(decoded.column(name)) for name, node in self.fields]

    def misfits(self, decoded: pa.RecordBatch) -> np.ndarray:
        found = np.zeros(decoded.num_rows, dtype=bool)
        for name, node in self.fields:
            mask = node.misfits(decoded.column(name))
            if mask is not None:
                found |= mask
        return found

    def misread_branches(self, decoded: pa.RecordBatch, payload: np.ndarray, starts: np.ndarray,
                         field_lengths: list[np.ndarray]) -> np.ndarray | None:
        """Records whose written union branch byte is not one fastavro accepts, though the reader took it.

        The reader folds ["null", T] into T and reads any branch index but null's as T; fastavro refuses an index
        out of range. `starts` is where each record's bytes begin in `payload`; with every length checked
        (`field_lengths`), each value's position is known, so the branch bytes are read where they were written.
        """
        found, at = None, starts.astype(np.int64)
        for (name, node), lengths in zip(self.fields, field_lengths):
            if node.has_branches:
                wrong = node.misread(decoded.column(name), payload, at)
                if wrong is not None:
                    found = wrong if found is None else found | wrong
            at = at + lengths
        return found

    def record_columns(self, decoded: pa.RecordBatch) -> list[pa.Array]:
        return [node.convert(decoded.column(name)) for name, node in self.fields]


def columnar_mapping_for(
    version: SchemaVersion, mapping: ArrowMapping, pii_fields: tuple[tuple[str, ...], ...],
    pseudonymize: ColumnPseudonymize | None,
) -> ColumnarMapping:
    """Compiles a version, whose record path maps it by `mapping`, for the columnar path, or raises `NotColumnar`
    saying why fastavro must decode it."""
    if version.recursions:
        raise NotColumnar(f"a record contains itself ({version.recursions[0]}); its JSON text is built from fastavro's value")
    if pii_fields and pseudonymize is None:
        raise ValueError(f"pii fields of {version.file} need a pseudonymizer; refusing to land them in clear")
    compiler = _ColumnarCompiler(version.schema, pseudonymize)
    record_type = pa.struct(list(mapping.schema)[: len(mapping.field_names)])
    node = compiler.record(version.schema, record_type, frozenset(pii_fields))
    return ColumnarMapping(_block_schema(version.schema), mapping.schema, tuple(zip(mapping.field_names, node.children)))


def _block_schema(node: AvroType) -> AvroType:
    """The schema with every logical type the columnar nodes do not read natively made plain (uuid → string)."""
    return rewritten(node, _plain_unless_read_natively)


def _plain_unless_read_natively(node: dict) -> dict:
    kind, logical = node.get("type"), node.get("logicalType")
    if logical is not None and not ((kind, logical) in _COLUMNAR_LOGICAL_RANGES or logical == "decimal"):
        del node["logicalType"]
    return node


class _ColumnarCompiler:
    def __init__(self, schema: dict, pseudonymize: ColumnPseudonymize | None):
        self.names = named_types(schema)
        self.pseudonymize = pseudonymize

    def node(self, avro: AvroType, target: pa.DataType, pii: frozenset = frozenset()) -> _Node:
        avro = resolve(avro, self.names)
        kind = type_name(avro)
        connect = connect_name(avro)
        if (kind, connect) in (("long", NANO_TIMESTAMP), ("long", NANO_TIME)):
            return _Nanos(target, infinite=connect == NANO_TIMESTAMP)
        if kind == "long" and connect in DEBEZIUM_TIMESTAMP_RANGES:
            return _Varint(DEBEZIUM_TIMESTAMP_RANGES[connect], target)
        if (kind, connect) == ("string", ZONED_TIMESTAMP):
            return _ZonedTimestamp(target)
        if (kind, connect) == ("record", VARIABLE_SCALE_DECIMAL):
            raise NotColumnar("a Debezium VariableScaleDecimal's text is built from fastavro's value")
        if kind == "union":
            return self.union(avro, target, pii)
        if kind in ("record", "error"):
            return self.record(avro, target, pii)
        if kind == "array":
            return _List(self.node(avro["items"], target.value_type), target)
        if kind == "map":
            return _Map(self.node(avro["values"], target.item_type), target)
        logical = logical_type(avro)
        if logical == "decimal" and kind in ("bytes", "fixed"):
            if avro["precision"] >= 76:
                raise NotColumnar(f"decimal({avro['precision']}) leaves no wider Arrow decimal to check its values in")
            return _Decimal(avro["precision"], avro.get("scale", 0), avro.get("size"), target)
        if kind in ("int", "long"):
            return _Varint(_COLUMNAR_LOGICAL_RANGES.get((kind, logical)), target)
        if kind in ("string", "bytes"):
            return _Bytes(target, uuid_text=(kind, logical) == ("string", "uuid"))
        if kind == "enum":
            return _Enum(target)
        fixed_sizes = {"null": 0, "boolean": 1, "float": 4, "double": 8, "fixed": avro.get("size") if kind == "fixed" else 0}
        if kind not in fixed_sizes:
            raise NotColumnar(f"Avro type {avro!r} has no columnar reading")
        return _FixedWidth(fixed_sizes[kind], target)

    def record(self, avro: dict, target: pa.StructType, pii: frozenset) -> _Struct:
        children = []
        for index, avro_field in enumerate(avro.get("fields", [])):
            name = avro_field["name"]
            field_type = target.field(index).type  # by position: a renamed top-level column has another name
            if (name,) in pii:
                children.append(self.pii_node(avro_field["type"], name))
            else:
                deeper = frozenset(p[1:] for p in pii if len(p) > 1 and p[0] == name)
                children.append(self.node(avro_field["type"], field_type, deeper))
        return _Struct(children, target)

    def pii_node(self, avro: AvroType, name: str) -> _Node:
        resolved = resolve(avro, self.names)
        members = non_null_members(resolved) if isinstance(resolved, list) else [resolved]
        if len(members) != 1 or type_name(resolve(members[0], self.names)) not in _PII_SCALARS:
            raise NotColumnar(f"pii field {name!r} is {_describe_type(resolved)}, whose pseudonym text only fastavro's value gives")
        value = resolve(members[0], self.names)
        inner = self.node(value, pa.string() if type_name(value) == "enum" or logical_type(value) == "uuid" else BASE_ARROW_TYPES[type_name(value)])
        if isinstance(resolved, list):
            inner = _NullableUnion(inner, resolved[0] == "null") if len(resolved) == 2 else _SingleUnion(inner)
        return _Pseudonymized(inner, self.pseudonymize)

    def union(self, union: list, target: pa.DataType, pii: frozenset) -> _Node:
        members = [resolve(member, self.names) for member in non_null_members(union)]
        if len(members) == 1:
            inner = self.node(members[0], target, pii)
            # The reader folds ["null", T] into a nullable T; a lone ["T"] stays a one-branch union.
            return _NullableUnion(inner, union[0] == "null") if len(union) == 2 else _SingleUnion(inner)
        seen: dict[type, str] = {}
        for member in members:
            if type_name(member) in NAMED_KINDS:
                continue  # fastavro names the branch of a named type: no ambiguity
            python_type = python_type_of(member)
            if python_type in seen:
                raise NotColumnar(
                    f"union {_describe_type(union)} has members {seen[python_type]} and {_describe_type(member)} that "
                    f"fastavro decodes to the same Python type; its member choice differs from the written branch"
                )
            seen[python_type] = _describe_type(member)
        fields = list(target)
        branches: list[_Node | None] = []
        member_index = 0
        for member in union:
            if member == "null":
                branches.append(None)
            else:
                branches.append(self.node(member, fields[member_index].type))
                member_index += 1
        return _GeneralUnion(branches, target)


def _describe_type(node: AvroType) -> str:
    if isinstance(node, list):
        return "[" + ", ".join(_describe_type(member) for member in node) + "]"
    if isinstance(node, dict):
        name = node.get("name") if node.get("type") in NAMED_KINDS else None
        logical = node.get("logicalType")
        return name or (f"{type_name(node)}/{logical}" if logical else type_name(node))
    return str(node)


# --- vectorized helpers -------------------------------------------------------------------------------------

def _varint_lengths(unsigned: np.ndarray) -> np.ndarray:
    """Bytes of Avro's variable-length encoding of already zigzagged values: one, and one more for each 7 bits
    the value reaches. Only the steps the largest value reaches are compared (one for string lengths)."""
    unsigned = unsigned.astype(np.uint64, copy=False)
    lengths = np.ones(len(unsigned), dtype=np.int64)
    largest = int(unsigned.max()) if len(unsigned) else 0
    step = 1 << 7
    while step <= largest:
        lengths += unsigned >= np.uint64(step)
        step <<= 7
    return lengths


def _zigzag_lengths(values: np.ndarray) -> np.ndarray:
    signed = values.astype(np.int64)
    return _varint_lengths(((signed << 1) ^ (signed >> 63)).view(np.uint64))


def _fixed_values(array: pa.Array, dtype) -> np.ndarray:
    buffer = array.buffers()[1]
    return np.frombuffer(buffer, dtype=dtype, count=len(array) + array.offset)[array.offset:]


def _offsets(array: pa.Array) -> np.ndarray:
    return np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + array.offset + 1)[array.offset:].astype(np.int64)


def non_null(array: pa.Array) -> np.ndarray:
    """Which values of an array are not null, as a numpy mask."""
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    return np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _null_mask(array: pa.Array) -> pa.Array | None:
    return None if array.null_count == 0 else pc.invert(array.is_valid())


def _segment_sums(per_item: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    running = np.concatenate(([0], np.cumsum(per_item, dtype=np.int64)))
    return running[offsets[1:]] - running[offsets[:-1]]


def _segment_any(per_item: np.ndarray | None, offsets: np.ndarray) -> np.ndarray | None:
    if per_item is None or not per_item.any():
        return None
    return _segment_sums(per_item.astype(np.int64), offsets) > 0


# --- the nodes ----------------------------------------------------------------------------------------------


class _Node:
    """A native reader decodes many records of one schema at once (see `columnar.py`). Its Arrow output is brought to
    the table mapping (`arrow_mapping.py`) by a tree of nodes, one per Avro type, each with three vectorized jobs:
    `lengths`, `misfits` and `convert`."""

    target: pa.DataType
    has_branches = False  # whether a folded union's branch byte sits somewhere inside this type's encoding

    def lengths(self, array: pa.Array) -> np.ndarray:
        """The canonical Avro binary length of each value. The decoder consumed at least this many bytes for it, so
        when every record's canonical length equals its payload length, and the block was not overrun, every record
        was decoded from exactly its own bytes: a broken neighbour cannot shift a good record."""
        raise NotImplementedError

    def misfits(self, array: pa.Array) -> np.ndarray | None:
        """The values fastavro would treat otherwise (a time beyond a day, a decimal beyond its precision, a map with
        a repeated key, a uuid not in canonical form); those records take the fastavro path instead."""
        return None

    def misread(self, array: pa.Array, payload: np.ndarray, starts: np.ndarray) -> np.ndarray | None:
        """Elements (encoded from `starts` in `payload`) whose branch bytes fastavro would refuse."""
        return None

    def convert(self, array: pa.Array) -> pa.Array:
        """The lake column, exactly what the fastavro path builds."""
        return array if array.type == self.target else array.cast(self.target)


class _FixedWidth(_Node):
    """null, boolean, float, double, fixed: as many bytes whatever the value."""

    def __init__(self, size: int, target: pa.DataType):
        self.size, self.target = size, target

    def lengths(self, array):
        return np.full(len(array), self.size, dtype=np.int64)


class _Varint(_Node):
    """int and long, with the logical types on them (dates, times, timestamps)."""

    def __init__(self, bounds: tuple[int, int] | None, target: pa.DataType):
        self.bounds, self.target = bounds, target

    def _integers(self, array):
        return _fixed_values(array, np.int32 if array.type.bit_width == 32 else np.int64)

    def lengths(self, array):
        return _zigzag_lengths(self._integers(array))

    def misfits(self, array):
        if self.bounds is None:
            return None
        values = self._integers(array)
        low, high = self.bounds
        return (values < low) | (values > high)


class _Bytes(_Node):
    """string and bytes; a uuid is read as its text and must be the canonical 36 characters fastavro prints."""

    def __init__(self, target: pa.DataType, uuid_text: bool = False):
        self.target, self.uuid_text = target, uuid_text

    def lengths(self, array):
        sizes = np.diff(_offsets(array))
        return _varint_lengths(sizes << 1) + sizes

    def misfits(self, array):
        if not self.uuid_text:
            return None
        matches = pc.match_substring_regex(array, _UUID_TEXT).fill_null(True)
        return ~np.asarray(matches.to_numpy(zero_copy_only=False), dtype=bool)

    def convert(self, array):
        return pc.ascii_lower(array) if self.uuid_text else super().convert(array)


class _Nanos(_Varint):
    """Debezium's NanoTimestamp and NanoTime: nanoseconds, landed in microseconds (rounded down, as `//` does). A
    NanoTimestamp's infinities are left to the record path, which lands them at the years' ends."""

    def __init__(self, target: pa.DataType, infinite: bool = False):
        super().__init__(None, target)
        self.infinite = infinite

    def misfits(self, array):
        return np.isin(self._integers(array), INFINITE_COUNTS) if self.infinite else None

    def convert(self, array):
        micros = self._integers(array) // 1000
        return pa.array(micros, pa.int64(), mask=None if array.null_count == 0 else ~non_null(array)).cast(self.target)


# The ZonedTimestamp texts converted as columns: every field fixed-width and in range where a pattern can say so, at
# most microseconds, a zone of Z or ±hh:mm; years 0002..9998, where no offset takes the time out of 0001..9999.
_ZONED_TIMESTAMP = (r"^(000[2-9]|00[1-9]\d|0[1-9]\d\d|[1-8]\d{3}|9[0-8]\d\d|99[0-8]\d)-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}"
                    r"(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$")


class _ZonedTimestamp(_Bytes):
    """Debezium's ZonedTimestamp: ISO 8601 text with an offset, to a UTC timestamp. Other forms of text take the
    record path, which reads them as `parse_event_time` does or says why not."""

    def __init__(self, target: pa.DataType):
        super().__init__(target)

    def misfits(self, array):
        plain = pc.match_substring_regex(array, _ZONED_TIMESTAMP).fill_null(True)
        return ~np.asarray(plain.to_numpy(zero_copy_only=False), dtype=bool)

    def convert(self, array):
        return array.cast(self.target)  # an impossible date raises: the record path then decides


class _Enum(_Node):
    def __init__(self, target: pa.DataType):
        self.target = target

    def lengths(self, array):
        return _zigzag_lengths(_fixed_values(array.indices, np.int32))

    def convert(self, array):
        return array.cast(self.target)


class _Decimal(_Node):
    def __init__(self, precision: int, scale: int, fixed_size: int | None, target: pa.DataType):
        self.precision, self.scale, self.fixed_size, self.target = precision, scale, fixed_size, target
        # Wide enough to hold 10 ** precision, the first value beyond the column.
        self._wide = pa.decimal128(38, scale) if precision < 38 else pa.decimal256(76, scale)
        self._limit = pa.scalar(decimal.Decimal(10) ** (precision - scale), self._wide)

    def convert(self, array):
        if not pa.types.is_string(self.target):
            return super().convert(array)
        # As text, exactly as Python formats the Decimal fastavro gives: the unscaled integer's digits (Arrow prints
        # a scale-0 decimal without an exponent), the point set `scale` digits from the right.
        unscaled = array.view(pa.decimal128(38, 0) if array.type.byte_width == 16 else pa.decimal256(76, 0))
        digits = pc.cast(unscaled, pa.string())
        if self.scale == 0:
            return digits
        negative = pc.starts_with(digits, "-")
        magnitude = pc.utf8_lpad(pc.utf8_ltrim(digits, "-"), self.scale + 1, "0")
        text = pc.binary_join_element_wise(pc.utf8_slice_codeunits(magnitude, 0, -self.scale),
                                           pc.utf8_slice_codeunits(magnitude, -self.scale), ".")
        return pc.if_else(negative, pc.binary_join_element_wise("-", text, ""), text)

    def lengths(self, array):
        if self.fixed_size is not None:
            return np.full(len(array), self.fixed_size, dtype=np.int64)
        width = array.type.byte_width
        raw = np.frombuffer(array.buffers()[1], dtype=np.uint8, count=(len(array) + array.offset) * width)
        raw = raw.reshape(-1, width)[array.offset:]
        # Two's complement, little endian: the fewest big-endian bytes that keep value and sign.
        negative = raw[:, -1] >= 0x80
        magnitude = np.where(negative[:, None], ~raw, raw)
        nonzero = magnitude != 0
        top = np.where(nonzero.any(axis=1), width - 1 - np.argmax(nonzero[:, ::-1], axis=1), -1)
        top_byte = magnitude[np.arange(len(raw)), np.maximum(top, 0)]
        bits = np.where(top >= 0, top * 8 + _BIT_LENGTHS[top_byte], 0)
        sizes = bits // 8 + 1
        return _varint_lengths(sizes << 1) + sizes

    def misfits(self, array):
        wide = array.view(pa.decimal128(38, self.scale) if array.type.byte_width == 16 else pa.decimal256(76, self.scale))
        too_big = pc.greater_equal(pc.abs(wide.cast(self._wide)), self._limit).fill_null(False)
        return np.asarray(too_big.to_numpy(zero_copy_only=False), dtype=bool)


_BIT_LENGTHS = np.array([value.bit_length() for value in range(256)], dtype=np.int64)


class _Struct(_Node):
    def __init__(self, children: list[_Node], target: pa.StructType):
        self.children, self.target = children, target
        self.has_branches = any(child.has_branches for child in children)

    def misread(self, array, payload, starts):
        found, at = None, starts
        for index, child in enumerate(self.children):
            values = array.field(index)
            if child.has_branches:
                wrong = child.misread(values, payload, at)
                if wrong is not None:
                    found = wrong if found is None else found | wrong
            at = at + child.lengths(values)
        return found

    def lengths(self, array):
        total = np.zeros(len(array), dtype=np.int64)
        for index, child in enumerate(self.children):
            total += child.lengths(array.field(index))
        return total

    def misfits(self, array):
        found = None
        for index, child in enumerate(self.children):
            mask = child.misfits(array.field(index))
            if mask is not None:
                found = mask if found is None else found | mask
        return found

    def convert(self, array):
        columns = [child.convert(array.field(index)) for index, child in enumerate(self.children)]
        return pa.StructArray.from_arrays(columns, fields=list(self.target), mask=_null_mask(array))


def _item_starts(starts: np.ndarray, counts: np.ndarray, relative: np.ndarray, item_lengths: np.ndarray) -> np.ndarray:
    """Where each item of each array (or map) begins: after its container's count, then its predecessors."""
    owners = np.repeat(np.arange(len(counts)), counts)
    running = np.concatenate(([0], np.cumsum(item_lengths, dtype=np.int64)))
    first_of_owner = running[relative[:-1]]
    return starts[owners] + _varint_lengths(counts[owners] << 1) + running[:-1] - first_of_owner[owners]


class _List(_Node):
    def __init__(self, item: _Node, target: pa.ListType):
        self.item, self.target = item, target
        self.has_branches = item.has_branches

    def misread(self, array, payload, starts):
        offsets, items, relative = self._items(array)
        counts = np.diff(offsets)
        if not len(items):
            return None
        at = _item_starts(starts, counts, relative, self.item.lengths(items))
        return _segment_any(self.item.misread(items, payload, at), relative)

    def _items(self, array):
        offsets = _offsets(array)
        return offsets, array.values.slice(offsets[0], offsets[-1] - offsets[0]), offsets - offsets[0]

    def lengths(self, array):
        offsets, items, relative = self._items(array)
        counts = np.diff(offsets)
        # A non-empty array is one block (count, items) and the closing zero; an empty one is the zero alone.
        return np.where(counts > 0, _varint_lengths(counts << 1) + _segment_sums(self.item.lengths(items), relative) + 1, 1)

    def misfits(self, array):
        _, items, relative = self._items(array)
        return _segment_any(self.item.misfits(items), relative)

    def convert(self, array):
        _, items, relative = self._items(array)
        return pa.ListArray.from_arrays(pa.array(relative, pa.int32()), self.item.convert(items), type=self.target,
                                        mask=_null_mask(array))


class _Map(_Node):
    def __init__(self, value: _Node, target: pa.MapType):
        self.key, self.value, self.target = _Bytes(pa.string()), value, target
        self.has_branches = value.has_branches

    def misread(self, array, payload, starts):
        offsets, keys, values, relative = self._entries(array)
        if not len(keys):
            return None
        key_lengths = self.key.lengths(keys)
        at = _item_starts(starts, np.diff(offsets), relative, key_lengths + self.value.lengths(values))
        return _segment_any(self.value.misread(values, payload, at + key_lengths), relative)

    def _entries(self, array):
        offsets = _offsets(array)
        start, stop = offsets[0], offsets[-1]
        return offsets, array.keys.slice(start, stop - start), array.items.slice(start, stop - start), offsets - start

    def lengths(self, array):
        offsets, keys, values, relative = self._entries(array)
        counts = np.diff(offsets)
        entries = self.key.lengths(keys) + self.value.lengths(values)
        return np.where(counts > 0, _varint_lengths(counts << 1) + _segment_sums(entries, relative) + 1, 1)

    def misfits(self, array):
        offsets, keys, values, relative = self._entries(array)
        found = _segment_any(self.value.misfits(values), relative)
        # fastavro builds a dict: a repeated key keeps only its last value, so such maps take its path.
        repeated = _repeated_keys(keys, np.diff(offsets))
        if found is None:
            return repeated
        return found if repeated is None else found | repeated

    def convert(self, array):
        _, keys, values, relative = self._entries(array)
        return pa.MapArray.from_arrays(pa.array(relative, pa.int32()), keys, self.value.convert(values),
                                       type=self.target, mask=_null_mask(array))


_WIDEST_PAIRWISE = 8  # up to this many entries a map's keys are compared pairwise, beyond that sorted


def _repeated_keys(keys: pa.Array, counts: np.ndarray) -> np.ndarray | None:
    """Which maps (with `counts` entries each, their `keys` end to end) have a key twice; None: none has."""
    widest = int(counts.max(initial=0))
    if widest < 2:
        return None
    codes = pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    owners = np.repeat(np.arange(len(counts)), counts)
    distinct = int(codes.max()) + 1
    if widest <= _WIDEST_PAIRWISE:
        # Entries of a map are adjacent: an entry repeats a key iff one of the widest-1 before it has its code.
        again = np.zeros(len(codes), dtype=bool)
        for distance in range(1, widest):
            again[distance:] |= (owners[distance:] == owners[:-distance]) & (codes[distance:] == codes[:-distance])
        owners_again = owners[again]
    else:
        pairs = np.sort(owners * distinct + codes)
        owners_again = pairs[1:][pairs[1:] == pairs[:-1]] // distinct
    if not len(owners_again):
        return None
    repeated = np.zeros(len(counts), dtype=bool)
    repeated[owners_again] = True
    return repeated


class _NullableUnion(_Node):
    """["null", T] in either order, which the reader folds into T's column with nulls."""

    has_branches = True

    def __init__(self, inner: _Node, null_first: bool = True):
        self.inner, self.target = inner, inner.target
        # The branch index, zigzagged, in its one byte: 0 for the first member, 2 for the second.
        self.null_byte, self.value_byte = (0, 2) if null_first else (2, 0)

    def misread(self, array, payload, starts):
        present = non_null(array)
        wrong = payload[starts] != np.where(present, self.value_byte, self.null_byte)
        if self.inner.has_branches:
            deeper = self.inner.misread(array, payload, starts + 1)
            if deeper is not None:
                wrong |= deeper & present
        return wrong

    def lengths(self, array):
        return 1 + np.where(non_null(array), self.inner.lengths(array), 0)

    def misfits(self, array):
        found = self.inner.misfits(array)
        return None if found is None else found & non_null(array)

    def convert(self, array):
        return self.inner.convert(array)


def _with_branch_hits(found: np.ndarray | None, branch_mask: np.ndarray | None, chosen: np.ndarray,
                      offsets: np.ndarray) -> np.ndarray | None:
    """`found` (a mask over the union's rows, or None) joined with a mask over one branch's child rows."""
    if branch_mask is None:
        return found
    hits = np.zeros(len(chosen), dtype=bool)
    hits[chosen] = branch_mask[offsets[chosen]]
    return hits if found is None else found | hits


def _union_parts(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    type_ids = np.frombuffer(array.buffers()[1], dtype=np.int8, count=len(array) + array.offset)[array.offset:]
    offsets = np.frombuffer(array.buffers()[2], dtype=np.int32, count=len(array) + array.offset)[array.offset:]
    return type_ids.astype(np.int64), offsets.astype(np.int64)


class _GeneralUnion(_Node):
    """Any other union: the reader's dense union becomes a struct of `member0, member1, …` with one set."""

    def __init__(self, branches: list[_Node | None], target: pa.StructType):
        self.branches, self.target = branches, target
        self.has_branches = any(branch is not None and branch.has_branches for branch in branches)

    def misread(self, array, payload, starts):
        type_ids, offsets = _union_parts(array)
        at_value = starts + _varint_lengths(type_ids << 1)
        found = None
        for branch_id, branch in enumerate(self.branches):
            chosen = type_ids == branch_id
            if branch is None or not branch.has_branches or not chosen.any():
                continue
            values = array.field(branch_id)
            at = np.zeros(len(values), dtype=np.int64)
            at[offsets[chosen]] = at_value[chosen]
            found = _with_branch_hits(found, branch.misread(values, payload, at), chosen, offsets)
        return found

    def lengths(self, array):
        type_ids, offsets = _union_parts(array)
        total = _varint_lengths(type_ids << 1)
        for branch_id, branch in enumerate(self.branches):
            chosen = type_ids == branch_id
            if branch is not None and chosen.any():
                total[chosen] += branch.lengths(array.field(branch_id))[offsets[chosen]]
        return total

    def misfits(self, array):
        type_ids, offsets = _union_parts(array)
        found = None
        for branch_id, branch in enumerate(self.branches):
            chosen = type_ids == branch_id
            mask = branch.misfits(array.field(branch_id)) if branch is not None and chosen.any() else None
            found = _with_branch_hits(found, mask, chosen, offsets)
        return found

    def convert(self, array):
        type_ids, offsets = _union_parts(array)
        members = []
        for branch_id, branch in enumerate(self.branches):
            if branch is None:
                continue
            chosen = type_ids == branch_id
            picks = pa.array(np.where(chosen, offsets, 0), pa.int64(), mask=~chosen)
            members.append(branch.convert(array.field(branch_id)).take(picks))
        null_branch = self.branches.index(None) if None in self.branches else -1
        is_null = type_ids == null_branch
        return pa.StructArray.from_arrays(members, fields=list(self.target),
                                          mask=pa.array(is_null) if is_null.any() else None)


class _SingleUnion(_Node):
    """A one-member union ["T"]: the reader keeps a one-branch union; the lake has T."""

    def __init__(self, inner: _Node):
        self.inner, self.target = inner, inner.target
        self.has_branches = inner.has_branches

    def misread(self, array, payload, starts):
        return self.inner.misread(self._values(array), payload, starts + 1)

    def _values(self, array):
        _, offsets = _union_parts(array)
        return array.field(0).take(pa.array(offsets))

    def lengths(self, array):
        return 1 + self.inner.lengths(self._values(array))

    def misfits(self, array):
        return self.inner.misfits(self._values(array))

    def convert(self, array):
        return self.inner.convert(self._values(array))


class _Pseudonymized(_Node):
    """A pii field: its value's text, replaced by its pseudonym."""

    def __init__(self, inner: _Node, pseudonymize: ColumnPseudonymize | None):
        self.inner, self.pseudonymize, self.target = inner, pseudonymize, pa.string()
        self.has_branches = inner.has_branches
        self.repeats: bool | None = None  # whether values repeat enough to hash each distinct one once; seen once

    def misread(self, array, payload, starts):
        return self.inner.misread(array, payload, starts)

    def lengths(self, array):
        return self.inner.lengths(array)

    def misfits(self, array):
        return self.inner.misfits(array)

    def convert(self, array):
        values = self.inner.convert(array)
        values = values if values.type == pa.string() else values.cast(pa.string())
        if self.repeats is None:
            present = len(values) - values.null_count
            self.repeats = pc.count_distinct(values).as_py() < present * _REPEATS_BELOW
        return self.pseudonymize(values, self.repeats)
