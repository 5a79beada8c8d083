"""`compacted/<db>/<table>`: each placement hour rewritten into few large files once raw landing can
no longer add to it, and again when late data does. The work is the topic's table format's
(`kafka_lake.tables.formats`): generation folders on Spark for the Hive layout, replace snapshots for Iceberg."""

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetMaterialization,
    AssetObservation,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    PreviewWarning,
    TimeWindowPartitionMapping,
    multi_asset,
)
from dagster._core.storage.tags import BACKFILL_ID_TAG
from dagster_pyspark import LazyPySparkResource

from kafka_lake.hours import KafkaHour
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.formats import table_format_type
from kafka_lake.upkeep.compaction import CompactionNotDue
from platform_assets.checks import check_outputs
from platform_assets.failures import failures_explained
from platform_assets.keys import asset_key, layer_attributes, name_the_run, raw_key
from platform_assets.partitions import hourly_partitions, quiet_warnings
from platform_assets.pools import table_pool
from platform_assets.tables import column_schema, dagster_metadata, format_kinds, topic_tables
from resources import LakeStorageResource, PiiKeyResource
from resources.table_catalog import TableCatalogResource

SEVERITIES = {"error": AssetCheckSeverity.ERROR, "warn": AssetCheckSeverity.WARN}


def compacted_asset(topic: TableSpec, embedded_metastore: bool = True):
    key = asset_key("compacted", topic)
    schema = column_schema(topic, partition_columns=True)
    check_name = table_format_type(topic).compaction_check
    how = table_format_type(topic).described(topic).compaction

    with quiet_warnings(BetaWarning, PreviewWarning):
        # A multi-asset of one: its outputs are optional, so each hour is recorded as it compacts.
        @multi_asset(
            name=f"compacted__{topic.database}__{topic.table}",
            specs=[AssetSpec(
                key,
                description=f"Compacted layer: `{topic.name}` placement hours {how}, once raw hours up to "
                f"{topic.allowed_lateness_hours} h later have landed; rows unchanged.",
                # Hour H holds rows landed by raw hours H … H + allowed lateness.
                deps=[AssetDep(raw_key(topic), partition_mapping=TimeWindowPartitionMapping(
                    start_offset=0, end_offset=topic.allowed_lateness_hours))],
                metadata={"topic": topic.topic, "table_format": topic.table_format,
                          **({"dagster/column_schema": schema} if schema else {})},
                **layer_attributes("compacted", topic, "parquet", *format_kinds(topic)),
            )],
            partitions_def=hourly_partitions(topic),
            check_specs=[AssetCheckSpec(check_name, asset=key, partitions_def=hourly_partitions(topic),
                                        description="The compacted files hold exactly the offsets of the files they replace.")],
            op_tags={"topic": topic.topic},
            pool=table_pool(topic, "compaction", embedded_metastore),
            # A range is one run, as for raw and catalog (the CLI's `--partition-range` needs a single run): its hours
            # compact in order, each recorded as it compacts, and hours not due yet are named at the end.
            backfill_policy=BackfillPolicy.single_run(),
            can_subset=True,
        )
        def compact(
            context: AssetExecutionContext,
            pyspark: LazyPySparkResource,
            lake: LakeStorageResource,
            table_catalog: TableCatalogResource,
            pii: PiiKeyResource,
        ):
            with failures_explained(context, topic.name):
                name_the_run(context, "compacted", topic.topic)
                # Compaction leaves out erased subjects, found by their pseudonyms where the subject field has one.
                tables = topic_tables(topic, lake, table_catalog, pyspark, pii_key=pii.key())
                not_due: list[str] = []
                for partition_key in context.partition_keys:
                    hour = KafkaHour.from_partition_key(partition_key).start
                    try:
                        done = tables.compact_hour(topic, hour)
                    except CompactionNotDue as error:
                        # Not a failure: the hour waits for raw hours still to come, and the sensor compacts it once
                        # they have landed.
                        not_due.append(partition_key)
                        context.log.info(f"skipped, not due yet: {error}")
                        yield not_due_event(context, key, partition_key, error)
                        continue
                    context.log.info(done.summary)
                    yield AssetMaterialization(key, partition=partition_key, metadata=dagster_metadata(done.metadata))
                    yield AssetCheckEvaluation(
                        asset_key=key, check_name=check_name, partition=partition_key, passed=done.check.passed,
                        severity=SEVERITIES[done.check.severity], description=done.check.description,
                        metadata=done.check.metadata)
                if not_due:
                    context.log.info(f"{len(not_due)} of {len(context.partition_keys)} hour(s) not due, skipped: "
                                     f"{', '.join(not_due)}")
                yield from check_outputs(context)

    return compact


def not_due_event(context: AssetExecutionContext, key, partition_key: str, error: CompactionNotDue):
    """What a run records of an hour it skipped, not due yet: an observation of the partition, which stays missing. In a
    backfill, Dagster counts every hour its runs did not materialize as failed, whatever the runs' status (the backfill
    read "Failed" and the Runs list showed it failed, for an hour rightly skipped): there the hour is recorded as a
    materialization that says it was not compacted and why, and the sensor compacts it once it is due."""
    metadata = {"not_due": str(error)}
    if BACKFILL_ID_TAG not in context.run.tags:
        return AssetObservation(key, partition=partition_key, metadata=metadata)
    return AssetMaterialization(key, partition=partition_key, metadata={
        "compacted": "no: not due yet, its files stay as landed; compacted once the raw hours named have landed",
        **metadata})
