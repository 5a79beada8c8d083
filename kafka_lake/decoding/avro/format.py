"""Avro values, Confluent-framed (magic byte, schema id, Avro binary): the payload format every topic has unless its
`topic.yaml` names another.
"""


from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from kafka_lake.decoding.avro.columnar import AvroColumns
from kafka_lake.decoding.avro.columnar_mapping import columnar_mapping_for
from kafka_lake.decoding.avro.records import AvroRecords
from kafka_lake.decoding.payload_format import ColumnarInputs, ColumnarPath, LoadedSchema, RecordPath, RouteValues
from kafka_lake.kafka.framing import FramedValues, split_confluent
from kafka_lake.kafka.records import KafkaBatch
from kafka_lake.kafka.schema_resolution import AvroForms, CatalogSchemas, RegistrySchemas, SchemaResolver
from kafka_lake.schemas.avro_files import read_avro_schema
from kafka_lake.schemas.avro_types import evolution_problem, record_full_name
from kafka_lake.table_spec import SchemaVersion, TableSpec, shown


class AvroPayloads:
    name = "avro"
    title = "Avro"
    kind = "avro"
    has_schemas = True
    schema_ids_required = True
    names_records = True
    needs_message = False
    record_path_name = "fastavro"

    def load_schema(self, path: Path, text: str, message: str | None) -> LoadedSchema:
        return LoadedSchema(*read_avro_schema(path, text))

    def evolution_problem(self, older: SchemaVersion, newer: SchemaVersion) -> str | None:
        return evolution_problem(older.schema, newer.schema)

    def registered_form(self, version: SchemaVersion) -> str:
        return AvroForms().of_version(version)

    def schemas(self, topic: TableSpec, registry_url: str | None) -> SchemaResolver:
        return RegistrySchemas(topic, registry_url) if registry_url else CatalogSchemas(topic)

    def framed(self, values: pa.BinaryArray) -> FramedValues:
        return FramedValues(values)

    def split(self, value: bytes) -> tuple[int | None, memoryview]:
        return split_confluent(value)

    def record_path(self, version: SchemaVersion) -> RecordPath:
        return AvroRecords(version)

    def columnar_path(self, inputs: ColumnarInputs) -> ColumnarPath:
        """The payloads of a batch spliced into Avro blocks for a native reader (`columnar`)."""
        mapping = columnar_mapping_for(inputs.version, inputs.mapping, inputs.pii_fields, inputs.pseudonyms)
        return AvroColumns(inputs.version.version, mapping, inputs.placement)

    def record_name(self, version: SchemaVersion, payload: memoryview) -> str:
        return record_full_name(version.schema)

    def route_values(self, batch: KafkaBatch, framed: FramedValues, field: tuple[str, ...], value_type: pa.DataType,
                     version_of: Callable[[int | None], SchemaVersion]) -> RouteValues | None:
        return None  # read as a column of the values decoded by the table's versions, as columns where they can

    def shown(self, value: Any) -> str:
        return shown(value)


AVRO = AvroPayloads()
