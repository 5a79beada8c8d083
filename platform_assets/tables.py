"""The topic's table format (`kafka_lake.table_formats`) as the assets reach it, and what it reports as Dagster shows
it: the table's columns, and metadata values as Markdown, paths and JSON."""

from __future__ import annotations

from dagster import MetadataValue, TableColumn, TableSchema

from kafka_lake.catalog import TopicSpec
from kafka_lake.table_formats import LakeUri, Markdown, TableAccess, TableFormat, table_format
from kafka_lake.table_schema import PARTITION_KEYS, TableSchemaError, table_columns
from resources import LakeStorageResource, TableCatalogResource


def column_schema(topic: TopicSpec, partition_columns: bool) -> TableSchema | None:
    """The table's columns as Dagster shows them (`dagster/column_schema`); None when the catalog's schemas
    cannot make a table (registration fails then, saying why)."""
    columns = _columns_of(topic)
    if columns is None:
        return None
    return TableSchema(columns=columns + (_PARTITION_COLUMNS if partition_columns else []))


_PARTITION_COLUMNS = [TableColumn(c.name, c.type.hive()) for c in PARTITION_KEYS]
# The raw, compacted and catalog assets of a topic show the same columns: derived from its Avro versions once a load.
_COLUMNS: dict[int, tuple[TopicSpec, list[TableColumn] | None]] = {}


def _columns_of(topic: TopicSpec) -> list[TableColumn] | None:
    known = _COLUMNS.get(id(topic))
    if known is None or known[0] is not topic:
        try:
            columns: list[TableColumn] | None = [TableColumn(c.name, c.type.hive()) for c in table_columns(topic)]
        except TableSchemaError:
            columns = None
        known = _COLUMNS[id(topic)] = (topic, columns)
    return known[1]


def format_kinds(topic: TopicSpec, *hive_only: str) -> tuple[str, ...]:
    """The kinds a table asset carries beside its layer's: `iceberg` for an Iceberg topic, whose work runs on the
    Dagster process; `hive_only` (Spark) for the Hive layout."""
    return ("iceberg",) if topic.table_format == "iceberg" else hive_only


def topic_tables(topic: TopicSpec, lake: LakeStorageResource, table_catalog: TableCatalogResource,
                 pyspark=None) -> TableFormat:
    """The topic's table format; Spark is started only if an action of the Hive layout needs it (its metastore,
    compaction tasks), never for an Iceberg table."""
    from spark_jobs.compaction_job import run_compactions_on_spark

    storage = lake.storage()
    return table_format(topic, TableAccess(
        storage,
        iceberg_catalog=table_catalog.iceberg_catalog(storage.root),
        hive_catalog=lambda: table_catalog.catalog(lambda: pyspark.spark_session),
        run_compactions=lambda tasks, description: run_compactions_on_spark(pyspark.spark_session, tasks, description),
    ))


def dagster_metadata(metadata: dict) -> dict:
    """A table format's metadata as the UI shows it: Markdown rendered, lake locations as paths, lists and
    mappings as JSON."""
    def shown(value):
        if isinstance(value, Markdown):
            return MetadataValue.md(str(value))
        if isinstance(value, LakeUri):
            return MetadataValue.path(str(value))
        if isinstance(value, (dict, list, tuple)):
            return MetadataValue.json(value if not isinstance(value, tuple) else list(value))
        return value

    return {name: shown(value) for name, value in metadata.items()}
