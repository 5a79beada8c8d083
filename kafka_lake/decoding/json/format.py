"""JSON values (`format: json`): UTF-8 JSON objects, plain or in Confluent's JSON Schema framing, read against the
table's Avro schemas so that they land as the Avro mapping's columns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa

from kafka_lake.decoding.decoded_batch import Undecodable
from kafka_lake.decoding.json.columns import JsonColumns, json_mapping_for, read_json_field
from kafka_lake.decoding.json.records import JsonRecords, parse_json_object, shown_as_json
from kafka_lake.decoding.payload_format import ColumnarInputs, ColumnarPath, LoadedSchema, RecordPath, RouteValues
from kafka_lake.kafka.framing import FramedValues, FramingError, split_json
from kafka_lake.kafka.records import KafkaBatch
from kafka_lake.kafka.schema_resolution import AvroForms, CatalogSchemas, SchemaResolver
from kafka_lake.schemas.avro_files import read_avro_schema
from kafka_lake.schemas.avro_types import evolution_problem, json_keys_at
from kafka_lake.table_spec import SchemaVersion, TableSpec


class JsonPayloads:
    name = "json"
    title = "JSON"
    kind = "json"
    has_schemas = True
    schema_ids_required = False  # a plain value names no schema: it is read with the newest version
    names_records = False
    needs_message = False
    record_path_name = "record by record"

    def load_schema(self, path: Path, text: str, message: str | None) -> LoadedSchema:
        return LoadedSchema(*read_avro_schema(path, text))

    def evolution_problem(self, older: SchemaVersion, newer: SchemaVersion) -> str | None:
        return evolution_problem(older.schema, newer.schema)

    def registered_form(self, version: SchemaVersion) -> str:
        return AvroForms().of_version(version)  # the table's .avsc files: a shared id must name one of them

    def schemas(self, topic: TableSpec, registry_url: str | None) -> SchemaResolver:
        # A framed value's id names a JSON Schema in a registry, which no Avro version equals: the catalog resolves it,
        # and the registry only names an id the catalog lacks.
        return CatalogSchemas(topic, registry_url)

    def framed(self, values: pa.BinaryArray) -> FramedValues:
        return FramedValues(values, plain_json=True)

    def split(self, value: bytes) -> tuple[int | None, memoryview]:
        return split_json(value)

    def record_path(self, version: SchemaVersion) -> RecordPath:
        return JsonRecords(version)

    def columnar_path(self, inputs: ColumnarInputs) -> ColumnarPath:
        """The batch's objects read at once by pyarrow's JSON reader (`columns`)."""
        reading = json_mapping_for(inputs.version, inputs.mapping, inputs.pii_fields, inputs.pseudonyms,
                                   inputs.time_field)
        return JsonColumns(inputs.version.version, reading, inputs.placement)

    def record_name(self, version: SchemaVersion, payload: memoryview) -> str:
        raise TypeError("a JSON value names no record")

    def route_values(self, batch: KafkaBatch, framed: FramedValues, field: tuple[str, ...], value_type: pa.DataType,
                     version_of: Callable[[int | None], SchemaVersion]) -> RouteValues | None:
        """The field read for the whole batch by the columnar JSON reader, under each step's names (its Avro name and
        aliases) in the version a schema id names, and record by record only where that reader refuses a value."""
        found = RouteValues()
        left = {int(i) for i in np.flatnonzero(framed.present)}
        for schema_id, indices in framed.by_schema_id():
            read, _ = read_json_field(framed, indices, json_keys_at(version_of(schema_id).schema, field), value_type)
            for index, value in read:
                found.values[index] = value
                left.discard(index)
        for index in sorted(left):
            try:
                schema_id, payload = split_json(cast(bytes, batch.values[index]))
                document = parse_json_object(payload, "JSON value")
            except (FramingError, Undecodable) as error:
                found.unreadable[index] = f"its route field cannot be read: {error}"
                continue
            found.values[index] = _at_path(document, json_keys_at(version_of(schema_id).schema, field))
        return found

    def shown(self, value: Any) -> str:
        return shown_as_json(value)


def _at_path(document: dict, path: tuple[tuple[str, ...], ...]) -> Any:
    """The value at a field path (each step's JSON keys) of a JSON object, as the record path reads it: under a step's
    first key present and not null (an object or array there is a value no route takes); None where absent."""
    found: Any = document
    for keys in path:
        found = next((found[key] for key in keys if found.get(key) is not None), None) if isinstance(found, dict) else None
    return found


JSON = JsonPayloads()
