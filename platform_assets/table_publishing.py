"""What compaction and retention tell the table catalog: switch partitions to a new generation,
drop expired partitions. The table is created or evolved first, so the first switch also registers it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from dagster import TableColumn, TableSchema

from kafka_lake import layout
from kafka_lake.catalog import TopicSpec
from kafka_lake.storage import LakeStorage
from kafka_lake.catalog_reconciliation import publish
from kafka_lake.table_catalog import TableCatalog
from kafka_lake.table_schema import PARTITION_KEYS, TableDefinition, TableSchemaError, table_columns, table_definition
from kafka_lake.compaction_manifest import CompactionManifest
from kafka_lake.table_partition import TablePartition


def column_schema(topic: TopicSpec, partition_columns: bool) -> TableSchema | None:
    """The table's columns as Dagster shows them (`dagster/column_schema`); None when the catalog's schemas
    cannot make a table (registration fails then, saying why)."""
    try:
        columns = table_columns(topic) + (PARTITION_KEYS if partition_columns else ())
    except TableSchemaError:
        return None
    return TableSchema(columns=[TableColumn(c.name, c.type.hive()) for c in columns])


def definition_for(topic: TopicSpec, storage: LakeStorage) -> TableDefinition:
    return table_definition(topic, storage.uri(layout.table_prefix(topic.database, topic.table)))


@dataclass
class TablePublisher:
    resource: object  # resources.table_catalog.TableCatalogResource
    spark: object
    topic: TopicSpec
    storage: LakeStorage

    @cached_property
    def definition(self) -> TableDefinition:
        return definition_for(self.topic, self.storage)

    @cached_property
    def catalog(self) -> TableCatalog:
        catalog = self.resource.catalog(lambda: self.spark)
        catalog.ensure_table(self.definition)
        return catalog

    def switch_to_generations(self, manifests: list[CompactionManifest]) -> None:
        publish(self.catalog, self.definition, {m.partition: m.location for m in manifests})

    def drop(self, partitions: list[TablePartition]) -> None:
        self.catalog.drop_partitions(self.definition, partitions)


def table_publisher(resource, spark, topic: TopicSpec, storage: LakeStorage) -> TablePublisher:
    return TablePublisher(resource, spark, topic, storage)
