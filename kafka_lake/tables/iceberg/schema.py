"""The Iceberg table a topic becomes: its schema folded from the catalog's versions, its partitioning, its properties.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError, ValidationError
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import StagedTable, Table, TableProperties, Transaction
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.transforms import IdentityTransform

from kafka_lake.decoding.key_columns import trailing_columns
from kafka_lake.kafka.records import KAFKA_COLUMNS
from kafka_lake.lake.layout import KAFKA_COLUMN_PREFIX, PARTITION_COLUMNS
from kafka_lake.schemas.landed_schema import LandedSchema
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.table_schema import PARTITION_KEYS

FORMAT_VERSION = "2"
TOPIC_PROPERTY = "kafka-lake.topic"
EVOLVE_ATTEMPTS = 5  # runs starting at once each change the table; one wins each round
# Identity partitions on the placement columns: the placement hour is no column of the record (an event time may
# be RFC 3339 text in a nested field), so no hidden transform has a source; identity partitions keep the Hive
# tables' queries (`WHERE date = … AND hour = …`) pruning files, and let a landed file, which carries these
# values only in its folder names, be a data file as it lies (readers take an identity column missing from a
# file from the partition tuple, as the Iceberg spec says).
# The columns and types are the Hive tables' partition keys.
PLACEMENT_COLUMNS = tuple(pa.field(key.name, {"int": pa.int32(), "string": pa.string()}[key.type.name])
                          for key in PARTITION_KEYS)
_FIRST_PARTITION_FIELD_ID = 1000  # Iceberg's convention, as every engine assigns them


class IcebergSchemaError(ValueError):
    """A topic's schema versions cannot be one Iceberg table; the message names the file and the field."""


def table_schema(topic: TableSpec) -> Schema:
    """The Iceberg schema of the topic's table: the columns every version lands in (`landed_schema`), then the key's
    and tombstone columns and the placement columns, as one schema update of an empty table.

    Columns are those of the Hive table (`tables.table_schema`): the `_kafka_*` columns, then `schema_version`,
    `date`, `hour` after the landed ones. They apply to a table as Iceberg schema updates matched by name, so a column
    keeps its field id for ever; a change Iceberg cannot make to a table that exists (a column's type that is no
    promotion) fails naming the file and the field."""
    building = scratch_transaction()
    where = topic.source_file or topic.name
    evolve_schema(building, landed_columns(topic, where), where)
    return building.table_metadata.schema()


def check_topic(topic: TableSpec) -> None:
    """Fails with `IcebergSchemaError` naming the file when the topic cannot be an Iceberg table; the catalog loader
    calls it for every topic whose table format is Iceberg."""
    table_schema(topic)


def landed_columns(topic: TableSpec, where: str) -> pa.Schema:
    """The table's columns as Iceberg declares them: the Arrow schema an Iceberg topic lands (`iceberg_rows`) with every
    field optional (SPEC: every column is written nullable), the key's and tombstone columns, then the placement
    columns."""
    schema = LandedSchema(topic)
    for version in topic.schema_versions:  # each version's own types, to name the file of a type Iceberg has not
        readable_columns(schema.own_schema(version.version), f"{where}: version {version.version} ({version.file})")
    landed = pa.schema([*schema.value_fields, *KAFKA_COLUMNS, *trailing_columns(topic)])
    return pa.schema(readable_columns(landed, where) + list(PLACEMENT_COLUMNS))


def readable_columns(landed: pa.Schema, where: str) -> list[pa.Field]:
    """Landed columns as an Iceberg table declares them (`iceberg_rows`), every field optional; a type no Iceberg
    reader can read fails naming `where` and the field."""
    columns = iceberg_schema_of(landed)
    for column in columns:
        _check_readable(column.type, (column.name,), where)
    return [_optional(f) for f in columns]


def iceberg_rows(rows: pa.Table) -> pa.Table:
    """Landed rows as an Iceberg topic writes them: Avro's time-millis (Arrow time32, Parquet TIME(MILLIS)) as
    microseconds (TIME(MICROS)), the only time Iceberg has and its readers read. Other rows pass as they are."""
    schema = iceberg_schema_of(rows.schema)
    return rows if schema.equals(rows.schema) else rows.cast(schema)


def iceberg_schema_of(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(_iceberg_type(f.type)) for f in schema], metadata=schema.metadata)


def _iceberg_type(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_time32(kind):
        return pa.time64("us")
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_iceberg_type(f.type)) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field, kind.item_field.with_type(_iceberg_type(kind.item_type)))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(kind.value_field.with_type(_iceberg_type(kind.value_type)))
    return kind


def evolve_schema(transaction: Transaction, columns: pa.Schema | Schema, where: str) -> None:
    """Applies `columns` to the schema by name; fields it lacks are kept, never dropped."""
    present = [f.name for f in transaction.table_metadata.schema().fields]
    wanted = [f.name for f in (columns if isinstance(columns, pa.Schema) else columns.fields)]
    # The first of the lake's own columns: `_kafka_topic` in a topic's table, the first key column in a current-state
    # table's.
    kafka_first = next((name for name in present if name.startswith(KAFKA_COLUMN_PREFIX)), None)
    placed = [n for n in wanted if n not in present and n not in PARTITION_COLUMNS and not n.startswith(KAFKA_COLUMN_PREFIX)]
    try:
        with transaction.update_schema() as update:
            update.union_by_name(columns)
            for name in placed if kafka_first is not None else ():
                update.move_before(name, kafka_first)
    except (ValidationError, ValueError, TypeError) as error:
        raise IcebergSchemaError(f"{where}: Iceberg cannot apply this version to the table: {error}") from None


def partition_spec(schema: Schema) -> PartitionSpec:
    return PartitionSpec(*(
        PartitionField(schema.find_field(name).field_id, _FIRST_PARTITION_FIELD_ID + index, IdentityTransform(), name)
        for index, name in enumerate(PARTITION_COLUMNS)
    ))


def table_properties(topic: TableSpec, location: str) -> dict[str, str]:
    """Files pyiceberg writes (compaction, erasure) go beside the landed ones, in `schema_version=/date=/hour=`
    folders under the table root; old metadata files are pruned and manifests merged as commits accumulate (one per
    landed hour)."""
    return {
        "format-version": FORMAT_VERSION,
        TOPIC_PROPERTY: topic.topic,
        TableProperties.WRITE_DATA_PATH: location,
        TableProperties.OBJECT_STORE_ENABLED: "false",
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES: str(topic.target_file_mb * 1024 * 1024),
        TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
        TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: "50",
        # Each landed hour appends one manifest: appends merge them, so planning a read stays a few manifests long.
        TableProperties.MANIFEST_MERGE_ENABLED: "true",
    }


@dataclass(frozen=True)
class TableShape:
    """What an Iceberg table of the platform is: its name, schema, partitioning, sort order and properties, and the
    property that says what it holds (`owner`), which a table of that name must carry to be changed."""

    identifier: tuple[str, str]
    schema: Schema
    partition_spec: PartitionSpec
    properties: dict[str, str]
    owner: str  # a key of `properties`
    where: str  # the catalog file it comes from, for errors
    sort_order: SortOrder = UNSORTED_SORT_ORDER

    @property
    def name(self) -> str:
        return ".".join(self.identifier)


def ensure_table(catalog: Catalog, topic: TableSpec, location: str) -> Table:
    """The topic's table `<database>.<table>`, created, or evolved to the catalog's schema versions.

    A table of that name that lies elsewhere, is partitioned otherwise or holds another topic is refused, not changed.
    """
    schema = table_schema(topic)
    return ensure_shaped_table(catalog, TableShape(
        (topic.database, topic.table), schema, partition_spec(schema), table_properties(topic, location), TOPIC_PROPERTY,
        topic.source_file or topic.name), location)


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    """The namespace, created unless it exists. Two runs starting at once on a new namespace both see it missing; the
    SQL catalog then fails the second insert with its database's own error (pyiceberg 0.12 names a table's race
    `TableAlreadyExistsError`, a namespace's not), so whatever the creation raised, a namespace now there is enough."""
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:
        if not catalog.namespace_exists(namespace):
            raise


def ensure_shaped_table(catalog: Catalog, shape: TableShape, location: str) -> Table:
    """The table `shape` describes, created, or evolved to its schema (fields added and widened, never dropped)."""
    ensure_namespace(catalog, shape.identifier[0])
    try:
        table = catalog.load_table(shape.identifier)
    except NoSuchTableError:
        try:
            table = catalog.create_table(shape.identifier, schema=shape.schema, location=location,
                                         partition_spec=shape.partition_spec, sort_order=shape.sort_order,
                                         properties=shape.properties)
        except TableAlreadyExistsError:  # created by a run beside this one
            table = catalog.load_table(shape.identifier)
    for attempt in range(EVOLVE_ATTEMPTS):
        _check_is_ours(table, shape, location)
        try:
            return _evolve(table, shape)
        except CommitFailedException:
            if attempt == EVOLVE_ATTEMPTS - 1:
                raise
            # Another run changed the table first (two landings starting at once set the same name mapping):
            # what it did is read again, and only what is still missing is committed.
            table = catalog.load_table(shape.identifier)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _evolve(table: Table, shape: TableShape) -> Table:
    transaction = table.transaction()
    wanted = {k: v for k, v in shape.properties.items() if k != "format-version"}
    if table.name_mapping() is None:
        # Landed files carry no field ids: readers match their columns by name through this mapping, which schema
        # updates extend. Set right after creation (the catalog assigns the ids), or by the next call after a crash.
        wanted[TableProperties.DEFAULT_NAME_MAPPING] = create_mapping_from_schema(table.schema()).model_dump_json()
    if any(table.properties.get(k) != v for k, v in wanted.items()):
        transaction.set_properties(wanted)
    evolve_schema(transaction, shape.schema, f"{shape.where}: the table {shape.name}")
    return transaction.commit_transaction()


def _check_is_ours(table: Table, shape: TableShape, location: str) -> None:
    problems = []
    if table.location().rstrip("/") != location.rstrip("/"):
        problems.append(f"it lies at {table.location()}, not {location}")
    holds, wanted = table.properties.get(shape.owner), shape.properties[shape.owner]
    if holds != wanted:
        problems.append(f"its {shape.owner} is {repr(holds) if holds else 'not set: no table of this platform'}, "
                        f"not {wanted!r}")
    partitioned_by = [(f.name, str(f.transform)) for f in table.spec().fields]
    expected = [(f.name, str(f.transform)) for f in shape.partition_spec.fields]
    if partitioned_by != expected:
        shown_expected = ", ".join(f"{transform}({name})" for name, transform in expected) or "nothing"
        problems.append(f"it is partitioned by {partitioned_by or 'nothing'}, not {shown_expected}")
    if problems:
        raise IcebergSchemaError(
            f"the Iceberg table {shape.name} exists but is not the table of {shape.where}: {'; '.join(problems)}. "
            f"Drop or rename it (its files are not touched by this platform), or rename the topic's folder"
        )


def scratch_transaction() -> Transaction:
    """A transaction on a table that exists nowhere: schema updates apply in memory, nothing is committed."""
    metadata = new_table_metadata(Schema(), UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///nowhere",
                                  {"format-version": FORMAT_VERSION})
    scratch = StagedTable(("scratch", "schema"), metadata, "file:///nowhere/metadata.json", PyArrowFileIO(), None)
    return scratch.transaction()


def _optional(field: pa.Field) -> pa.Field:
    kind = field.type
    if pa.types.is_struct(kind):
        kind = pa.struct([_optional(kind.field(i)) for i in range(kind.num_fields)])
    elif pa.types.is_map(kind):
        kind = pa.map_(kind.key_field, _optional(kind.item_field))
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = pa.list_(_optional(kind.value_field))
    return field.with_type(kind).with_nullable(True)


def _check_readable(kind: pa.DataType, path: tuple[str, ...], where: str) -> None:
    """Refuses the landed types no Iceberg table can hold."""
    dotted = ".".join(path)
    if pa.types.is_null(kind):
        raise IcebergSchemaError(
            f"{where}: field {dotted!r} is of Avro type null; Iceberg format {FORMAT_VERSION} has no type for a "
            f"column that is always null: remove the field, or keep the topic's table format hive"
        )
    if pa.types.is_struct(kind):
        for index in range(kind.num_fields):
            _check_readable(kind.field(index).type, path + (kind.field(index).name,), where)
    elif pa.types.is_map(kind):
        _check_readable(kind.item_type, path + ("{}",), where)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        _check_readable(kind.value_type, path + ("[]",), where)
