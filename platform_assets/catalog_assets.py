"""`catalog/<db>/<table>`: the topic's table in the table catalog, for placement hour H: the table created
or evolved from the Avro versions, and H's partitions made equal to the partitions in storage.
"""

import time

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    BackfillPolicy,
    BetaWarning,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.catalog import TopicSpec
from kafka_lake.hours import KafkaHour
from kafka_lake.catalog_reconciliation import ReconcileReport, partition_differences, reconcile, storage_partition_uris
from kafka_lake.table_catalog import TableChange
from kafka_lake.table_schema import TableDefinition
from kafka_lake.table_partition import TablePartition
from kafka_lake.table_state import storage_partitions
from platform_assets.failures import failures_explained
from platform_assets.keys import asset_key, layer_attributes
from platform_assets.pools import table_pool
from platform_assets.partitions import hourly_partitions, quiet_warnings
from platform_assets.table_publishing import column_schema, definition_for
from resources import LakeStorageResource, TableCatalogResource

CATALOG_MATCHES_STORAGE = "catalog_matches_storage"
SHOWN = 100  # partitions listed in metadata; a backfill of months would drown the UI


def catalog_key(topic: TopicSpec) -> AssetKey:
    return asset_key("catalog", topic)


def catalog_asset(topic: TopicSpec, embedded_metastore: bool = True):
    key = catalog_key(topic)
    schema = column_schema(topic, partition_columns=True)

    with quiet_warnings(BetaWarning):
        @asset(
            key=key,
            deps=[asset_key("compacted", topic)],
            partitions_def=hourly_partitions(topic),
            description=f"Catalog layer: `{topic.database}.{topic.table}` in the table catalog: columns from every Avro "
            f"version of `{topic.topic}`, and the partitions of each placement hour equal to those in storage.",
            metadata={"topic": topic.topic, "table": f"{topic.database}.{topic.table}",
                      "dagster/table_name": f"{topic.database}.{topic.table}",
                      **({"dagster/column_schema": schema} if schema else {})},
            **layer_attributes("catalog", topic, "table", "parquet"),
            check_specs=[
                AssetCheckSpec(
                    CATALOG_MATCHES_STORAGE, asset=key,
                    description="The catalog partitions of the run's hours, and their locations, equal the partitions in storage.",
                )
            ],
            op_tags={"topic": topic.topic, "owner": topic.owner},
            pool=table_pool(topic, "catalog", embedded_metastore),
            # Registering an hour is a few metastore calls: a backfill of many hours is one run, not one
            # Spark start per hour (`--partition-range` on the CLI).
            backfill_policy=BackfillPolicy.single_run(),
        )
        def register(
            context: AssetExecutionContext,
            pyspark: LazyPySparkResource,
            lake: LakeStorageResource,
            table_catalog: TableCatalogResource,
        ):
            with failures_explained(context):
                started = time.monotonic()
                hours = [KafkaHour.from_partition_key(key).start for key in context.partition_keys]  # placement hours
                storage = lake.storage()
                definition = definition_for(topic, storage)
                catalog = table_catalog.catalog(lambda: pyspark.spark_session)

                change = catalog.ensure_table(definition)
                stored = storage_partitions(storage, topic.database, topic.table, among=[
                    TablePartition(version, hour) for hour in hours for version in definition.schema_versions])
                report = reconcile(catalog, definition, stored, only_hours=hours)
                context.log.info(_summary_line(definition, hours, change, report))

                # The check reads the catalog again: it states what readers see now, not what reconcile intended.
                in_catalog = catalog.list_partitions(definition, hours)
                in_storage = storage_partition_uris(definition, stored, hours)
                differences = partition_differences(in_catalog, in_storage)
                check = AssetCheckResult(
                    asset_key=key,
                    check_name=CATALOG_MATCHES_STORAGE,
                    passed=differences.none,
                    severity=AssetCheckSeverity.ERROR,
                    description=differences.describe(),
                    metadata={
                        "hours": len(hours),
                        "catalog_partitions": len(in_catalog),
                        "storage_partitions": len(in_storage),
                        "missing_from_catalog": MetadataValue.json(sorted(str(p) for p in differences.missing)),
                        "pointing_elsewhere": MetadataValue.json(sorted(str(p) for p in differences.misplaced)),
                        "not_in_storage": MetadataValue.json([str(p) for p in differences.unexpected]),
                    },
                )
                metadata = catalog_metadata(definition, table_catalog.kind, change, report, in_catalog, hours[-1])
                metadata["duration_s"] = round(time.monotonic() - started, 3)
                return MaterializeResult(metadata=metadata, check_results=[check])

    return register


def _summary_line(definition: TableDefinition, hours: list, change: TableChange, report: ReconcileReport) -> str:
    table = "created" if change.created else (
        f"evolved (+{len(change.added_columns)} columns, {len(change.widened_columns)} widened)" if change.changed else "unchanged"
    )
    return (
        f"{definition.name} {hours[0]:%Y-%m-%d %H}:00 to {hours[-1]:%Y-%m-%d %H}:00 ({len(hours)} hours): table {table}; "
        f"partitions +{len(report.added)} added, "
        f"{len(report.relocated)} relocated, {len(report.dropped)} dropped"
    )


def catalog_metadata(definition: TableDefinition, kind: str, change: TableChange, report: ReconcileReport,
                     in_catalog: dict, hour) -> dict:
    queries = definition.sample_queries(f"{hour:%Y-%m-%d}", f"{hour:%H}")
    columns = ["| column | type |", "|---|---|"] + [f"| {c.name} | `{c.type.hive()}` |" for c in definition.columns]
    return {
        "table": definition.name,
        "catalog": kind,
        "location": MetadataValue.path(definition.location),
        "columns": len(definition.columns),
        "schema": MetadataValue.md("\n".join(columns)),
        "schema_versions": MetadataValue.json(list(definition.schema_versions)),
        "table_created": change.created,
        "columns_added": MetadataValue.json(list(change.added_columns)),
        "columns_widened": MetadataValue.json(list(change.widened_columns)),
        "partitions_added": len(report.added),
        "partitions_relocated": len(report.relocated),
        "partitions_dropped": len(report.dropped),
        "partition_changes": MetadataValue.json({
            "added": [str(p) for p in report.added][:SHOWN],
            "relocated": [str(p) for p in report.relocated][:SHOWN],
            "dropped": [str(p) for p in report.dropped][:SHOWN],
        }),
        "partitions": MetadataValue.json({str(p): location for p, location in sorted(in_catalog.items())[:SHOWN]}),
        "sample_query": MetadataValue.md(
            f"Spark SQL:\n```sql\n{queries['spark_sql']}\n```\nAthena (Glue):\n```sql\n{queries['athena']}\n```"
        ),
    }
