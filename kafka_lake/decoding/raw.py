"""Raw values (`format: raw`): no schema, no framing; a value's bytes land as they are in the column `value`, so
nothing here decodes (`batch_decoder` lands the batch as it is).
"""


from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from kafka_lake.decoding.payload_format import ColumnarInputs, ColumnarPath, LoadedSchema, RecordPath, RouteValues
from kafka_lake.kafka.framing import FramedValues
from kafka_lake.kafka.records import KafkaBatch
from kafka_lake.kafka.schema_resolution import CatalogSchemas, SchemaResolver
from kafka_lake.table_spec import SchemaVersion, TableSpec, shown


class RawPayloads:
    name = "raw"
    title = "raw bytes"
    kind = "bytes"
    has_schemas = False
    schema_ids_required = False
    names_records = False
    needs_message = False
    record_path_name = "none"

    def load_schema(self, path: Path, text: str, message: str | None) -> LoadedSchema:
        raise TypeError("a raw table has no schema files")

    def evolution_problem(self, older: SchemaVersion, newer: SchemaVersion) -> str | None:
        raise TypeError("a raw table has no schema versions")

    def registered_form(self, version: SchemaVersion) -> str:
        raise TypeError("a raw table has no schema versions")

    def schemas(self, topic: TableSpec, registry_url: str | None) -> SchemaResolver:
        return CatalogSchemas(topic)  # never asked: a raw value names no schema

    def framed(self, values: pa.BinaryArray) -> FramedValues:
        raise TypeError("a raw value is not framed")

    def split(self, value: bytes) -> tuple[int | None, memoryview]:
        return None, memoryview(value)

    def record_path(self, version: SchemaVersion) -> RecordPath:
        raise TypeError("a raw table has no schema versions")

    def columnar_path(self, inputs: ColumnarInputs) -> ColumnarPath:
        raise TypeError("a raw table has no schema versions")

    def record_name(self, version: SchemaVersion, payload: memoryview) -> str:
        raise TypeError("a raw value names no record")

    def route_values(self, batch: KafkaBatch, framed: FramedValues, field: tuple[str, ...], value_type: pa.DataType,
                     version_of: Callable[[int | None], SchemaVersion]) -> RouteValues | None:
        raise TypeError("a raw table has no route")

    def shown(self, value: Any) -> str:
        return shown(value)


RAW = RawPayloads()
