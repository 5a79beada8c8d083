"""The payload formats a topic's values can have, chosen once from its table spec: the registry beside the
`PayloadFormat` protocol, keyed by the names `format:` takes. A new format is a module of its own and a line here.
"""

from __future__ import annotations

from kafka_lake.decoding.avro.format import AVRO
from kafka_lake.decoding.json.format import JSON
from kafka_lake.decoding.payload_format import PayloadFormat
from kafka_lake.decoding.protobuf.format import PROTOBUF
from kafka_lake.decoding.raw import RAW
from kafka_lake.kafka.schema_resolution import SchemaResolver
from kafka_lake.table_spec import TableSpec

PAYLOAD_FORMATS: dict[str, PayloadFormat] = {payloads.name: payloads for payloads in (AVRO, JSON, PROTOBUF, RAW)}


def payload_format(topic: TableSpec) -> PayloadFormat:
    """The format of the table's values."""
    return PAYLOAD_FORMATS[topic.payload_format]


def schemas_for(topic: TableSpec, registry_url: str | None) -> SchemaResolver:
    """How the table's schema ids resolve to its versions (`PayloadFormat.schemas`)."""
    return payload_format(topic).schemas(topic, registry_url)
