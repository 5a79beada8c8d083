"""The current-state table of a change topic: the Iceberg table `<database>.<current table>` of one row per key, its
columns the row's fields, then the key's (its identifier fields) and the `_kafka_*` columns of the change that set it.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import ValidationError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform

from kafka_lake.decoding.key_columns import KEY_COLUMN_PREFIX, TOMBSTONE_COLUMN, trailing_columns
from kafka_lake.kafka.records import KAFKA_COLUMNS
from kafka_lake.lake import layout
from kafka_lake.lake.layout import KAFKA_COLUMN_PREFIX
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.schemas.arrow_mapping import arrow_schema_for
from kafka_lake.table_spec import CurrentState, SchemaVersion, TableSpec
from kafka_lake.tables.iceberg.catalog import table_location
from kafka_lake.tables.iceberg.schema import (
    FORMAT_VERSION,
    TOPIC_PROPERTY,
    IcebergSchemaError,
    TableShape,
    ensure_shaped_table,
    evolve_schema,
    iceberg_schema_of,
    readable_columns,
    scratch_transaction,
)

# What the change that set a row was: the columns after the key's.
CHANGE_COLUMNS = tuple(column for column in KAFKA_COLUMNS
                       if column.name in ("_kafka_partition", "_kafka_offset", "_kafka_timestamp"))
# The raw table (`<database>.<table>`) whose changes a current-state table holds.
CURRENT_STATE_OF = "kafka-lake.current-state-of"
# Files hold ranges of keys and a change rewrites the files holding its keys: small enough that rewriting one is cheap,
# large enough that a table of millions of rows is tens of files. Arrow bytes in memory; a file is a third or less.
FILE_BYTES = 64 * 1024 * 1024
DATA_FOLDER = "data"
# Iceberg's identifier fields are primitive and not floating point (equality of a float is no key).
_KEY_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_binary, pa.types.is_date, pa.types.is_timestamp,
              pa.types.is_decimal, pa.types.is_boolean, pa.types.is_time, pa.types.is_fixed_size_binary)


def current_state_of(topic: TableSpec) -> CurrentState:
    if topic.current_state is None:
        raise ValueError(f"{topic.source_file or topic.name}: the topic keeps no current_state")
    return topic.current_state


def current_table_name(topic: TableSpec) -> str:
    return f"{topic.database}.{current_state_of(topic).table}"


def key_fields(topic: TableSpec) -> tuple[pa.Field, ...]:
    """The key's columns, `_kafka_key_<field>`, as the raw table has them (in Iceberg's types) but required: every row
    has its key."""
    landed = pa.schema([f for f in trailing_columns(topic) if f.name != TOMBSTONE_COLUMN.name])
    return tuple(f.with_nullable(False) for f in iceberg_schema_of(landed))


def key_names(topic: TableSpec) -> list[str]:
    return [f.name for f in key_fields(topic)]


def row_fields(topic: TableSpec, version: SchemaVersion) -> list[pa.Field]:
    """The row's fields in a version, as columns: those of the record at `row`, or the value's own columns."""
    landed = arrow_schema_for(version, topic.pii_fields, topic.columns_by_field)
    row = current_state_of(topic).row
    if row is None:
        return [f for f in landed if not f.name.startswith(KAFKA_COLUMN_PREFIX)]
    path = topic.column_path(row)
    kind = landed.field(path[0]).type
    for step in path[1:]:
        kind = kind.field(step).type
    return list(kind)


def version_columns(topic: TableSpec, version: SchemaVersion) -> pa.Schema:
    """The table's columns as a version has them: its row's fields (optional), the key's (required), the change's."""
    where = f"{topic.source_file or topic.name}: current_state of version {version.version} ({version.file})"
    rows = readable_columns(pa.schema(row_fields(topic, version)), where)
    return pa.schema([*rows, *key_fields(topic), *(f.with_nullable(True) for f in CHANGE_COLUMNS)])


def current_table_schema(topic: TableSpec) -> Schema:
    """The table's Iceberg schema: version 1's columns, each later version applied as a schema update by name (new
    row fields placed before the key's columns), the key's columns its identifier fields."""
    building = scratch_transaction()
    where = topic.source_file or topic.name
    versions = topic.schema_versions
    try:
        with building.update_schema(allow_incompatible_changes=True) as update:  # a new table's required key columns
            update.union_by_name(version_columns(topic, versions[0]))
        with building.update_schema() as update:
            update.set_identifier_fields(*key_names(topic))
    except (ValidationError, ValueError, TypeError) as error:
        raise IcebergSchemaError(f"{where}: the current-state table cannot be an Iceberg table: {error}") from None
    for version in versions[1:]:
        evolve_schema(building, version_columns(topic, version),
                      f"{where}: current_state of version {version.version} ({version.file})")
    return building.table_metadata.schema()


def current_state_problem(topic: TableSpec) -> str | None:
    """Why the topic's current-state table cannot be (naming the file), checked at load."""
    key_file = topic.key_schema.file if topic.key_schema is not None else "key_schema"
    for field in key_fields(topic):
        if not any(is_type(field.type) for is_type in _KEY_TYPES):
            return (f"{topic.source_file}: key field {field.name[len(KEY_COLUMN_PREFIX):]!r} of {key_file} is "
                    f"{field.type}; the key's columns identify a current-state table's rows (Iceberg identifier "
                    f"fields), which must be numbers, text, bytes, dates, times or decimals, not floating point, "
                    f"records, arrays or maps")
    try:
        current_table_schema(topic)
    except IcebergSchemaError as error:
        return str(error)
    return None


# Unpartitioned and sorted by key; the topic's schema versions fold into its schema as into the topic's own Iceberg
# table.
def table_shape(topic: TableSpec, location: str) -> TableShape:
    schema = current_table_schema(topic)
    sort_order = SortOrder(*(SortField(source_id=schema.find_field(name).field_id, transform=IdentityTransform())
                             for name in key_names(topic)))
    properties = {
        "format-version": FORMAT_VERSION,
        TOPIC_PROPERTY: topic.topic,
        CURRENT_STATE_OF: f"{topic.database}.{topic.table}",
        TableProperties.WRITE_DATA_PATH: f"{location}/{DATA_FOLDER}",
        TableProperties.OBJECT_STORE_ENABLED: "false",
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES: str(FILE_BYTES),
        TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
        TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: "50",
        # A file's range of keys is read from its bounds: whole, not cut to 16 characters as by default.
        **{f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}.{name}": "full" for name in key_names(topic)},
    }
    return TableShape((topic.database, current_state_of(topic).table), schema, UNPARTITIONED_PARTITION_SPEC, properties,
                      CURRENT_STATE_OF, topic.source_file or topic.name, sort_order)


def current_location(storage: LakeStorage, topic: TableSpec) -> str:
    """`{LAKE_ROOT}/<database>/<current table>`, beside the topic's own table."""
    return table_location(storage, topic.database, current_state_of(topic).table)


def data_directory(topic: TableSpec) -> str:
    """Where the table's data files are written, relative to the lake root."""
    return f"{layout.table_prefix(topic.database, current_state_of(topic).table)}/{DATA_FOLDER}"


def ensure_current_table(catalog: Catalog, storage: LakeStorage, topic: TableSpec) -> Table:
    """The topic's current-state table, created, or evolved to the catalog's schema versions; a table of that name
    that is not this topic's current-state table is refused, not changed."""
    location = current_location(storage, topic)
    return ensure_shaped_table(catalog, table_shape(topic, location), location)
