"""The topic's table format (`kafka_lake.tables.formats`) as the assets reach it, and what it reports as Dagster shows
it: the table's columns, and metadata values as Markdown, paths and JSON."""

from __future__ import annotations

from dagster import MetadataValue, TableColumn, TableSchema

from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.formats import table_format, table_format_type
from kafka_lake.tables.table_format import LakeUri, Markdown, TableAccess, TableFormat
from kafka_lake.tables.table_schema import PARTITION_KEYS, TableSchemaError, table_columns
from resources import LakeStorageResource, TableCatalogResource


def column_schema(topic: TableSpec, partition_columns: bool) -> TableSchema | None:
    """The table's columns as Dagster shows them (`dagster/column_schema`); None when the catalog's schemas
    cannot make a table (registration fails then, saying why)."""
    columns = _columns_of(topic)
    if columns is None:
        return None
    return TableSchema(columns=columns + (_PARTITION_COLUMNS if partition_columns else []))


_PARTITION_COLUMNS = [TableColumn(c.name, c.type.hive()) for c in PARTITION_KEYS]
# The raw, compacted and catalog assets of a topic show the same columns: derived from its Avro versions once a load.
_COLUMNS: dict[int, tuple[TableSpec, list[TableColumn] | None]] = {}


def _columns_of(topic: TableSpec) -> list[TableColumn] | None:
    known = _COLUMNS.get(id(topic))
    if known is None or known[0] is not topic:
        try:
            columns: list[TableColumn] | None = [TableColumn(c.name, c.type.hive()) for c in table_columns(topic)]
        except TableSchemaError:
            columns = None
        known = _COLUMNS[id(topic)] = (topic, columns)
    return known[1]


def format_kinds(topic: TableSpec, on_spark: bool = True) -> tuple[str, ...]:
    """The kinds a table asset carries beside its layer's: its table format's own (`iceberg`), and `spark` where the
    layer's work (`on_spark`) runs as Spark tasks for its format (the Hive layout's compaction and retention)."""
    kept_as = table_format_type(topic)
    return ((kept_as.kind,) if kept_as.kind else ()) + (("spark",) if on_spark and kept_as.runs_on_spark else ())


def topic_tables(topic: TableSpec, lake: LakeStorageResource, table_catalog: TableCatalogResource,
                 pyspark=None, pii_key: bytes | None = None) -> TableFormat:
    """The topic's table format; Spark is started only if an action of the Hive layout needs it (its metastore,
    compaction tasks), never for an Iceberg table. `pii_key`: where compaction must find erased subjects' pseudonyms."""
    from spark_jobs.compaction_job import run_compactions_on_spark

    storage = lake.storage()
    return table_format(topic, TableAccess(
        storage,
        iceberg_catalog=table_catalog.iceberg_catalog(storage.root),
        hive_catalog=lambda: table_catalog.catalog(lambda: pyspark.spark_session),
        run_compactions=lambda tasks, description: run_compactions_on_spark(pyspark.spark_session, tasks, description),
        pii_key=pii_key,
    ))


def dagster_metadata(metadata: dict) -> dict:
    """A table format's metadata as the UI shows it: Markdown rendered, lake locations as paths, lists and
    mappings as JSON, and its `rows` as Dagster's row count too (`dagster/row_count`)."""
    def shown(value):
        if isinstance(value, Markdown):
            return MetadataValue.md(str(value))
        if isinstance(value, LakeUri):
            return MetadataValue.path(str(value))
        if isinstance(value, (dict, list, tuple)):
            return MetadataValue.json(value if not isinstance(value, tuple) else list(value))
        return value

    shown_metadata = {name: shown(value) for name, value in metadata.items()}
    if isinstance(metadata.get("rows"), int):
        shown_metadata["dagster/row_count"] = metadata["rows"]
    return shown_metadata
