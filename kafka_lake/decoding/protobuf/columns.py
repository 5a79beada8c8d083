"""The columnar path of Protobuf values: a batch's messages of one schema version read field by field from the wire
format across all of them at once (`fields`), each field straight into one Arrow array, no value built per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kafka_lake.decoding.avro.columnar_mapping import _COLUMNAR_LOGICAL_RANGES, ColumnPseudonymize, NotColumnar
from kafka_lake.decoding.avro.records import UNFIT_FOR_ARROW
from kafka_lake.decoding.decoded_batch import Placement
from kafka_lake.decoding.placement import TimePlacement, place_by_hour
from kafka_lake.decoding.protobuf.avro_shape import JSON_MESSAGES, TIMESTAMP, WRAPPERS, is_map, is_repeated, real_oneofs
from kafka_lake.decoding.protobuf.fields import I32, I64, LEN, VARINT, Fields, fixed, packed_varints, padded, scan
from kafka_lake.decoding.protobuf.proto_files import CompiledProto
from kafka_lake.decoding.protobuf.records import json_value, message_reader
from kafka_lake.decoding.protobuf.wire import message_indexes_bytes
from kafka_lake.kafka.framing import FramedValues
from kafka_lake.kafka.records import KafkaBatch, KafkaColumns
from kafka_lake.schemas.arrow_mapping import ArrowMapping, json_text
from kafka_lake.table_spec import SchemaVersion

SMALLEST_SPLIT = 4  # below this many messages, cornering one that cannot be gathered costs more than the record path
MAX_SCHEMA_DEPTH = 40  # messages nested deeper than this in a schema are left to the runtime's depth limit
_RUNTIME_DEPTH = 100  # how deep the runtime's parse follows messages
_T = FieldDescriptor
_UNSIGNED_64 = (_T.TYPE_UINT64, _T.TYPE_FIXED64)
_SIGNED_OR_SMALL = {_T.TYPE_INT32, _T.TYPE_SINT32, _T.TYPE_SFIXED32, _T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64,
                    _T.TYPE_UINT32, _T.TYPE_FIXED32}
# A pii field whose record-path text (Python's str of the value) Arrow's cast to string writes alike.
_PII_KINDS = _SIGNED_OR_SMALL | {_T.TYPE_STRING, _T.TYPE_BOOL, _T.TYPE_ENUM}
_FIRST_MICROS, _LAST_MICROS = _COLUMNAR_LOGICAL_RANGES["long", "timestamp-micros"]  # what a Python datetime holds
_FIRST_SECONDS, _LAST_SECONDS = _FIRST_MICROS // 10**6 - 1, _LAST_MICROS // 10**6 + 1
_TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_LOW_32 = np.uint64(0xFFFFFFFF)

Mask = np.ndarray | None  # True where the value is null


# What is read is what `records.message_reader` reads from the runtime's parse, field for field
# (`tests/test_protobuf_columns.py` holds both paths equal over random and corrupted messages). A message the wire
# reading cannot vouch for is a misfit, left to the record path, which parses it with the runtime and lands it or says
# why not: bytes that are no wire format, a field number written with another wire type than the schema's, a singular
# field or oneof written twice (the runtime merges or keeps the last), a map key written twice, a group, a proto2
# required field missing or closed enum value unknown, a Timestamp outside the years 1..9999, an event time it cannot
# place. A field where a message recurs is read by the runtime, value by value, into the JSON text the record path
# writes; its record is also parsed whole by the runtime, whose depth limit then judges it as the record path's parse
# does. A batch in which building a column raises (a string that is no UTF-8, JSON text nested too deep) is cut in
# halves until the records at fault are alone, and those take the record path.
class ProtobufColumns:
    """The columnar path of one schema version (see `protobuf_mapping_for`)."""

    def __init__(self, version: int, mapping: ProtobufMapping, placement: TimePlacement):
        self._version = version
        self._mapping = mapping
        self._placement = placement

    def decode(self, framed: FramedValues, indices: np.ndarray, batch: KafkaBatch, kafka: KafkaColumns,
               placed: dict[Placement, list[pa.Table]]) -> list[int]:
        """Lands what the columnar path vouches for of the batch's records at `indices` in `placed`; returns the
        records left for the record path."""
        mapping = self._mapping
        left: list[int] = []
        messages = mapping.messages(framed, indices, left)
        for part, columns, misfit in _gathered_isolating(mapping, messages, left):
            try:
                hours, unplaced = self._placement.hours_of_columns(
                    pa.RecordBatch.from_arrays(columns, names=list(mapping.field_names)), batch.timestamps_ms, part)
                refused = misfit | unplaced
                if refused.any():
                    left.extend(part[refused])
                    part, hours = part[~refused], hours[~refused]
                    keep = pa.array(~refused)
                    columns = [column.filter(keep) for column in columns]
                if not len(part):
                    continue
                table = pa.Table.from_arrays(columns + kafka.take(part), schema=mapping.schema)
            except UNFIT_FOR_ARROW:  # not expected: the record path then decides, record by record
                left.extend(part)
                continue
            place_by_hour(placed, self._version, table, hours)
        return left


class _Messages:
    """Messages of a batch: their bytes at [starts, ends) of `data` (padded, see `fields`), and which records they are."""

    def __init__(self, data: np.ndarray, records: np.ndarray, starts: np.ndarray, ends: np.ndarray, parse: Any):
        self.data, self.records, self.starts, self.ends, self.parse = data, records, starts, ends, parse
        self.buffer = pa.py_buffer(data)

    def __len__(self) -> int:
        return len(self.records)

    def part(self, first: int, stop: int) -> _Messages:
        return _Messages(self.data, self.records[first:stop], self.starts[first:stop], self.ends[first:stop], self.parse)

    def payload(self, index: int) -> bytes:
        return self.data[self.starts[index]:self.ends[index]].tobytes()


def _gathered_isolating(mapping: ProtobufMapping, messages: _Messages, left: list[int]
                        ) -> Iterator[tuple[np.ndarray, list[pa.Array], np.ndarray]]:
    """(record indices, their columns, which hold a value only the record path may judge) of the stretches gathered
    whole; a stretch that raises is halved, and one too short to halve is left whole."""
    stretches = [(0, len(messages))]
    while stretches:
        first, stop = stretches.pop()
        if first >= stop:
            continue
        chunk = messages.part(first, stop)
        try:
            columns, misfit = mapping.columns(chunk)
        except (KeyboardInterrupt, SystemExit, MemoryError):
            raise
        except Exception:  # a string that is no UTF-8, a recursive value nested deeper than JSON text may: the record path says
            if stop - first <= SMALLEST_SPLIT:
                left.extend(chunk.records)
            else:
                middle = (first + stop) // 2
                stretches += [(middle, stop), (first, middle)]
            continue
        yield chunk.records, columns, misfit


class ProtobufMapping:
    """One version's message as columns: which bytes begin its messages, and a node per top-level field reading it
    from their wire format."""

    def __init__(self, compiled: CompiledProto, mapping: ArrowMapping, root: _Message):
        self.schema = mapping.schema
        self.field_names = mapping.field_names
        self._root = root
        self._parse = compiled.message_class.FromString
        # The message indexes as producers write them for the version's message: others take the record path.
        self._indexes = message_indexes_bytes(compiled.indexes_of(compiled.message))

    def messages(self, framed: FramedValues, indices: np.ndarray, left: list[int]) -> _Messages:
        """The messages of the records at `indices` whose indexes name the version's message as producers write them;
        the others are added to `left`."""
        prefix = len(self._indexes)
        starts = framed.payload_starts[indices]
        ends = framed.offsets[indices + 1]
        fits = ends - starts >= prefix
        for position, byte in enumerate(self._indexes):
            fits &= framed.data[np.minimum(starts + position, len(framed.data) - 1)] == byte
        left.extend(indices[~fits])
        return _Messages(padded(framed.data), indices[fits], starts[fits] + prefix, ends[fits], self._parse)

    def columns(self, messages: _Messages) -> tuple[list[pa.Array], np.ndarray]:
        """The top-level columns of `messages`, and which messages hold a value the record path must judge."""
        count = len(messages)
        misfit = np.zeros(count, dtype=bool)
        deep = np.zeros(count, dtype=bool)
        fields = scan(messages.data, messages.starts, messages.ends, misfit)
        columns = self._root.fields(_Reading(messages), fields, misfit, deep)
        for index in np.flatnonzero(deep & ~misfit):
            try:  # a record holding a recursive value: the runtime's parse judges its depth, as on the record path
                messages.parse(messages.payload(int(index)))
            except Exception:
                misfit[index] = True
        return columns, misfit


class _Reading:
    """The bytes every node of one batch reads from."""

    def __init__(self, messages: _Messages):
        self.data = messages.data
        self.buffer = messages.buffer

    def binary(self, starts: np.ndarray, lengths: np.ndarray, nulls: Mask = None) -> pa.Array:
        """The byte strings at `starts` (increasing, not overlapping) as one array, null where `nulls`: the stretches
        between them are elements too, taken out by one `take`."""
        count = len(starts)
        if count == 0:
            return pa.array([], pa.large_binary())
        offsets = np.empty(2 * count + 1, dtype=np.int64)
        offsets[0] = 0
        offsets[1::2] = starts
        offsets[2::2] = starts + lengths
        np.maximum.accumulate(offsets, out=offsets)  # an absent value (length 0 at 0) sits where the last one ended
        spans = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2 * count, [None, pa.py_buffer(offsets),
                                                                                 self.buffer])
        picks = np.arange(1, 2 * count, 2)
        return spans.take(pa.array(picks, mask=nulls) if nulls is not None and nulls.any() else pa.array(picks))

    def bytes_of(self, start: int, length: int) -> bytes:
        return self.data[start:start + length].tobytes()


def protobuf_mapping_for(version: SchemaVersion, mapping: ArrowMapping, pii_fields: tuple[tuple[str, ...], ...],
                         pseudonymize: ColumnPseudonymize | None, time_field: tuple[str, ...] | None) -> ProtobufMapping:
    """Compiles a version, whose record path maps it by `mapping`, for the columnar path, or raises `NotColumnar`
    saying why the record path must read it."""
    if time_field is not None and any(time_field[:len(p)] == p for p in pii_fields):
        raise NotColumnar("the event time field is pseudonymized; the record path places it by its value")
    if pii_fields and pseudonymize is None:
        raise ValueError(f"pii fields of {version.file} need a pseudonymizer; refusing to land them in clear")
    compiled: CompiledProto = version.parsed
    target = pa.struct(list(mapping.schema)[: len(mapping.field_names)])
    root = _Compiler(pseudonymize).message(compiled.message, target, frozenset(pii_fields), ())
    return ProtobufMapping(compiled, mapping, root)


# --- values: each turns the occurrences of one field, gathered from many messages, into a column --------------------


class _Value:
    """One value of a field: `wire` is the wire type it is written with; `column` reads the occurrences' raw values
    (`value`: a varint's or fixed field's bits; for a length-delimited one, its length at `start`)."""

    wire = VARINT
    target: pa.DataType

    def column(self, reading: _Reading, value: np.ndarray, start: np.ndarray, nulls: Mask, misfit: np.ndarray,
               deep: np.ndarray) -> pa.Array:
        """The column of the occurrences (one row each; `nulls`: rows without a value); sets `misfit`/`deep` per row."""
        raise NotImplementedError


class _Number(_Value):
    """A number or bool, its bits turned by `convert` into the numpy values Arrow takes."""

    def __init__(self, wire: int, convert: Callable[[np.ndarray], np.ndarray], target: pa.DataType):
        self.wire, self.convert, self.target = wire, convert, target

    def column(self, reading, value, start, nulls, misfit, deep):
        return pa.array(self.convert(value), self.target, mask=nulls if nulls is not None and nulls.any() else None)


def _int32(bits: np.ndarray) -> np.ndarray:
    return (bits & _LOW_32).astype(np.uint32).view(np.int32)


def _zigzag32(bits: np.ndarray) -> np.ndarray:
    low = (bits & _LOW_32).astype(np.uint32)
    return ((low >> np.uint32(1)) ^ (np.uint32(0) - (low & np.uint32(1)))).view(np.int32)


def _zigzag64(bits: np.ndarray) -> np.ndarray:
    return ((bits >> np.uint64(1)) ^ (np.uint64(0) - (bits & np.uint64(1)))).view(np.int64)


_NUMBERS: dict[int, tuple[int, Callable[[np.ndarray], np.ndarray]]] = {
    _T.TYPE_INT32: (VARINT, _int32),
    _T.TYPE_SINT32: (VARINT, _zigzag32),
    _T.TYPE_SFIXED32: (I32, _int32),
    _T.TYPE_INT64: (VARINT, lambda bits: bits.view(np.int64)),
    _T.TYPE_SINT64: (VARINT, _zigzag64),
    _T.TYPE_SFIXED64: (I64, lambda bits: bits.view(np.int64)),
    _T.TYPE_UINT32: (VARINT, lambda bits: (bits & _LOW_32).astype(np.int64)),
    _T.TYPE_FIXED32: (I32, lambda bits: bits.astype(np.int64)),
    _T.TYPE_UINT64: (VARINT, lambda bits: bits),
    _T.TYPE_FIXED64: (I64, lambda bits: bits),
    _T.TYPE_BOOL: (VARINT, lambda bits: bits != 0),
    _T.TYPE_DOUBLE: (I64, lambda bits: bits.view(np.float64)),
    _T.TYPE_FLOAT: (I32, lambda bits: bits.astype(np.uint32).view(np.float32)),
}


class _Unsigned64(_Value):
    """uint64 and fixed64, as the exact decimal(20, 0) the record path's `Decimal` lands as."""

    def __init__(self, wire: int, target: pa.DataType):
        self.wire, self.target = wire, target

    def column(self, reading, value, start, nulls, misfit, deep):
        return pa.array(value, pa.uint64(), mask=nulls if nulls is not None and nulls.any() else None).cast(self.target)


class _Enum(_Value):
    """An enum's symbol; a number the enum lacks as its decimal text (a closed enum's unknown number: a misfit, as the
    runtime keeps it among unknown fields)."""

    def __init__(self, enum: Any, target: pa.DataType):
        self.target = target
        numbers = sorted(enum.values_by_number)
        self._closed = bool(getattr(enum, "is_closed", False))
        self._known = np.array(numbers, dtype=np.int32)
        self._numbers = pa.array(numbers, pa.int32())
        self._symbols = pa.array([enum.values_by_number[number].name for number in numbers], pa.string())

    def column(self, reading, value, start, nulls, misfit, deep):
        numbers = _int32(value)
        if self._closed:
            misfit |= ~np.isin(numbers, self._known) & (True if nulls is None else ~nulls)
        array = pa.array(numbers, pa.int32(), mask=nulls if nulls is not None and nulls.any() else None)
        symbols = self._symbols.take(pc.index_in(array, value_set=self._numbers))
        return pc.coalesce(symbols, array.cast(pa.string()))


class _Text(_Value):
    """A string (its UTF-8 checked by Arrow's cast, which raises for what the runtime refuses) or bytes."""

    wire = LEN

    def __init__(self, target: pa.DataType):
        self.target = target

    def column(self, reading, value, start, nulls, misfit, deep):
        lengths = value.astype(np.int64)
        if nulls is not None:
            lengths = np.where(nulls, 0, lengths)
        values = reading.binary(start, lengths, nulls)
        try:
            return values.cast(self.target)
        except pa.ArrowInvalid:  # a string that is no UTF-8: a misfit, the runtime refuses it (its neighbours land)
            broken = np.array([not _utf8(text) for text in values.to_pylist()], dtype=bool)
            misfit |= broken
            return pc.if_else(pa.array(broken), pa.scalar(b"", pa.large_binary()), values).cast(self.target)


class _Nested(_Value):
    """A value written as a message of its own: `read` turns the messages' fields into the column."""

    wire = LEN

    def column(self, reading, value, start, nulls, misfit, deep):
        lengths = value.astype(np.int64)
        if nulls is not None:
            lengths = np.where(nulls, 0, lengths)
        inner_misfit = np.zeros(len(start), dtype=bool)
        fields = scan(reading.data, start, start + lengths, inner_misfit)
        column = self.read(reading, fields, nulls, inner_misfit, deep)
        misfit |= inner_misfit
        return column

    def read(self, reading: _Reading, fields: Fields, nulls: Mask, misfit: np.ndarray, deep: np.ndarray) -> pa.Array:
        raise NotImplementedError


class _Timestamp(_Nested):
    """A `google.protobuf.Timestamp` in microseconds (nanoseconds cut, rounding down as the record path's `//`);
    outside the years 1..9999 a misfit, which the record path refuses."""

    target = _TIMESTAMP_US

    def read(self, reading, fields, nulls, misfit, deep):
        seconds = _singular(fields, 1, VARINT, misfit).view(np.int64)
        nanos = _int32(_singular(fields, 2, VARINT, misfit)).astype(np.int64)
        present = np.ones(fields.count, dtype=bool) if nulls is None else ~nulls
        near = (seconds >= _FIRST_SECONDS) & (seconds <= _LAST_SECONDS)
        micros = np.where(near, seconds, 0) * 1_000_000 + nanos // 1000
        misfit |= present & (~near | (micros < _FIRST_MICROS) | (micros > _LAST_MICROS))
        return pa.array(micros, pa.int64(), mask=nulls if nulls is not None and nulls.any() else None).view(self.target)


class _Wrapped(_Nested):
    """A wrapper type (`StringValue`, …): the scalar in its `value` (field 1)."""

    def __init__(self, inner: _Value):
        self.inner, self.target = inner, inner.target

    def read(self, reading, fields, nulls, misfit, deep):
        return _Field(1, self.inner, presence=False).column(reading, fields, nulls, misfit, deep)


class _Json(_Nested):
    """Struct, Value and ListValue: their JSON text, as the record path writes it from the runtime's parse."""

    target = pa.string()

    def __init__(self, message: Descriptor, depth: int):
        self._parse = message_factory.GetMessageClass(message).FromString
        self._shallow_bytes = _shallow_bytes(depth)  # a Struct holds Structs: as deep as a recursive value may be

    def column(self, reading, value, start, nulls, misfit, deep):
        deep |= value >= self._shallow_bytes
        texts = []
        for row in range(len(start)):
            if nulls is not None and nulls[row]:
                texts.append(None)
                continue
            try:
                texts.append(json_value(self._parse(reading.bytes_of(int(start[row]), int(value[row])))))
            except Exception:  # the record path says why: it parses the whole record
                misfit[row] = True
                texts.append(None)
        return pa.array(texts, self.target)


class _Pseudonymized(_Value):
    """A pii field: its value's text, replaced by its pseudonym."""

    def __init__(self, inner: _Value, pseudonymize: ColumnPseudonymize | None):
        self.inner, self.pseudonymize, self.target, self.wire = inner, pseudonymize, pa.string(), inner.wire
        self.repeats: bool | None = None  # whether values repeat enough to hash each distinct one once; seen once

    def column(self, reading, value, start, nulls, misfit, deep):
        column = self.inner.column(reading, value, start, nulls, misfit, deep)
        texts = column if column.type == pa.string() else column.cast(pa.string())
        if self.repeats is None:
            self.repeats = pc.count_distinct(texts).as_py() < (len(texts) - texts.null_count) * 0.8
        assert self.pseudonymize is not None
        return self.pseudonymize(texts, self.repeats)


class _Message(_Nested):
    """A message: a struct of its fields, each read across the messages at once."""

    def __init__(self, children: list[_Field | _Oneof], target: pa.StructType, required: tuple[int, ...]):
        self.children, self.target, self.required = children, target, required

    def fields(self, reading: _Reading, fields: Fields, misfit: np.ndarray, deep: np.ndarray,
               nulls: Mask = None) -> list[pa.Array]:
        for number in self.required:  # proto2: a message lacking one does not parse
            there = np.zeros(fields.count, dtype=bool)
            there[fields.owner[fields.group(number)]] = True
            misfit |= ~there & (True if nulls is None else ~nulls)
        return [child.column(reading, fields, nulls, misfit, deep) for child in self.children]

    def read(self, reading, fields, nulls, misfit, deep):
        columns = self.fields(reading, fields, misfit, deep, nulls)
        mask = pa.array(nulls) if nulls is not None and nulls.any() else None
        return pa.StructArray.from_arrays(columns, fields=list(self.target), mask=mask)


def _utf8(text: bytes | None) -> bool:
    try:
        text is None or text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- fields: each finds its occurrences among a message's and reads them through its value ----------------------


def _singular(fields: Fields, number: int, wire: int, misfit: np.ndarray) -> np.ndarray:
    """The bits of a singular number field per message (0 where absent); twice written or another wire type: misfit."""
    group = fields.group(number)
    owner = fields.owner[group]
    _refuse_repeats(owner, fields.wire[group], wire, misfit)
    bits = np.zeros(fields.count, dtype=np.uint64)
    bits[owner] = fields.value[group]
    return bits


def _refuse_repeats(owner: np.ndarray, wires: np.ndarray, wire: int, misfit: np.ndarray) -> None:
    if len(owner):
        misfit[owner[wires != wire]] = True
        twice = owner[1:] == owner[:-1]
        if twice.any():
            misfit[owner[1:][twice]] = True


class _Field:
    """A singular field: its value per message, the default where absent (null with `presence`: `optional`, a message,
    a wrapper, proto2)."""

    def __init__(self, number: int, value: _Value, presence: bool):
        self.number, self.value, self.presence = number, value, presence

    def column(self, reading: _Reading, fields: Fields, nulls: Mask, misfit: np.ndarray, deep: np.ndarray) -> pa.Array:
        group = fields.group(self.number)
        owner = fields.owner[group]
        _refuse_repeats(owner, fields.wire[group], self.value.wire, misfit)
        count = fields.count
        value = np.zeros(count, dtype=np.uint64)
        value[owner] = fields.value[group]
        start = np.zeros(count, dtype=np.int64)
        start[owner] = fields.start[group]
        absent = None
        if self.presence:
            absent = np.ones(count, dtype=bool)
            absent[owner] = False
        row_nulls = absent if nulls is None else nulls if absent is None else absent | nulls
        return self.value.column(reading, value, start, row_nulls, misfit, deep)


class _Repeated(_Field):
    """A repeated field: its items end to end as one column, packed runs of numbers unpacked."""

    def __init__(self, number: int, value: _Value, target: pa.ListType):
        super().__init__(number, value, presence=False)
        self.target = target

    def column(self, reading, fields, nulls, misfit, deep):
        group = fields.group(self.number)
        owner, wire, value, start = fields.owner[group], fields.wire[group], fields.value[group], fields.start[group]
        wrong = (wire != self.value.wire) & ((wire != LEN) | (self.value.wire == LEN))
        misfit[owner[wrong]] = True
        packed = (wire == LEN) & (self.value.wire != LEN)
        if packed.any():
            owner, value, start = self.unpacked(reading, owner, value, start, packed, misfit)
        counts = np.bincount(owner, minlength=fields.count)
        offsets = np.zeros(fields.count + 1, dtype=np.int32)
        np.cumsum(counts, out=offsets[1:])
        item_misfit = np.zeros(len(owner), dtype=bool)
        item_deep = np.zeros(len(owner), dtype=bool)
        items = self.value.column(reading, value, start, None, item_misfit, item_deep)
        misfit[owner[item_misfit]] = True
        deep[owner[item_deep]] = True
        return pa.ListArray.from_arrays(pa.array(offsets), items, type=self.target)

    def unpacked(self, reading: _Reading, owner: np.ndarray, value: np.ndarray, start: np.ndarray, packed: np.ndarray,
                 misfit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(owner, bits, start) of every item, the packed runs' items in their place among the others."""
        runs = np.flatnonzero(packed)
        lengths = value[runs].astype(np.int64)
        run_misfit = np.zeros(len(runs), dtype=bool)
        if self.value.wire == VARINT:
            run, bits = packed_varints(reading.data, start[runs], start[runs] + lengths, run_misfit)
        else:
            size = 8 if self.value.wire == I64 else 4
            run_misfit |= lengths % size != 0
            counts = np.where(run_misfit, 0, lengths // size)
            run = np.repeat(np.arange(len(runs)), counts)
            first = np.repeat(start[runs] - np.concatenate([[0], np.cumsum(counts)[:-1]]) * size, counts)
            bits = fixed(reading.data, first + np.arange(len(run)) * size, size).astype(np.uint64)
        misfit[owner[runs[run_misfit]]] = True
        single = np.flatnonzero(~packed)
        occurrence = np.concatenate([runs[run], single])
        order = np.argsort(occurrence, kind="stable")
        all_bits = np.concatenate([bits, value[single]])[order]
        return owner[occurrence[order]], all_bits, np.zeros(len(order), dtype=np.int64)


class _Map(_Field):
    """A map field: its entries (messages of a key 1 and a value 2) in key order, keys as text (numbers in decimal, bool
    as true/false); an absent value is its default (a message's with every field default); a key written twice in one
    map (the runtime keeps the last) is a misfit."""

    def __init__(self, number: int, entry: Descriptor, key: _Value, value: _Value, target: pa.MapType):
        super().__init__(number, value, presence=False)
        self.key, self.target = key, target
        kind = entry.fields_by_name["key"].type
        self.key_text: Callable[[pa.Array], pa.Array] = (
            (lambda keys: pc.if_else(keys, "true", "false")) if kind == _T.TYPE_BOOL
            else (lambda keys: keys) if kind == _T.TYPE_STRING else (lambda keys: keys.cast(pa.string())))

    def column(self, reading, fields, nulls, misfit, deep):
        group = fields.group(self.number)
        owner = fields.owner[group]
        misfit[owner[fields.wire[group] != LEN]] = True
        start = fields.start[group]
        entry_misfit = np.zeros(len(owner), dtype=bool)
        entry_deep = np.zeros(len(owner), dtype=bool)
        entries = scan(reading.data, start, start + fields.value[group].astype(np.int64), entry_misfit)
        keys = _Field(1, self.key, presence=False).column(reading, entries, None, entry_misfit, entry_deep)
        items = _Field(2, self.value, presence=False).column(reading, entries, None, entry_misfit, entry_deep)
        order = pc.sort_indices(pa.table({"owner": owner, "key": keys}),
                                sort_keys=[("owner", "ascending"), ("key", "ascending")])
        sorted_owner, sorted_keys = owner[order.to_numpy()], keys.take(order)
        twice = (sorted_owner[1:] == sorted_owner[:-1]) & np.asarray(
            pc.equal(sorted_keys[1:], sorted_keys[:-1]).to_numpy(zero_copy_only=False), dtype=bool)
        misfit[sorted_owner[1:][twice]] = True
        misfit[owner[entry_misfit]] = True
        deep[owner[entry_deep]] = True
        offsets = np.zeros(fields.count + 1, dtype=np.int32)
        np.cumsum(np.bincount(owner, minlength=fields.count), out=offsets[1:])
        return pa.MapArray.from_arrays(pa.array(offsets), self.key_text(sorted_keys), items.take(order),
                                       type=self.target)


class _Oneof:
    """A oneof: a struct of its members, the chosen one set, null when none is; two members written: a misfit."""

    def __init__(self, members: list[tuple[int, _Value]], target: pa.StructType):
        self.members, self.target = members, target

    def column(self, reading: _Reading, fields: Fields, nulls: Mask, misfit: np.ndarray, deep: np.ndarray) -> pa.Array:
        count = fields.count
        written = np.zeros(count, dtype=np.int64)
        for number, _ in self.members:
            np.add.at(written, fields.owner[fields.group(number)], 1)
        misfit |= written > 1
        columns = [_Field(number, value, presence=True).column(reading, fields, nulls, misfit, deep)
                   for number, value in self.members]
        none = written == 0
        mask = none if nulls is None else none | nulls
        return pa.StructArray.from_arrays(columns, fields=list(self.target), mask=pa.array(mask) if mask.any() else None)


class _Recurring(_Field):
    """A field where a message recurs: its value as the JSON text the record path writes, each message of it parsed by
    the runtime and read by the record path's reader; the records holding one are parsed whole too (`deep`).

    A list's text is its items' texts joined, each written as an item of a list (so nested as deep as the list's), and
    an item's text is kept by its bytes for the batch: producers repeat such values (the same tags, the same headers)."""

    def __init__(self, number: int, message: Descriptor, repeated: bool, depth: int):
        super().__init__(number, _Value(), presence=not repeated)
        self.repeated = repeated
        self._parse = message_factory.GetMessageClass(message).FromString
        self._read = message_reader(message)
        self._shallow_bytes = _shallow_bytes(depth)

    def column(self, reading, fields, nulls, misfit, deep):
        group = fields.group(self.number)
        owner, wire, value, start = fields.owner[group], fields.wire[group], fields.value[group], fields.start[group]
        misfit[owner[wire != LEN]] = True
        if not self.repeated:
            twice = owner[1:] == owner[:-1]
            misfit[owner[1:][twice]] = True
        deep[owner[value >= self._shallow_bytes]] = True
        # Python only for the values there are: the other rows are null, or the empty list's "[]".
        known = {}  # bytes → their text, None where the record path must say why
        items = {}  # row → its items' texts
        for row, at, length in zip(owner.tolist(), start.tolist(), value.tolist()):
            data = reading.bytes_of(at, int(length))
            text = known[data] if data in known else known.setdefault(data, self.text(data))
            if text is None:
                misfit[row] = True
            else:
                items.setdefault(row, []).append(text)
        texts = np.full(fields.count, "[]" if self.repeated else None, dtype=object)
        for row, found in items.items():
            texts[row] = f"[{','.join(found)}]" if self.repeated else found[-1]
        if nulls is not None:
            texts[nulls] = None
        return pa.array(texts, pa.string())

    def text(self, data: bytes) -> str | None:
        """The JSON text of one value (of a list's item, for a repeated field), or None where the record path must say
        why not: a message that does not parse, or nests deeper than JSON text holds."""
        try:
            read = self._read(self._parse(data))
            return json_text([read])[1:-1] if self.repeated else json_text(read)
        except Exception:
            return None


def _shallow_bytes(depth: int) -> int:
    """Below how many bytes a value `depth` messages deep cannot reach the runtime's depth limit: it nests at most one
    message in every two of its bytes, and the messages around it (a map entry beside each, at most) count twice."""
    return max(0, 2 * (_RUNTIME_DEPTH - 2 * depth - 2))


class _Compiler:
    def __init__(self, pseudonymize: ColumnPseudonymize | None):
        self.pseudonymize = pseudonymize

    def message(self, message: Descriptor, target: pa.StructType, pii: frozenset, open_messages: tuple[str, ...]
                ) -> _Message:
        """The nodes of a message's fields, in the order of its Avro shape (`avro_shape`): a oneof in place of its
        first member; `open_messages`: the messages it lies in, where one recurs."""
        if len(open_messages) > MAX_SCHEMA_DEPTH:
            raise NotColumnar(f"messages nest more than {MAX_SCHEMA_DEPTH} deep in {open_messages[0]}")
        inside = (*open_messages, message.full_name)
        oneofs = real_oneofs(message)
        children: list[_Field | _Oneof] = []
        for proto_field in message.fields:
            if proto_field.type == _T.TYPE_GROUP:
                raise NotColumnar(f"field {proto_field.full_name} is a group, which the record path reads")
            oneof = proto_field.containing_oneof
            if oneof is not None and oneof.name in oneofs:
                if oneof.fields[0].number == proto_field.number:
                    field_type = target.field(len(children)).type
                    deeper = frozenset(p[1:] for p in pii if len(p) > 1 and p[0] == oneof.name)
                    if (oneof.name,) in pii:
                        raise NotColumnar(f"pii field {oneof.name!r} is a oneof, whose pseudonym text only the "
                                          f"record path's value gives")
                    for member in oneof.fields:
                        if _recurring_message(member, inside) is not None:
                            raise NotColumnar(f"oneof member {member.full_name} is a message that contains it; the "
                                              f"record path writes its JSON text")
                    members = [(member.number, self.value(member, field_type.field(index).type,
                                                          frozenset(p[1:] for p in deeper if p[0] == member.name),
                                                          (member.name,) in deeper, inside))
                               for index, member in enumerate(oneof.fields)]
                    children.append(_Oneof(members, field_type))
                continue
            field_type = target.field(len(children)).type  # by position: a renamed top-level column has another name
            children.append(self.field(proto_field, field_type, pii, inside))
        required = tuple(f.number for f in message.fields if f.label == _T.LABEL_REQUIRED)
        return _Message(children, target, required)

    def field(self, proto_field: FieldDescriptor, target: pa.DataType, pii: frozenset, inside: tuple[str, ...]
              ) -> _Field:
        name = proto_field.name
        deeper = frozenset(p[1:] for p in pii if len(p) > 1 and p[0] == name)
        in_clear = (name,) not in pii
        recurs = _recurring_message(proto_field, inside)
        if recurs is not None:
            self.refuse_pii(in_clear, name, "where a message recurs")
            if is_map(proto_field):
                raise NotColumnar(f"map {proto_field.full_name} holds a message that contains it; the record path "
                                  f"writes its JSON text")
            return _Recurring(proto_field.number, recurs, is_repeated(proto_field), len(inside))
        if is_map(proto_field):
            self.refuse_pii(in_clear, name, "a map")
            entry = proto_field.message_type
            key = self.value(entry.fields_by_name["key"], _map_key_type(entry.fields_by_name["key"]), frozenset(),
                             False, inside)
            value = self.value(entry.fields_by_name["value"], target.item_type, frozenset(), False, inside)
            return _Map(proto_field.number, entry, key, value, target)
        if is_repeated(proto_field):
            self.refuse_pii(in_clear, name, "a repeated field")
            return _Repeated(proto_field.number, self.value(proto_field, target.value_type, frozenset(), False, inside),
                             target)
        node = self.value(proto_field, target, deeper, not in_clear, inside)
        return _Field(proto_field.number, node, proto_field.has_presence)

    def value(self, proto_field: FieldDescriptor, target: pa.DataType, pii: frozenset, pseudonymized: bool,
              inside: tuple[str, ...]) -> _Value:
        """The node of one value of the field (an item of a repeated one), present or not."""
        message = proto_field.message_type
        if pseudonymized:
            kind = message.fields_by_name["value"].type if message is not None and message.full_name in WRAPPERS else (
                None if message is not None else proto_field.type)
            if kind not in _PII_KINDS:
                raise NotColumnar(f"pii field {proto_field.name!r} is no plain string, number, bool or enum, whose "
                                  f"pseudonym text only the record path's value gives")
            plain = self.value(proto_field, pa.string() if kind in (_T.TYPE_STRING, _T.TYPE_ENUM)
                               else pa.bool_() if kind == _T.TYPE_BOOL else pa.int64(), frozenset(), False, inside)
            return _Pseudonymized(plain, self.pseudonymize)
        if message is None:
            if proto_field.type == _T.TYPE_ENUM:
                return _Enum(proto_field.enum_type, target)
            if proto_field.type in (_T.TYPE_STRING, _T.TYPE_BYTES):
                return _Text(target)
            wire, convert = _NUMBERS[proto_field.type]
            if proto_field.type in _UNSIGNED_64:
                return _Unsigned64(wire, target)
            return _Number(wire, convert, target)
        if message.full_name == TIMESTAMP:
            return _Timestamp()
        if message.full_name in WRAPPERS:
            return _Wrapped(self.value(message.fields_by_name["value"], target, frozenset(), False, inside))
        if message.full_name in JSON_MESSAGES:
            return _Json(message, len(inside))
        return self.message(message, target, pii, inside)

    @staticmethod
    def refuse_pii(in_clear: bool, name: str, what: str) -> None:
        if not in_clear:
            raise NotColumnar(f"pii field {name!r} is {what}, whose pseudonym text only the record path's value gives")


def _recurring_message(proto_field: FieldDescriptor, inside: tuple[str, ...]) -> Descriptor | None:
    """The message of a field (an item's, a map value's) when it is one the field lies in: where the message recurs,
    as `avro_types.refers_back` finds it in the Avro shape."""
    message = proto_field.message_type
    if message is not None and is_map(proto_field):
        message = message.fields_by_name["value"].message_type
    if message is None or message.full_name in WRAPPERS or message.full_name in JSON_MESSAGES or (
            message.full_name == TIMESTAMP):
        return None
    return message if message.full_name in inside else None


def _map_key_type(key: FieldDescriptor) -> pa.DataType:
    """The Arrow type a map's keys are read as before they become text: sorted as the record path sorts them."""
    if key.type in (_T.TYPE_STRING,):
        return pa.string()
    if key.type == _T.TYPE_BOOL:
        return pa.bool_()
    if key.type in _UNSIGNED_64:
        return pa.uint64()
    return pa.int64() if key.type in (_T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64, _T.TYPE_UINT32,
                                      _T.TYPE_FIXED32) else pa.int32()
