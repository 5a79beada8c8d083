"""The columnar path of Protobuf values: a batch's messages of one schema version parsed by the protobuf runtime (upb,
as the record path parses them), then each field gathered across all of them into one Arrow array.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kafka_lake.decoding.avro.columnar_mapping import _COLUMNAR_LOGICAL_RANGES, ColumnPseudonymize, NotColumnar
from kafka_lake.decoding.avro.records import UNFIT_FOR_ARROW
from kafka_lake.decoding.decoded_batch import Placement
from kafka_lake.decoding.placement import TimePlacement, place_by_hour
from kafka_lake.decoding.protobuf.avro_shape import JSON_MESSAGES, TIMESTAMP, WRAPPERS, is_map, is_repeated, real_oneofs
from kafka_lake.decoding.protobuf.proto_files import CompiledProto
from kafka_lake.decoding.protobuf.records import json_value
from kafka_lake.decoding.protobuf.wire import message_indexes_bytes
from kafka_lake.kafka.framing import FramedValues
from kafka_lake.kafka.records import KafkaBatch, KafkaColumns
from kafka_lake.schemas.arrow_mapping import ArrowMapping
from kafka_lake.table_spec import SchemaVersion

SMALLEST_SPLIT = 4  # below this many messages, cornering one that cannot be gathered costs more than the record path
_UNSIGNED_64 = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)
_SIGNED_OR_SMALL = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32,
                    FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64,
                    FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32}
# A pii field whose record-path text (Python's str of the value) Arrow's cast to string writes alike.
_PII_KINDS = _SIGNED_OR_SMALL | {FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM}
_FIRST_MICROS, _LAST_MICROS = _COLUMNAR_LOGICAL_RANGES["long", "timestamp-micros"]  # what a Python datetime holds
_FIRST_SECONDS, _LAST_SECONDS = _FIRST_MICROS // 10**6 - 1, _LAST_MICROS // 10**6 + 1
_TIMESTAMP_US = pa.timestamp("us", tz="UTC")

Mask = np.ndarray | None  # True where the value is null


# No value is built per record; a record the path cannot vouch for is left to the record path, which lands it or says
# why not. The parse is the record path's own, so a message that does not parse is refused alike. What is gathered is what
# `records.message_reader` reads, field for field (`tests/test_protobuf_columns.py` holds both paths equal over random
# messages): a message, oneof, wrapper or `optional` field null where the message lacks it, enums as their symbols,
# map entries in key order with their keys as text, unsigned 64-bit numbers as decimal(20, 0), Timestamps in
# microseconds. A Timestamp outside the years 1..9999 is left to the record path (which refuses it), as is a record
# whose event time cannot place it; a batch in which gathering raises is cut in halves until the records at fault are
# alone, and those take the record path.
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
        parsed, messages = mapping.parsed(framed, indices, left)
        for part, columns, misfit in _gathered_isolating(mapping, parsed, messages, left):
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


def _gathered_isolating(mapping: ProtobufMapping, part: np.ndarray, messages: list, left: list[int]
                        ) -> Iterator[tuple[np.ndarray, list[pa.Array], np.ndarray]]:
    """(record indices, their columns, which hold a value only the record path may judge) of the
    stretches gathered whole; a stretch that raises is halved, and one too short to halve is left whole."""
    stretches = [(0, len(part))]
    while stretches:
        first, stop = stretches.pop()
        if first >= stop:
            continue
        chunk = messages[first:stop]
        try:
            columns, misfit = mapping.columns(chunk)
        except (KeyboardInterrupt, SystemExit, MemoryError):
            raise
        except Exception:  # a proto2 string that is no UTF-8, a Struct holding what JSON cannot: the record path says
            if stop - first <= SMALLEST_SPLIT:
                left.extend(part[first:stop])
            else:
                middle = (first + stop) // 2
                stretches += [(middle, stop), (first, middle)]
            continue
        yield part[first:stop], columns, misfit


class ProtobufMapping:
    """One version's message as columns: which bytes begin its messages, the class that parses them, and a node per
    top-level field gathering it from the parsed messages."""

    def __init__(self, compiled: CompiledProto, mapping: ArrowMapping, root: _Message):
        self.schema = mapping.schema
        self.field_names = mapping.field_names
        self._root = root
        self._parse = compiled.message_class.FromString
        # The message indexes as producers write them for the version's message: others take the record path.
        self._indexes = message_indexes_bytes(compiled.indexes_of(compiled.message))

    def parsed(self, framed: FramedValues, indices: np.ndarray, left: list[int]) -> tuple[np.ndarray, list]:
        """(records whose messages parse, the messages); the others are added to `left`."""
        prefix = len(self._indexes)
        starts = framed.payload_starts[indices]
        ends = framed.offsets[indices + 1]
        fits = ends - starts >= prefix
        for position, byte in enumerate(self._indexes):
            fits &= framed.data[np.minimum(starts + position, len(framed.data) - 1)] == byte
        left.extend(indices[~fits])
        indices = indices[fits]
        values = framed.values if len(indices) == len(framed.values) else framed.values.take(pa.array(indices))
        first = int(framed.payload_starts[indices[0]] - framed.offsets[indices[0]]) if len(indices) else 0
        payloads = pc.binary_slice(values, first + prefix, 2**31 - 1).to_pylist()
        try:
            return indices, list(map(self._parse, payloads))
        except Exception:  # DecodeError, RecursionError: parsed one by one, the record path says why of each
            pass
        kept, messages = [], []
        for index, payload in zip(indices, payloads):
            try:
                messages.append(self._parse(payload))
            except Exception:
                left.append(index)
                continue
            kept.append(index)
        return np.asarray(kept, dtype=np.int64), messages

    def columns(self, messages: list) -> tuple[list[pa.Array], np.ndarray]:
        """The top-level columns of `messages`, and which messages hold a value the record path must judge."""
        misfit = np.zeros(len(messages), dtype=bool)
        return self._root.fields(messages, misfit), misfit


def protobuf_mapping_for(version: SchemaVersion, mapping: ArrowMapping, pii_fields: tuple[tuple[str, ...], ...],
                         pseudonymize: ColumnPseudonymize | None, time_field: tuple[str, ...] | None) -> ProtobufMapping:
    """Compiles a version, whose record path maps it by `mapping`, for the columnar path, or raises `NotColumnar`
    saying why the record path must read it."""
    if version.recursions:
        raise NotColumnar(f"a message contains itself ({version.recursions[0]}); its JSON text is built record by record")
    if time_field is not None and any(time_field[:len(p)] == p for p in pii_fields):
        raise NotColumnar("the event time field is pseudonymized; the record path places it by its value")
    if pii_fields and pseudonymize is None:
        raise ValueError(f"pii fields of {version.file} need a pseudonymizer; refusing to land them in clear")
    compiled: CompiledProto = version.parsed
    target = pa.struct(list(mapping.schema)[: len(mapping.field_names)])
    root = _Compiler(pseudonymize).message(compiled.message, target, frozenset(pii_fields))
    return ProtobufMapping(compiled, mapping, root)


# --- the nodes: each turns one field's values, gathered from many messages, into its column ---------------------


class _Node:
    target: pa.DataType

    def column(self, values: list, nulls: Mask, misfit: np.ndarray) -> pa.Array:
        """The column of `values` (one per row; `nulls`: rows that are null whatever their value); sets `misfit` where
        a row's value is one the record path must judge."""
        raise NotImplementedError


class _Plain(_Node):
    """A value Arrow takes as the runtime gives it: numbers, bool, string, bytes."""

    def __init__(self, target: pa.DataType):
        self.target = target

    def column(self, values, nulls, misfit):
        return pa.array(values, self.target, mask=nulls)


class _Unsigned64(_Node):
    """uint64 and fixed64, as the exact decimal(20, 0) the record path's `Decimal` lands as."""

    def __init__(self, target: pa.DataType):
        self.target = target

    def column(self, values, nulls, misfit):
        return pa.array(values, pa.uint64(), mask=nulls).cast(self.target)


class _Enum(_Node):
    """An enum's symbol; a number the enum lacks as its decimal text."""

    def __init__(self, enum: Any, target: pa.DataType):
        self.target = target
        numbers = sorted(enum.values_by_number)
        self._numbers = pa.array(numbers, pa.int32())
        self._symbols = pa.array([enum.values_by_number[number].name for number in numbers], pa.string())

    def column(self, values, nulls, misfit):
        numbers = pa.array(values, pa.int32(), mask=nulls)
        symbols = self._symbols.take(pc.index_in(numbers, value_set=self._numbers))
        return pc.coalesce(symbols, numbers.cast(pa.string()))


class _Timestamp(_Node):
    """A `google.protobuf.Timestamp` in microseconds (nanoseconds cut, rounding down as the record path's `//`);
    outside the years 1..9999 a misfit, which the record path refuses."""

    target = _TIMESTAMP_US
    _seconds, _nanos = attrgetter("seconds"), attrgetter("nanos")

    def column(self, values, nulls, misfit):
        seconds = np.fromiter(map(self._seconds, values), dtype=np.int64, count=len(values))
        nanos = np.fromiter(map(self._nanos, values), dtype=np.int64, count=len(values))
        present = np.ones(len(values), dtype=bool) if nulls is None else ~nulls
        near = (seconds >= _FIRST_SECONDS) & (seconds <= _LAST_SECONDS)
        micros = np.where(near, seconds, 0) * 1_000_000 + nanos // 1000
        misfit |= present & (~near | (micros < _FIRST_MICROS) | (micros > _LAST_MICROS))
        return pa.array(micros, pa.int64(), mask=nulls).view(self.target)


class _Json(_Node):
    """Struct, Value and ListValue: their JSON text, as the record path writes it."""

    target = pa.string()

    def column(self, values, nulls, misfit):
        if nulls is None:
            return pa.array(list(map(json_value, values)), self.target)
        return pa.array([None if null else json_value(value) for value, null in zip(values, nulls)], self.target)


class _Wrapped(_Node):
    """A wrapper type (`StringValue`, …): the scalar in its `value`."""

    _value = attrgetter("value")

    def __init__(self, inner: _Node):
        self.inner, self.target = inner, inner.target

    def column(self, values, nulls, misfit):
        return self.inner.column(list(map(self._value, values)), nulls, misfit)


class _Pseudonymized(_Node):
    """A pii field: its value's text, replaced by its pseudonym."""

    def __init__(self, inner: _Node, pseudonymize: ColumnPseudonymize | None):
        self.inner, self.pseudonymize, self.target = inner, pseudonymize, pa.string()
        self.repeats: bool | None = None  # whether values repeat enough to hash each distinct one once; seen once

    def column(self, values, nulls, misfit):
        column = self.inner.column(values, nulls, misfit)
        texts = column if column.type == pa.string() else column.cast(pa.string())
        if self.repeats is None:
            self.repeats = pc.count_distinct(texts).as_py() < (len(texts) - texts.null_count) * 0.8
        assert self.pseudonymize is not None
        return self.pseudonymize(texts, self.repeats)


class _List(_Node):
    """A repeated field: its items end to end, gathered as one column."""

    def __init__(self, item: _Node, target: pa.ListType):
        self.item, self.target = item, target

    def column(self, values, nulls, misfit):
        offsets = np.zeros(len(values) + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, values), dtype=np.int32, count=len(values)), out=offsets[1:])
        items = list(chain.from_iterable(values))
        owners = np.repeat(np.arange(len(values)), np.diff(offsets))
        item_misfit = np.zeros(len(items), dtype=bool)
        column = self.item.column(items, None, item_misfit)
        if item_misfit.any():
            misfit[owners[item_misfit]] = True
        return pa.ListArray.from_arrays(pa.array(offsets), column, type=self.target)


class _Map(_Node):
    """A map field: its entries in key order, keys as text (numbers in decimal, bool as true/false)."""

    _sorted_items = staticmethod(lambda entries: sorted(entries.items()))

    def __init__(self, key: FieldDescriptor, value: _Node, target: pa.MapType):
        self.value, self.target = value, target
        self.key_text: Callable[[Any], str] | None = (
            (lambda key: "true" if key else "false") if key.type == FieldDescriptor.TYPE_BOOL
            else None if key.type == FieldDescriptor.TYPE_STRING else str)

    def column(self, values, nulls, misfit):
        entries = list(map(self._sorted_items, values))
        offsets = np.zeros(len(values) + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, entries), dtype=np.int32, count=len(entries)), out=offsets[1:])
        flat = list(chain.from_iterable(entries))
        keys = [key for key, _ in flat]
        if self.key_text is not None:
            keys = list(map(self.key_text, keys))
        owners = np.repeat(np.arange(len(values)), np.diff(offsets))
        value_misfit = np.zeros(len(flat), dtype=bool)
        items = self.value.column([value for _, value in flat], None, value_misfit)
        if value_misfit.any():
            misfit[owners[value_misfit]] = True
        return pa.MapArray.from_arrays(pa.array(offsets), pa.array(keys, pa.string()), items, type=self.target)


class _Present(_Node):
    """A field with presence (`optional`, a message, a wrapper): null where the message lacks it."""

    def __init__(self, name: str, inner: _Node):
        self.name, self.inner, self.target = name, inner, inner.target
        self._has = methodcaller("HasField", name)

    def of(self, messages: list, nulls: Mask, misfit: np.ndarray, values: list) -> pa.Array:
        absent = ~np.fromiter(map(self._has, messages), dtype=bool, count=len(messages))
        return self.inner.column(values, absent if nulls is None else absent | nulls, misfit)


class _Oneof(_Node):
    """A oneof: a struct of its members, the chosen one set, null when none is."""

    def __init__(self, name: str, members: list[tuple[str, _Node]], target: pa.StructType):
        self.members, self.target = members, target
        self._which = methodcaller("WhichOneof", name)

    def of(self, messages: list, nulls: Mask, misfit: np.ndarray) -> pa.Array:
        chosen = list(map(self._which, messages))
        none_chosen = np.fromiter((which is None for which in chosen), dtype=bool, count=len(chosen))
        columns = [node.column(list(map(attrgetter(name), messages)),
                               np.fromiter((which != name for which in chosen), dtype=bool, count=len(chosen)), misfit)
                   for name, node in self.members]
        mask = none_chosen if nulls is None else none_chosen | nulls
        return pa.StructArray.from_arrays(columns, fields=list(self.target), mask=pa.array(mask) if mask.any() else None)


class _Message(_Node):
    """A message: a struct of its fields, each gathered across the messages at once."""

    def __init__(self, fields: list[tuple[str | None, _Node]], target: pa.StructType):
        self.target = target
        # Field by field (one `map` each): a tuple of every field per message would be an object per record for the
        # garbage collector to walk, which costs more than the reading.
        self.children = [(None if name is None else attrgetter(name), node) for name, node in fields]

    def fields(self, messages: list, misfit: np.ndarray, nulls: Mask = None) -> list[pa.Array]:
        columns = []
        for value_of, node in self.children:
            if isinstance(node, _Oneof):
                columns.append(node.of(messages, nulls, misfit))
                continue
            assert value_of is not None
            values = list(map(value_of, messages))
            if isinstance(node, _Present):
                columns.append(node.of(messages, nulls, misfit, values))
            else:
                columns.append(node.column(values, nulls, misfit))
        return columns

    def column(self, values, nulls, misfit):
        columns = self.fields(values, misfit, nulls)
        return pa.StructArray.from_arrays(columns, fields=list(self.target),
                                          mask=pa.array(nulls) if nulls is not None and nulls.any() else None)


class _Compiler:
    def __init__(self, pseudonymize: ColumnPseudonymize | None):
        self.pseudonymize = pseudonymize

    def message(self, message: Descriptor, target: pa.StructType, pii: frozenset) -> _Message:
        """The nodes of a message's fields, in the order of its Avro shape (`avro_shape`): a oneof in place of its
        first member."""
        oneofs = real_oneofs(message)
        children: list[tuple[str | None, _Node]] = []
        for proto_field in message.fields:
            oneof = proto_field.containing_oneof
            if oneof is not None and oneof.name in oneofs:
                if oneof.fields[0].number == proto_field.number:
                    field_type = target.field(len(children)).type
                    deeper = frozenset(p[1:] for p in pii if len(p) > 1 and p[0] == oneof.name)
                    if (oneof.name,) in pii:
                        raise NotColumnar(f"pii field {oneof.name!r} is a oneof, whose pseudonym text only the "
                                          f"record path's value gives")
                    members = [(member.name, self.value(member, field_type.field(index).type,
                                                        frozenset(p[1:] for p in deeper if p[0] == member.name),
                                                        (member.name,) in deeper))
                               for index, member in enumerate(oneof.fields)]
                    children.append((None, _Oneof(oneof.name, members, field_type)))
                continue
            name = proto_field.name
            field_type = target.field(len(children)).type  # by position: a renamed top-level column has another name
            children.append((name, self.field(proto_field, field_type, pii)))
        return _Message(children, target)

    def field(self, proto_field: FieldDescriptor, target: pa.DataType, pii: frozenset) -> _Node:
        name = proto_field.name
        deeper = frozenset(p[1:] for p in pii if len(p) > 1 and p[0] == name)
        in_clear = (name,) not in pii
        if is_map(proto_field):
            self.refuse_pii(in_clear, name, "a map")
            entry = proto_field.message_type
            value = self.value(entry.fields_by_name["value"], target.item_type, frozenset(), False)
            return _Map(entry.fields_by_name["key"], value, target)
        if is_repeated(proto_field):
            self.refuse_pii(in_clear, name, "a repeated field")
            return _List(self.value(proto_field, target.value_type, frozenset(), False), target)
        node = self.value(proto_field, target, deeper, not in_clear)
        return _Present(name, node) if proto_field.has_presence else node

    def value(self, proto_field: FieldDescriptor, target: pa.DataType, pii: frozenset, pseudonymized: bool) -> _Node:
        """The node of one value of the field (an item of a repeated one), present or not."""
        message = proto_field.message_type
        if pseudonymized:
            kind = message.fields_by_name["value"].type if message is not None and message.full_name in WRAPPERS else (
                None if message is not None else proto_field.type)
            if kind not in _PII_KINDS:
                raise NotColumnar(f"pii field {proto_field.name!r} is no plain string, number, bool or enum, whose "
                                  f"pseudonym text only the record path's value gives")
            plain = self.value(proto_field, pa.string() if kind in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_ENUM)
                               else pa.bool_() if kind == FieldDescriptor.TYPE_BOOL else pa.int64(), frozenset(), False)
            return _Pseudonymized(plain, self.pseudonymize)
        if message is None:
            if proto_field.type == FieldDescriptor.TYPE_ENUM:
                return _Enum(proto_field.enum_type, target)
            if proto_field.type in _UNSIGNED_64:
                return _Unsigned64(target)
            return _Plain(target)
        if message.full_name == TIMESTAMP:
            return _Timestamp()
        if message.full_name in WRAPPERS:
            wrapped = message.fields_by_name["value"]
            return _Wrapped(_Unsigned64(target) if wrapped.type in _UNSIGNED_64 else _Plain(target))
        if message.full_name in JSON_MESSAGES:
            return _Json()
        return self.message(message, target, pii)

    @staticmethod
    def refuse_pii(in_clear: bool, name: str, what: str) -> None:
        if not in_clear:
            raise NotColumnar(f"pii field {name!r} is {what}, whose pseudonym text only the record path's value gives")
