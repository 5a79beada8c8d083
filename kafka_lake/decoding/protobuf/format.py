"""Protobuf values (`format: protobuf`): Confluent-framed messages with message indexes, their versions `.proto` files
compiled at load and landed as the Avro schema of the same shape, so every column and field path follows as for Avro.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from kafka_lake.decoding.payload_format import ColumnarInputs, ColumnarPath, LoadedSchema, RecordPath, RouteValues
from kafka_lake.decoding.protobuf.avro_shape import NoColumns, avro_schema_of
from kafka_lake.decoding.protobuf.columns import ProtobufColumns, protobuf_mapping_for
from kafka_lake.decoding.protobuf.evolution import field_number_problem
from kafka_lake.decoding.protobuf.proto_files import (
    WELL_KNOWN_PREFIX,
    CompiledProto,
    compile_proto,
    import_path_problem,
)
from kafka_lake.decoding.protobuf.records import ProtobufRecords, message_full_name
from kafka_lake.kafka.framing import FramedValues, split_confluent
from kafka_lake.kafka.records import KafkaBatch
from kafka_lake.kafka.schema_resolution import CatalogSchemas, RegistrySchemas, SchemaResolver
from kafka_lake.schemas.avro_files import read_avro_schema
from kafka_lake.schemas.avro_types import evolution_problem
from kafka_lake.table_spec import SchemaFileError, SchemaVersion, TableSpec, shown


class ProtobufPayloads:
    name = "protobuf"
    has_schemas = True
    schema_ids_required = True
    names_records = True  # by the message its indexes name
    needs_message = True
    record_path_name = "protobuf"

    def load_schema(self, path: Path, text: str, message: str | None) -> LoadedSchema:
        """The file compiled, and its message translated to the Avro schema of the same shape (`avro_shape`), read as
        an `.avsc` is (its depth, its names, where a record contains itself)."""
        compiled = compile_proto(path, message)
        try:
            shape = avro_schema_of(compiled.message)
        except NoColumns as error:
            raise SchemaFileError(f"{path}: {error}") from None
        schema, _, recursions = read_avro_schema(path, json.dumps(shape))
        return LoadedSchema(schema, compiled, recursions)

    def evolution_problem(self, older: SchemaVersion, newer: SchemaVersion) -> str | None:
        old, new = _compiled(older), _compiled(newer)
        return field_number_problem(old.message, new.message) or evolution_problem(older.schema, newer.schema)

    def registered_form(self, version: SchemaVersion) -> str:
        return _compiled(version).form

    def schemas(self, topic: TableSpec, registry_url: str | None) -> SchemaResolver:
        return RegistrySchemas(topic, registry_url, forms=ProtobufForms()) if registry_url else CatalogSchemas(topic)

    def framed(self, values: pa.BinaryArray) -> FramedValues:
        return FramedValues(values)

    def split(self, value: bytes) -> tuple[int | None, memoryview]:
        return split_confluent(value)  # the payload begins with the message indexes

    def record_path(self, version: SchemaVersion) -> RecordPath:
        return ProtobufRecords(version)

    def columnar_path(self, inputs: ColumnarInputs) -> ColumnarPath:
        """The batch's messages parsed by the runtime, each field gathered across them into one column (`columns`)."""
        mapping = protobuf_mapping_for(inputs.version, inputs.mapping, inputs.pii_fields, inputs.pseudonyms,
                                       inputs.time_field)
        return ProtobufColumns(inputs.version.version, mapping, inputs.placement)

    def record_name(self, version: SchemaVersion, payload: memoryview) -> str:
        """The full name of the message the payload's indexes name in the version's file: a file may hold the
        messages of several tables of one topic."""
        return message_full_name(_compiled(version), payload)

    def route_values(self, batch: KafkaBatch, framed: FramedValues, field: tuple[str, ...], value_type: pa.DataType,
                     version_of: Callable[[int | None], SchemaVersion]) -> RouteValues | None:
        return None  # read as a column of the values decoded by the table's versions

    def shown(self, value: Any) -> str:
        return shown(value)


class ProtobufForms:
    """A registered Protobuf schema compared by its compiled form (`CompiledProto.form`): the registry's text of the
    file and of the schemas it references (its imports), compiled as the catalog's files are."""

    schema_type = "PROTOBUF"
    label = "Protobuf"

    def of_version(self, version: SchemaVersion) -> str:
        return _compiled(version).form

    def of_registered(self, registered: Any, client: Any) -> str:
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            write_proto_files(folder, referenced_files(registered.references or [], client).items())
            main = folder / "registered.proto"
            main.write_text(registered.schema_str or "", encoding="utf-8")
            try:
                return compile_proto(main, None).form
            except SchemaFileError as error:
                raise ValueError(f"not a Protobuf schema the catalog's could equal: "
                                 f"{str(error).replace(str(folder) + '/', '')}") from None


def referenced_files(references: list, client: Any) -> dict[str, str]:
    """The text of each file a registered schema imports (its references, and theirs) by the path it imports it as
    (`money.proto`, `opentelemetry/proto/common/v1/common.proto`), fetched with confluent-kafka's registry client; the
    well-known types are left out (protoc has them). Raises `ValueError` for a path that leaves the folder."""
    found: dict[str, str] = {}
    pending = list(references)
    while pending:
        reference = pending.pop(0)
        name = reference.name
        if name in found or name.startswith(WELL_KNOWN_PREFIX):
            continue
        problem = import_path_problem(name)
        if problem is not None:
            raise ValueError(f"a schema importing {problem}")
        referenced = client.get_version(reference.subject, reference.version).schema
        found[name] = referenced.schema_str or ""
        pending.extend(referenced.references or [])
    return found


def write_proto_files(folder: Path, files: Iterable[tuple[str, str]]) -> list[Path]:
    """Writes each (import path, text) below `folder`, making the folders its path names; returns the files written."""
    written = []
    for name, text in files:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def _compiled(version: SchemaVersion) -> CompiledProto:
    return version.parsed


PROTOBUF = ProtobufPayloads()
