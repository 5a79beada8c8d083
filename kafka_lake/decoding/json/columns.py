"""The columnar path of JSON values: a batch's JSON objects of one schema version read at once by pyarrow's JSON reader
into Arrow, checked and converted column by column into exactly the columns the record path (`json.records`) gives.
"""

from __future__ import annotations

import decimal
import io
import re
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from kafka_lake.decoding.avro.columnar_mapping import (
    _COLUMNAR_LOGICAL_RANGES,
    _PII_SCALARS,
    _UUID_TEXT,
    _ZONED_TIMESTAMP,
    DEBEZIUM_TIMESTAMP_RANGES,
    ColumnPseudonymize,
    NotColumnar,
    non_null,
)
from kafka_lake.decoding.avro.records import UNFIT_FOR_ARROW
from kafka_lake.decoding.decoded_batch import Placement
from kafka_lake.decoding.placement import TimePlacement, place_by_hour
from kafka_lake.kafka.framing import FramedValues
from kafka_lake.kafka.records import KafkaBatch, KafkaColumns
from kafka_lake.schemas.arrow_mapping import MAX_DECIMAL_PRECISION, MAX_JSON_DEPTH, ArrowMapping
from kafka_lake.schemas.avro_types import (
    AvroType,
    json_keys,
    logical_type,
    named_types,
    non_null_members,
    resolve,
    type_name,
)
from kafka_lake.schemas.connect_types import (
    INFINITE_COUNTS,
    NANO_TIME,
    NANO_TIMESTAMP,
    VARIABLE_SCALE_DECIMAL,
    ZONED_TIMESTAMP,
    connect_name,
)
from kafka_lake.table_spec import SchemaVersion

_PREFIX, _SUFFIX = b'{"v":', b"}\n"
_ROW_NAMED = re.compile(r"in row (\d+)")
SMALLEST_SPLIT = 4  # below this many records, cornering a broken one costs more than the record path does
_INT32 = (-(2**31), 2**31 - 1)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class JsonColumns:
    """The columnar path of one schema version's JSON values (see `json_mapping_for`): placed as columns; a record
    the path cannot vouch for is left to the record path, which lands it or says why not."""

    def __init__(self, version: int, mapping: JsonMapping, placement: TimePlacement):
        self._version = version
        self._mapping = mapping
        self._placement = placement

    def decode(self, framed: FramedValues, indices: np.ndarray, batch: KafkaBatch, kafka: KafkaColumns,
               placed: dict[Placement, list[pa.Table]]) -> list[int]:
        """Lands what the columnar path vouches for of the batch's records at `indices` in `placed`; returns the
        records left for the record path."""
        mapping = self._mapping
        lines = _JsonLines(framed, indices)
        left: list[int] = list(lines.refused)
        for part, read in _read_isolating(lines, mapping.read_schema, left):
            values = read.column(0)
            refused = mapping.misfits(values)
            if refused.any():
                left.extend(part[refused])
                part, values = part[~refused], values.filter(pa.array(~refused))
            if not len(part):
                continue
            try:
                converted = mapping.converted(values)
                hours, unplaced = self._placement.hours_of_columns(
                    pa.RecordBatch.from_arrays(converted, names=list(mapping.field_names)), batch.timestamps_ms, part)
                if unplaced.any():
                    left.extend(part[unplaced])
                    part, hours = part[~unplaced], hours[~unplaced]
                    converted = [column.filter(pa.array(~unplaced)) for column in converted]
                if not len(part):
                    continue
                table = pa.Table.from_arrays(mapping.pseudonymized(converted) + kafka.take(part), schema=mapping.schema)
            except UNFIT_FOR_ARROW:  # not expected: the record path then decides, record by record
                left.extend(part)
                continue
            place_by_hour(placed, self._version, table, hours)
        return left


class _JsonLines:
    """The records' JSON payloads (one schema id, so one framing) each wrapped as one line `{"v":…}`, end to end; a
    stretch of them as a block. Values with a line break, with brackets enough to nest past `MAX_JSON_DEPTH`, or with
    the text of a literal the reader takes and JSON has not (`NaN`, `Inf`, `Infinity`, signed or not: the reader takes
    them as numbers in any field) are `refused`: the record path reads them (a value that merely says "Info" in a
    string is read there too, to the same row).

    The reader takes a block of lines. Each record is one line, `{"v":` + its JSON + `}`, so a line is one object
    whatever a value holds: a value that is no object, two objects or a broken one fails its line. What the reader
    might read otherwise than the record path is never given to it: besides the values above (deep nesting the record
    path refuses), those that are no UTF-8 text (`_utf8`)."""

    def __init__(self, framed: FramedValues, indices: np.ndarray):
        header = framed.payload_starts[indices] - framed.offsets[indices]
        if len(indices) and (header != header[0]).any():
            raise ValueError("a JSON block holds values of one framing")
        values = framed.values if len(indices) == len(framed.values) else framed.values.take(pa.array(indices))
        payloads = pc.binary_slice(values, int(header[0]) if len(indices) else 0, 2**31 - 1)
        brackets = pc.count_substring_regex(payloads, r"[\[{]").to_numpy(zero_copy_only=False)
        # One pass for both: a line break, or the text of a literal the reader takes and JSON has not.
        unreadable = pc.match_substring_regex(payloads, "[\n\r]|NaN|Inf").to_numpy(zero_copy_only=False)
        fine = (brackets <= MAX_JSON_DEPTH) & ~unreadable & (pc.binary_length(payloads).to_numpy(zero_copy_only=False) > 0)
        fine &= _utf8(payloads)
        self.refused = list(indices[~fine])
        self.indices = indices[fine]
        lines = pc.binary_join_element_wise(pa.scalar(_PREFIX), payloads.filter(pa.array(fine)), pa.scalar(_SUFFIX), b"")
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + lines.offset + 1)[lines.offset:]
        self.line_starts = offsets.astype(np.int64) - int(offsets[0])
        data = lines.buffers()[2]
        self.data = b"" if data is None else data.to_pybytes()[int(offsets[0]):int(offsets[-1])]

    def block(self, first: int, stop: int) -> bytes:
        return self.data[self.line_starts[first]:self.line_starts[stop]]


def read_json_field(framed: FramedValues, indices: np.ndarray, path: tuple[tuple[str, ...], ...], leaf: pa.DataType
                    ) -> tuple[list[tuple[int, object]], list[int]]:
    """(record index, value) of the field at `path` (each step's JSON keys, `json_keys_at`) of the JSON objects at
    `indices` (one framing), read as `leaf` (None: absent or null), and the records the reader would not vouch for,
    which the caller reads record by record."""
    read_type = leaf
    for keys in reversed(path):
        read_type = pa.struct([pa.field(key, read_type) for key in keys])
    lines = _JsonLines(framed, indices)
    left: list[int] = list(lines.refused)
    found: list[tuple[int, object]] = []
    for part, read in _read_isolating(lines, pa.schema([pa.field("v", read_type)]), left):
        column = read.column(0)
        objects = non_null(column)  # a value that is JSON null is no object: the record path says so
        left.extend(part[~objects])
        for keys in path:
            column = _Keys.first_present([pc.struct_field(column, key) for key in keys])
        found.extend((int(i), value) for i, value, fine in zip(part, column.to_pylist(), objects) if fine)
    return found, [int(i) for i in left]


def _utf8(payloads: pa.BinaryArray) -> np.ndarray:
    """Which payloads are UTF-8 text: the reader lets broken UTF-8 inside a JSON string through, which the record path
    refuses. Only a payload with a byte past ASCII is decoded to tell."""
    fine = np.ones(len(payloads), dtype=bool)
    data = payloads.buffers()[2]
    if data is None or not len(payloads):
        return fine
    offsets = np.frombuffer(payloads.buffers()[1], dtype=np.int32, count=len(payloads) + payloads.offset + 1)[payloads.offset:]
    bytes_ = np.frombuffer(data, dtype=np.uint8)[offsets[0]:offsets[-1]]
    past_ascii = np.unique(np.searchsorted(offsets, np.flatnonzero(bytes_ >= 0x80) + offsets[0], side="right") - 1)
    for row in past_ascii:
        try:
            payloads[int(row)].as_py().decode("utf-8")
        except UnicodeDecodeError:
            fine[row] = False
    return fine


def _read_isolating(lines: _JsonLines, schema: pa.Schema, left: list[int]) -> Iterator[tuple[np.ndarray, pa.RecordBatch]]:
    """(record indices, rows read) for the stretches the reader reads whole, one row per record; a record it refuses
    is cut out (at the row it names, or by halving) and left for the record path, with its neighbours where a stretch
    is too short to cut. The reader refuses a whole block for one bad line; cut around it, a broken record costs only
    itself."""
    stretches = [(0, len(lines.indices))]
    while stretches:
        first, stop = stretches.pop()
        if first >= stop:
            continue
        read, named_row = _read_lines(lines.block(first, stop), schema, stop - first)
        if read is not None:
            yield lines.indices[first:stop], read
            continue
        if stop - first <= SMALLEST_SPLIT:
            left.extend(lines.indices[first:stop])
        elif named_row is not None and first + named_row < stop:
            suspect = first + named_row
            left.append(lines.indices[suspect])
            stretches += [(suspect + 1, stop), (first, suspect)]
        else:
            middle = (first + stop) // 2
            stretches += [(middle, stop), (first, middle)]


def _read_lines(block: bytes, schema: pa.Schema, count: int) -> tuple[pa.RecordBatch | None, int | None]:
    """(the lines read as one batch of `count` rows, or None; the row the reader named as broken, if any)."""
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=False)
    try:
        table = pj.read_json(io.BytesIO(block), parse_options=options,
                             read_options=pj.ReadOptions(use_threads=False, block_size=len(block) + 1))
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as error:  # ArrowInvalid for what it refuses, UnicodeDecodeError for bytes no UTF-8
        named = _ROW_NAMED.search(str(error))
        return None, int(named[1]) if named else None
    if table.num_rows != count:
        return None, None
    return table.combine_chunks().to_batches()[0], None


# --- the mapping: what the reader reads, what the record path would refuse, the lake's columns -----------------


class _Keys:
    """The JSON keys of a record's fields, as the reader reads them: each field's name, then its Avro aliases (keys that
    are no Avro names, `$schema`); a field's value is that of its first key present and not null, as on the record
    path."""

    def __init__(self, fields: list[dict]):
        self.keys = [json_keys(f) for f in fields]
        self.aliased = any(len(keys) > 1 for keys in self.keys)

    def read_type(self, read_types: list[pa.DataType]) -> pa.StructType:
        return pa.struct([pa.field(key, read_type) for keys, read_type in zip(self.keys, read_types) for key in keys])

    def columns(self, array: pa.StructArray) -> list[pa.Array]:
        """Each field's column of the objects read as `read_type`."""
        if not self.aliased:
            return [array.field(index) for index in range(len(self.keys))]
        columns, at = [], 0
        for keys in self.keys:
            columns.append(self.first_present([array.field(index) for index in range(at, at + len(keys))]))
            at += len(keys)
        return columns

    @staticmethod
    def first_present(under_keys: list) -> pa.Array:
        """Per row, the value under the first key that holds one not null."""
        chosen = under_keys[-1]
        for under in reversed(under_keys[:-1]):
            chosen = pc.if_else(under.is_valid(), under, chosen)
        return chosen


class JsonMapping:
    """One schema version's columnar JSON reading: the schema the reader reads `v` with, and a node per field."""

    def __init__(self, schema: pa.Schema, field_names: tuple[str, ...], nodes: tuple[_Node, ...], keys: _Keys):
        self.schema = schema
        self.field_names = field_names
        self.nodes = nodes
        self.keys = keys
        self.read_schema = pa.schema([pa.field("v", keys.read_type([node.read_type for node in nodes]))])

    def misfits(self, values: pa.StructArray) -> np.ndarray:
        found = ~non_null(values)  # never expected: every line holds an object
        for node, column in zip(self.nodes, self.keys.columns(values)):
            mask = node.misfits(column)
            if mask is not None:
                found |= mask
        return found

    def converted(self, values: pa.StructArray) -> list[pa.Array]:
        """The fields' columns before pseudonyms: what placement reads."""
        return [node.convert(column) for node, column in zip(self.nodes, self.keys.columns(values))]

    def pseudonymized(self, converted: list[pa.Array]) -> list[pa.Array]:
        return [node.pseudonyms(column) for node, column in zip(self.nodes, converted)]


def json_mapping_for(version: SchemaVersion, mapping: ArrowMapping, pii_fields: tuple[tuple[str, ...], ...],
                     pseudonymize: ColumnPseudonymize | None, time_field: tuple[str, ...] | None) -> JsonMapping:
    """Compiles a version, whose record path maps it by `mapping`, for the columnar JSON path, or raises `NotColumnar`
    saying why the record path must read it."""
    if version.recursions:
        raise NotColumnar(f"a record contains itself ({version.recursions[0]}); its JSON text is built record by record")
    if time_field is not None and any(time_field[:len(p)] == p for p in pii_fields):
        raise NotColumnar("the event time field is pseudonymized; the record path places it by its value")
    if pii_fields and pseudonymize is None:
        raise ValueError(f"pii fields of {version.file} need a pseudonymizer; refusing to land them in clear")
    compiler = _Compiler(version.schema, pseudonymize)
    targets = list(mapping.schema)[: len(mapping.field_names)]
    nodes = []
    for avro_field, target in zip(version.schema["fields"], targets):
        name = avro_field["name"]
        if (name,) in pii_fields:
            nodes.append(compiler.pii(avro_field["type"], name))
        else:
            deeper = frozenset(p[1:] for p in pii_fields if len(p) > 1 and p[0] == name)
            nodes.append(compiler.node(avro_field["type"], target.type, deeper))
    return JsonMapping(mapping.schema, mapping.field_names, tuple(nodes), _Keys(version.schema["fields"]))


class _Node:
    """One Avro type: the type the reader reads its JSON in, which values the record path would refuse, the column.

    Each column is read in the reader's widest type and checked as the record path checks it (an int's range, a
    float's, a decimal's digits, an enum's symbols, a date's years, a field absent where its type has no null)."""

    read_type: pa.DataType
    target: pa.DataType
    nullable = False  # whether JSON null (or an absent field) is a value of the type

    def misfits(self, array: pa.Array) -> np.ndarray | None:
        """Values the record path refuses: a null where the type has none, or a value it does not hold."""
        found = self.refused(array)
        if not self.nullable and array.null_count:
            missing = ~non_null(array)
            found = missing if found is None else found | missing
        return found

    def refused(self, array: pa.Array) -> np.ndarray | None:
        return None

    def convert(self, array: pa.Array) -> pa.Array:
        return array if array.type == self.target else array.cast(self.target)

    def pseudonyms(self, column: pa.Array) -> pa.Array:
        return column


class _Scalar(_Node):
    def __init__(self, read_type: pa.DataType, target: pa.DataType, bounds: tuple[float, float] | None = None,
                 view: pa.DataType | None = None):
        self.read_type, self.target, self.bounds, self.view = read_type, target, bounds, view

    def refused(self, array):
        if self.bounds is None or not len(array):
            return None
        values = array.fill_null(0).to_numpy(zero_copy_only=False)  # int64, exact
        low, high = self.bounds
        return ((values < low) | (values > high)) & non_null(array)

    def convert(self, array):
        if self.view is not None:  # an int count as a date, time or timestamp: the same bits
            return array.cast(self.view).view(self.target)
        return super().convert(array)


class _Float32(_Node):
    read_type, target = pa.float64(), pa.float32()

    def refused(self, array):
        values = np.nan_to_num(array.to_numpy(zero_copy_only=False), nan=0.0)
        with np.errstate(over="ignore"):
            return np.isinf(values.astype(np.float32))  # a finite double past a float's range


class _Text(_Node):
    """string, enum (one of its symbols), uuid (the canonical text, lowercased as Python prints a UUID)."""

    read_type = pa.string()

    def __init__(self, target: pa.DataType, symbols: list[str] | None = None, pattern: str | None = None,
                 lower: bool = False):
        self.target, self.symbols, self.pattern, self.lower = target, symbols, pattern, lower

    def refused(self, array):
        if self.symbols is not None:
            taken = pc.is_in(array, value_set=pa.array(self.symbols, pa.string()))
        elif self.pattern is not None:
            taken = pc.match_substring_regex(array, self.pattern)
        else:
            return None
        return ~np.asarray(taken.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool) & non_null(array)

    def convert(self, array):
        return pc.ascii_lower(array) if self.lower else super().convert(array)


class _Decimal(_Node):
    """Read at the widest precision with the column's scale (the reader refuses more fractional digits), then held to
    the column's precision: the reader lets text through with more digits than a precision allows."""

    def __init__(self, precision: int, scale: int, target: pa.DataType):
        self.read_type, self.target = pa.decimal128(MAX_DECIMAL_PRECISION, scale), target
        # The first value past the column; at the widest precision, every value read fits.
        self._limit = None if precision >= MAX_DECIMAL_PRECISION else pa.scalar(
            decimal.Decimal(10) ** (precision - scale), self.read_type)

    def refused(self, array):
        if self._limit is None:
            return None
        too_big = pc.greater_equal(pc.abs(array), self._limit)
        return np.asarray(too_big.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


class _Nanos(_Node):
    read_type = pa.int64()

    def __init__(self, target: pa.DataType, infinite: bool = False):
        self.target, self.infinite = target, infinite

    def refused(self, array):
        if not self.infinite:
            return None
        return np.isin(array.fill_null(0).to_numpy(zero_copy_only=False), INFINITE_COUNTS)  # the record path lands them

    def convert(self, array):
        micros = np.floor_divide(array.fill_null(0).to_numpy(zero_copy_only=False), 1000)
        return pa.array(micros, pa.int64(), mask=None if array.null_count == 0 else ~non_null(array)).cast(self.target)


class _Zoned(_Text):
    def __init__(self, target: pa.DataType):
        super().__init__(target, pattern=_ZONED_TIMESTAMP)


class _Struct(_Node):
    def __init__(self, keys: _Keys, children: list[_Node], target: pa.StructType):
        self.keys, self.children, self.target = keys, children, target
        self.read_type = keys.read_type([child.read_type for child in children])

    def refused(self, array):
        present = non_null(array)
        found = None
        for child, column in zip(self.children, self.keys.columns(array)):
            mask = child.misfits(column)
            if mask is not None:
                mask = mask & present  # a null record's fields are null too, and no fault of theirs
                found = mask if found is None else found | mask
        return found

    def convert(self, array):
        columns = [child.pseudonyms(child.convert(column)) for child, column in zip(self.children, self.keys.columns(array))]
        mask = None if array.null_count == 0 else pc.invert(array.is_valid())
        return pa.StructArray.from_arrays(columns, fields=list(self.target), mask=mask)


class _List(_Node):
    def __init__(self, item: _Node, target: pa.ListType):
        self.item, self.target = item, target
        self.read_type = pa.list_(item.read_type)

    def _items(self, array):
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + array.offset + 1)[array.offset:]
        offsets = offsets.astype(np.int64)
        return offsets - offsets[0], array.values.slice(offsets[0], offsets[-1] - offsets[0])

    def refused(self, array):
        relative, items = self._items(array)
        mask = self.item.misfits(items)
        if mask is None or not mask.any():
            return None
        running = np.concatenate(([0], np.cumsum(mask.astype(np.int64))))
        return (running[relative[1:]] - running[relative[:-1]]) > 0

    def convert(self, array):
        relative, items = self._items(array)
        mask = None if array.null_count == 0 else pc.invert(array.is_valid())
        return pa.ListArray.from_arrays(pa.array(relative, pa.int32()), self.item.pseudonyms(self.item.convert(items)),
                                        type=self.target, mask=mask)


class _Pseudonymized(_Node):
    def __init__(self, inner: _Node, pseudonymize: ColumnPseudonymize | None):
        self.inner, self.pseudonymize, self.target = inner, pseudonymize, pa.string()
        self.read_type, self.nullable = inner.read_type, inner.nullable
        self.repeats: bool | None = None

    def refused(self, array):
        return self.inner.refused(array)

    def convert(self, array):
        return self.inner.convert(array)  # the value itself: placement reads it before its pseudonym is taken

    def pseudonyms(self, column):
        values = column if column.type == pa.string() else column.cast(pa.string())
        if self.repeats is None:
            self.repeats = pc.count_distinct(values).as_py() < (len(values) - values.null_count) * 0.8
        return self.pseudonymize(values, self.repeats)


class _Compiler:
    def __init__(self, schema: dict, pseudonymize: ColumnPseudonymize | None):
        self.names = named_types(schema)
        self.pseudonymize = pseudonymize

    def node(self, avro: AvroType, target: pa.DataType, pii: frozenset = frozenset()) -> _Node:
        avro = resolve(avro, self.names)
        kind, logical, connect = type_name(avro), logical_type(avro), connect_name(avro)
        if kind == "union":
            members = non_null_members(avro)
            if len(members) != 1:
                raise NotColumnar(f"a union of {len(members)} types: its member is chosen by trying each in turn")
            inner = self.node(members[0], target, pii)
            inner.nullable = "null" in avro
            return inner
        if (kind, connect) == ("record", VARIABLE_SCALE_DECIMAL):
            raise NotColumnar("a Debezium VariableScaleDecimal holds base64 bytes")
        if kind in ("record", "error"):
            children = []
            for index, avro_field in enumerate(avro.get("fields", [])):
                name = avro_field["name"]
                if (name,) in pii:
                    children.append(self.pii(avro_field["type"], name))
                else:
                    deeper = frozenset(p[1:] for p in pii if len(p) > 1 and p[0] == name)
                    children.append(self.node(avro_field["type"], target.field(index).type, deeper))
            return _Struct(_Keys(avro.get("fields", [])), children, target)
        if kind == "array":
            return _List(self.node(avro["items"], target.value_type), target)
        if kind == "map":
            raise NotColumnar("a map: the JSON reader reads objects only as records")
        if (kind, connect) in (("long", NANO_TIMESTAMP), ("long", NANO_TIME)):
            return _Nanos(target, infinite=connect == NANO_TIMESTAMP)
        if kind == "long" and connect in DEBEZIUM_TIMESTAMP_RANGES:
            return _Scalar(pa.int64(), target, DEBEZIUM_TIMESTAMP_RANGES[connect], view=pa.int64())
        if (kind, connect) == ("string", ZONED_TIMESTAMP):
            return _Zoned(target)
        if logical == "decimal" and kind in ("bytes", "fixed"):
            if not pa.types.is_decimal(target):
                raise NotColumnar(f"decimal({avro['precision']}) lands as its exact text")
            return _Decimal(avro["precision"], avro.get("scale", 0), target)
        if kind in ("bytes", "fixed"):
            raise NotColumnar(f"{kind} values are base64 text, which the JSON reader does not decode")
        if kind == "enum":
            return _Text(target, symbols=avro["symbols"])
        if kind == "string":
            return _Text(target, pattern=_UUID_TEXT, lower=True) if logical == "uuid" else _Text(target)
        if (kind, logical) in _COLUMNAR_LOGICAL_RANGES:
            bounds = _COLUMNAR_LOGICAL_RANGES[kind, logical]
            return _Scalar(pa.int64(), target, bounds, view=pa.int32() if kind == "int" else pa.int64())
        if kind == "int":
            return _Scalar(pa.int64(), target, _INT32)
        if kind == "float":
            return _Float32()
        simple = {"null": pa.null(), "boolean": pa.bool_(), "long": pa.int64(), "double": pa.float64()}
        if kind not in simple:
            raise NotColumnar(f"Avro type {avro!r} has no columnar JSON reading")
        node = _Scalar(simple[kind], target)
        node.nullable = kind == "null"
        return node

    def pii(self, avro: AvroType, name: str) -> _Node:
        resolved = resolve(avro, self.names)
        members = non_null_members(resolved) if isinstance(resolved, list) else [resolved]
        value = resolve(members[0], self.names) if len(members) == 1 else None
        if value is None or type_name(value) not in _PII_SCALARS:
            raise NotColumnar(f"pii field {name!r} is no plain value, whose pseudonym text only the record path gives")
        return _Pseudonymized(self.node(resolved, _PII_VALUE_TYPES[type_name(value)]), self.pseudonymize)


# The column a pii field's value is converted to before its text is taken, as the record path's value has it.
_PII_VALUE_TYPES = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_(), "enum": pa.string()}
