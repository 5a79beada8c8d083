"""`catalog/<db>/<table>`: the topic's table as readers find it, for placement hour H. The Hive layout: the table
created or evolved in the table catalog from the Avro versions, and H's partitions made equal to the partitions in
storage. Iceberg: the table created or evolved, and every landed hour that feeds H found committed in it (a commit
its landing did not make is made from the hour's manifest). The work is `kafka_lake.tables.formats`.
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
    asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.hours import KafkaHour
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.formats import table_format_type
from platform_assets.failures import failures_explained
from platform_assets.keys import asset_key, layer_attributes, name_the_run
from platform_assets.partitions import hourly_partitions, quiet_warnings
from platform_assets.pools import table_pool
from platform_assets.tables import column_schema, dagster_metadata, format_kinds, topic_tables
from resources import LakeStorageResource, TableCatalogResource

CHECK_DESCRIPTIONS = {
    "catalog_matches_storage": "The catalog partitions of the run's hours, and their locations, equal the partitions in storage.",
    "table_matches_landing": "The table's current snapshot holds exactly the files of every landed hour that feeds "
                             "the run's hours.",
}


def catalog_key(topic: TableSpec) -> AssetKey:
    return asset_key("catalog", topic)


def catalog_asset(topic: TableSpec, embedded_metastore: bool = True):
    key = catalog_key(topic)
    schema = column_schema(topic, partition_columns=True)
    check_name = table_format_type(topic).registration_check
    where = table_format_type(topic).described(topic).registration

    with quiet_warnings(BetaWarning):
        @asset(
            key=key,
            deps=[asset_key("compacted", topic)],
            partitions_def=hourly_partitions(topic),
            description=f"Catalog layer: `{topic.database}.{topic.table}` in {where}.",
            metadata={"topic": topic.topic, "table": f"{topic.database}.{topic.table}",
                      "dagster/table_name": f"{topic.database}.{topic.table}", "table_format": topic.table_format,
                      **({"dagster/column_schema": schema} if schema else {})},
            **layer_attributes("catalog", topic, "table", "parquet", *format_kinds(topic, on_spark=False)),
            check_specs=[AssetCheckSpec(check_name, asset=key, description=CHECK_DESCRIPTIONS[check_name])],
            op_tags={"topic": topic.topic, "owner": topic.owner},
            pool=table_pool(topic, "catalog", embedded_metastore),
            # Registering an hour is a few catalog calls: a backfill of many hours is one run, not one
            # Spark start per hour (`--partition-range` on the CLI).
            backfill_policy=BackfillPolicy.single_run(),
        )
        def register(
            context: AssetExecutionContext,
            pyspark: LazyPySparkResource,
            lake: LakeStorageResource,
            table_catalog: TableCatalogResource,
        ):
            with failures_explained(context, topic.name):
                name_the_run(context, "catalog", topic.topic)
                started = time.monotonic()
                hours = [KafkaHour.from_partition_key(key).start for key in context.partition_keys]  # placement hours
                done = topic_tables(topic, lake, table_catalog, pyspark).register(topic, hours)
                context.log.info(done.summary)
                check = AssetCheckResult(
                    asset_key=key, check_name=check_name, passed=done.check.passed, severity=AssetCheckSeverity.ERROR,
                    description=done.check.description, metadata=dagster_metadata(done.check.metadata))
                metadata = dagster_metadata(done.metadata)
                metadata["duration_s"] = round(time.monotonic() - started, 3)
                return MaterializeResult(metadata=metadata, check_results=[check])

    return register
