"""The record path of Protobuf values: one message at a time parsed by the protobuf runtime, and turned into the value
fastavro would read for its Avro shape (`avro_shape`), so the table's converters take it as they take Avro's.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from kafka_lake.decoding.decoded_batch import Undecodable
from kafka_lake.decoding.protobuf.avro_shape import (
    JSON_MESSAGES,
    TIMESTAMP,
    WRAPPERS,
    is_map,
    is_repeated,
    real_oneofs,
)
from kafka_lake.decoding.protobuf.proto_files import CompiledProto
from kafka_lake.decoding.protobuf.wire import MessageIndexError, read_message_indexes
from kafka_lake.table_spec import SchemaVersion

UNKNOWN_MESSAGE_INDEX = "unknown_message_index"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_UNSIGNED_64 = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)

ReadMessage = Callable[[Any], dict]


class ProtobufRecords:
    """The record path of one schema version: its message class parses a payload, a reader compiled from its
    descriptor gives the value."""

    def __init__(self, version: SchemaVersion):
        self._version = version
        self._compiled: CompiledProto = version.parsed
        self._read = message_reader(self._compiled.message)

    def describe(self, schema_id: int | None) -> str:
        return f"schema id {schema_id} (version {self._version.version}, {self._version.file})"

    def read(self, payload: memoryview, schema_id: int | None) -> dict:
        """The payload's value (message indexes, then the message); raises `Undecodable` saying why not."""
        start = self.message_start(payload, schema_id)
        compiled = self._compiled
        try:
            message = compiled.message_class.FromString(payload[start:])
            return self._read(message)
        except (DecodeError, RecursionError):
            # The runtime's own text ("Error parsing message …") says no more than this.
            raise Undecodable("undecodable_payload", f"the {len(payload) - start}-byte message of "
                                                     f"{self.describe(schema_id)} does not parse as "
                                                     f"{compiled.message.full_name}: truncated, nested deeper than the "
                                                     f"parser follows (100), or written with another schema") from None
        except Exception as error:  # a Timestamp beyond the years 1..9999, a proto2 string that is no UTF-8, …
            raise Undecodable("undecodable_payload", f"{self.describe(schema_id)}: a value of "
                                                     f"{compiled.message.full_name} cannot land: "
                                                     f"{str(error) or 'out of range'}") from None

    def message_start(self, payload: memoryview, schema_id: int | None) -> int:
        """Where the message begins after the payload's message indexes, which must name the version's message."""
        compiled = self._compiled
        try:
            indexes, start = read_message_indexes(payload)
        except MessageIndexError as error:
            raise Undecodable("undecodable_payload", f"{self.describe(schema_id)}: {error}") from None
        named = compiled.message_at(indexes)
        if named is None:
            raise Undecodable(UNKNOWN_MESSAGE_INDEX, f"message indexes {indexes} of {self.describe(schema_id)} name no "
                                                     f"message of {compiled.file}")
        if named.full_name != compiled.message.full_name:
            raise Undecodable(UNKNOWN_MESSAGE_INDEX, f"message indexes {indexes} of {self.describe(schema_id)} name "
                                                     f"{named.full_name}, but the version lands "
                                                     f"{compiled.message.full_name}")
        return start


def message_full_name(compiled: CompiledProto, payload: memoryview) -> str:
    """The full name of the message a payload's indexes name; raises `Undecodable`."""
    try:
        indexes, _ = read_message_indexes(payload)
    except MessageIndexError as error:
        raise Undecodable("undecodable_payload", str(error)) from None
    named = compiled.message_at(indexes)
    if named is None:
        raise Undecodable(UNKNOWN_MESSAGE_INDEX, f"message indexes {indexes} name no message of {compiled.file}")
    return named.full_name


def message_reader(message: Descriptor) -> ReadMessage:
    """A function from a parsed message to its value as fastavro reads its Avro shape: a record as a dict, a nullable
    record as (its full name, dict), maps in key order with their keys as text, enums as symbols."""
    return _Readers().of(message)


class _Readers:
    def __init__(self) -> None:
        self.compiled: dict[str, ReadMessage] = {}

    def of(self, message: Descriptor) -> ReadMessage:
        found = self.compiled.get(message.full_name)
        if found is not None:
            return found
        fields: list[tuple[str, Callable[[Any], Any]]] = []

        def read(parsed: Any) -> dict:
            return {name: read_field(parsed) for name, read_field in fields}

        self.compiled[message.full_name] = read  # before its fields: a message may contain itself
        oneofs = real_oneofs(message)
        for proto_field in message.fields:
            oneof = proto_field.containing_oneof
            if oneof is not None and oneof.name in oneofs:
                if oneof.fields[0].number == proto_field.number:
                    fields.append((oneof.name, self.oneof(message, oneof)))
                continue
            fields.append((proto_field.name, self.field(proto_field)))
        return read

    def field(self, proto_field: FieldDescriptor) -> Callable[[Any], Any]:
        name = proto_field.name
        if is_map(proto_field):
            entry = proto_field.message_type
            key_text = _key_text(entry.fields_by_name["key"])
            value = self.value(entry.fields_by_name["value"])
            return lambda parsed: {key_text(key): value(item) for key, item in sorted(getattr(parsed, name).items())}
        value = self.value(proto_field)
        if is_repeated(proto_field):
            return lambda parsed: [value(item) for item in getattr(parsed, name)]
        if proto_field.has_presence:
            tag = self.tag(proto_field)
            if tag is None:
                return lambda parsed: value(getattr(parsed, name)) if parsed.HasField(name) else None
            return lambda parsed: (tag, value(getattr(parsed, name))) if parsed.HasField(name) else None
        return lambda parsed: value(getattr(parsed, name))

    def oneof(self, message: Descriptor, oneof: Any) -> Callable[[Any], Any]:
        members = [(member.name, self.value(member), self.tag(member)) for member in oneof.fields]
        full_name, oneof_name = f"{message.full_name}.{oneof.name}", oneof.name

        def read(parsed: Any) -> Any:
            chosen = parsed.WhichOneof(oneof_name)
            if chosen is None:
                return None
            out: dict[str, Any] = {}
            for name, value, tag in members:
                if name != chosen:
                    out[name] = None
                else:
                    read_value = value(getattr(parsed, name))
                    out[name] = read_value if tag is None else (tag, read_value)
            return (full_name, out)

        return read

    def tag(self, proto_field: FieldDescriptor) -> str | None:
        """The name fastavro tags a nullable value with: a record's (a message not landed as a scalar)."""
        message = proto_field.message_type
        if message is None or message.full_name in WRAPPERS or message.full_name in JSON_MESSAGES or (
                message.full_name == TIMESTAMP):
            return None
        return message.full_name

    def value(self, proto_field: FieldDescriptor) -> Callable[[Any], Any]:
        message = proto_field.message_type
        if message is None:
            if proto_field.type == FieldDescriptor.TYPE_ENUM:
                symbols = {number: value.name for number, value in proto_field.enum_type.values_by_number.items()}
                return lambda number: symbols.get(number) or str(number)
            if proto_field.type in _UNSIGNED_64:
                return decimal.Decimal
            return _as_is
        if message.full_name == TIMESTAMP:
            return timestamp_value
        if message.full_name in WRAPPERS:
            wrapped = message.fields_by_name["value"]
            if wrapped.type in _UNSIGNED_64:
                return lambda wrapper: decimal.Decimal(wrapper.value)
            return lambda wrapper: wrapper.value
        if message.full_name in JSON_MESSAGES:
            return json_value
        return self.of(message)


def _as_is(value: Any) -> Any:
    return value


def timestamp_value(timestamp: Any) -> datetime.datetime:
    """A `google.protobuf.Timestamp` as fastavro reads a timestamp-micros: nanoseconds cut to microseconds."""
    return _EPOCH + datetime.timedelta(microseconds=timestamp.seconds * 1_000_000 + timestamp.nanos // 1000)


def json_value(message: Any) -> str:
    """A Struct, Value or ListValue as its JSON text (Protobuf's JSON mapping), keys sorted."""
    return json.dumps(json_format.MessageToDict(message), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _key_text(key: FieldDescriptor) -> Callable[[Any], str]:
    """A map key as the text an Avro map key is: numbers in decimal, true/false, strings as they are."""
    if key.type == FieldDescriptor.TYPE_BOOL:
        return lambda value: "true" if value else "false"
    if key.type == FieldDescriptor.TYPE_STRING:
        return _as_is
    return str
