"""A Protobuf message as the Avro schema of the same shape, so that columns, table catalogs, Iceberg schemas, the
evolution checks and every field path follow from it as from an `.avsc` (docs/PROTOBUF.md has the mapping).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kafka_lake.schemas.avro_types import AvroType

TIMESTAMP = "google.protobuf.Timestamp"
# Struct, Value and ListValue are JSON in a message: they land as their JSON text.
JSON_MESSAGES = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})
# uint64 and fixed64 reach 2^64 - 1, beyond a long: an exact decimal of 20 digits.
UNSIGNED_64 = {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}
TIMESTAMP_MICROS = {"type": "long", "logicalType": "timestamp-micros"}

_SCALARS: dict[int, AvroType] = {
    FieldDescriptor.TYPE_DOUBLE: "double",
    FieldDescriptor.TYPE_FLOAT: "float",
    FieldDescriptor.TYPE_INT32: "int",
    FieldDescriptor.TYPE_SINT32: "int",
    FieldDescriptor.TYPE_SFIXED32: "int",
    FieldDescriptor.TYPE_INT64: "long",
    FieldDescriptor.TYPE_SINT64: "long",
    FieldDescriptor.TYPE_SFIXED64: "long",
    FieldDescriptor.TYPE_UINT32: "long",
    FieldDescriptor.TYPE_FIXED32: "long",
    FieldDescriptor.TYPE_UINT64: UNSIGNED_64,
    FieldDescriptor.TYPE_FIXED64: UNSIGNED_64,
    FieldDescriptor.TYPE_BOOL: "boolean",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_ENUM: "string",  # the symbol; a number the enum lacks as its decimal text
}
# The wrapper types: their nullable scalar.
WRAPPERS: dict[str, AvroType] = {
    "google.protobuf.DoubleValue": "double",
    "google.protobuf.FloatValue": "float",
    "google.protobuf.Int64Value": "long",
    "google.protobuf.UInt64Value": UNSIGNED_64,
    "google.protobuf.Int32Value": "int",
    "google.protobuf.UInt32Value": "long",
    "google.protobuf.BoolValue": "boolean",
    "google.protobuf.StringValue": "string",
    "google.protobuf.BytesValue": "bytes",
}


class NoColumns(ValueError):
    """A message that has no column to land as (no fields); the text names it."""


def is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry and is_repeated(field)


def is_repeated(field: FieldDescriptor) -> bool:
    return field.label == FieldDescriptor.LABEL_REPEATED


def real_oneofs(message: Descriptor) -> dict[str, Any]:
    """The message's oneofs by name, without those protoc makes for a proto3 `optional` field (a field with presence,
    no choice)."""
    optional = _proto3_optional(message)
    return {oneof.name: oneof for oneof in message.oneofs
            if not (len(oneof.fields) == 1 and oneof.fields[0].name in optional)}


def _proto3_optional(message: Descriptor) -> set[str]:
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    return {field.name for field in proto.field if field.proto3_optional}


def avro_schema_of(message: Descriptor) -> dict:
    """The Avro record of a message: fields in declaration order, a oneof in place of its first member."""
    shape = _Translation().record(message)
    assert isinstance(shape, dict)
    return shape


class _Translation:
    def __init__(self) -> None:
        self.defined: set[str] = set()  # a message met again is named, not defined twice (and may recur)

    def record(self, message: Descriptor) -> AvroType:
        full_name = message.full_name
        if full_name in self.defined:
            return full_name
        self.defined.add(full_name)
        oneofs = real_oneofs(message)
        fields: list[dict] = []
        for proto_field in message.fields:
            oneof = proto_field.containing_oneof
            if oneof is not None and oneof.name in oneofs:
                if oneof.fields[0].number == proto_field.number:
                    fields.append(self.oneof(message, oneof))
                continue
            fields.append({"name": proto_field.name, "type": self.field_type(proto_field)})
        if not fields:
            raise NoColumns(f"message {full_name} has no fields, so no column to land as")
        record: dict[str, Any] = {"type": "record", "name": message.name, "fields": fields}
        namespace = full_name.rpartition(".")[0]
        if namespace:
            record["namespace"] = namespace
        return record

    def oneof(self, message: Descriptor, oneof: Any) -> dict:
        members = [{"name": member.name, "type": ["null", self.value(member)], "default": None}
                   for member in oneof.fields]
        record = {"type": "record", "name": oneof.name, "namespace": message.full_name, "fields": members}
        return {"name": oneof.name, "type": ["null", record], "default": None}

    def field_type(self, proto_field: FieldDescriptor) -> AvroType:
        if is_map(proto_field):
            return {"type": "map", "values": self.value(proto_field.message_type.fields_by_name["value"])}
        if is_repeated(proto_field):
            return {"type": "array", "items": self.value(proto_field)}
        if proto_field.has_presence:
            return ["null", self.value(proto_field)]
        return self.value(proto_field)

    def value(self, proto_field: FieldDescriptor) -> AvroType:
        """The type of one value of the field (an item of a repeated one), whether it may be absent or not."""
        message = proto_field.message_type
        if message is None:
            return _SCALARS[proto_field.type]
        if message.full_name == TIMESTAMP:
            return TIMESTAMP_MICROS
        if message.full_name in WRAPPERS:
            return WRAPPERS[message.full_name]
        if message.full_name in JSON_MESSAGES:
            return "string"
        return self.record(message)
