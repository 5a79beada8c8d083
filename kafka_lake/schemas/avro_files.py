"""An Avro schema file (`.avsc`) read as a version of a table: JSON text of a record, at most `MAX_SCHEMA_DEPTH` levels
deep, Kafka Connect's logical types named, parsed by fastavro; what is wrong fails naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastavro

from kafka_lake.schemas.avro_types import schema_shape
from kafka_lake.schemas.connect_types import ConnectTypeError, with_connect_logical_types
from kafka_lake.table_spec import SchemaFileError

# Records, arrays and maps inside each other: deeper schemas are refused at load. Generous for real events,
# and it keeps every recursive walk of a schema (ours, fastavro's, the catalogs' type strings) far from limits.
MAX_SCHEMA_DEPTH = 32


def read_avro_schema(path: Path, text: str) -> tuple[dict, Any, tuple[str, ...]]:
    """(the schema as JSON, fastavro's parsed form, the fields where a record contains itself) of a schema file."""
    try:
        schema = json.loads(text)
    except RecursionError:
        raise SchemaFileError(f"{path}: nested too deeply to read (the limit is {MAX_SCHEMA_DEPTH} levels)") from None
    except ValueError as error:  # JSONDecodeError, and numbers too long to convert
        raise SchemaFileError(f"{path}: not valid JSON: {str(error)[:300]}") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaFileError(f"{path}: the top-level Avro schema must be a record")
    # Before fastavro and every walk of ours: the shape check is the one walk that cannot recurse without bound.
    shape = schema_shape(schema, MAX_SCHEMA_DEPTH)
    if shape.problem:
        raise SchemaFileError(f"{path}: {shape.problem}")
    try:
        schema = with_connect_logical_types(schema)
    except ConnectTypeError as error:
        raise SchemaFileError(f"{path}: {error}") from None
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as error:  # fastavro raises several types for bad schemas
        raise SchemaFileError(f"{path}: not a valid Avro schema: {str(error)[:300]}") from None
    return schema, parsed, shape.recursions
