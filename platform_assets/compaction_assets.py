"""`compacted/<db>/<table>`: each placement hour rewritten into few large files once raw landing can
no longer add to it, and again when late data does. The work is `kafka_lake.compaction`."""

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetMaterialization,
    BackfillPolicy,
    BetaWarning,
    MetadataValue,
    PreviewWarning,
    TimeWindowPartitionMapping,
    AssetSpec,
    multi_asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.catalog import TopicSpec
from kafka_lake.compaction import CompactionNotDue, CompactionResult, compact_hour, generation_checksum
from kafka_lake.hours import KafkaHour
from platform_assets.assets import HOURS_PER_BACKFILL_RUN
from platform_assets.failures import failures_explained
from platform_assets.keys import asset_key, layer_attributes, raw_key
from platform_assets.partitions import hourly_partitions, quiet_warnings
from platform_assets.pools import table_pool
from platform_assets.table_publishing import column_schema, table_publisher
from resources import LakeStorageResource
from resources.table_catalog import TableCatalogResource
from spark_jobs.compaction_job import run_compactions_on_spark

ROW_SET_UNCHANGED = "row_set_unchanged"


def compacted_asset(topic: TopicSpec, embedded_metastore: bool = True):
    key = asset_key("compacted", topic)
    schema = column_schema(topic, partition_columns=True)

    with quiet_warnings(BetaWarning, PreviewWarning):
        # A multi-asset of one: its outputs are optional, so each hour is recorded as it compacts.
        @multi_asset(
            name=f"compacted__{topic.database}__{topic.table}",
            specs=[AssetSpec(
                key,
                description=f"Compacted layer: `{topic.name}` placement hours rewritten into files near "
                f"{topic.target_file_mb} MiB, once raw hours up to {topic.allowed_lateness_hours} h later have "
                "landed; rows unchanged.",
                # Hour H holds rows landed by raw hours H … H + allowed lateness.
                deps=[AssetDep(raw_key(topic), partition_mapping=TimeWindowPartitionMapping(
                    start_offset=0, end_offset=topic.allowed_lateness_hours))],
                metadata={"topic": topic.topic, **({"dagster/column_schema": schema} if schema else {})},
                **layer_attributes("compacted", topic, "spark", "parquet"),
            )],
            partitions_def=hourly_partitions(topic),
            check_specs=[AssetCheckSpec(ROW_SET_UNCHANGED, asset=key, partitions_def=hourly_partitions(topic),
                                        description="The new generation holds exactly the offsets of its sources.")],
            op_tags={"topic": topic.topic},
            pool=table_pool(topic, "compaction", embedded_metastore),
            backfill_policy=BackfillPolicy.multi_run(max_partitions_per_run=HOURS_PER_BACKFILL_RUN),
            can_subset=True,
        )
        def compact(
            context: AssetExecutionContext,
            pyspark: LazyPySparkResource,
            lake: LakeStorageResource,
            table_catalog: TableCatalogResource,
        ):
            with failures_explained(context):
                storage = lake.storage()
                spark = pyspark.spark_session
                publish = table_publisher(table_catalog, spark, topic, storage)
                not_due: list[str] = []
                for partition_key in context.partition_keys:
                    hour = KafkaHour.from_partition_key(partition_key).start
                    try:
                        result = compact_hour(
                            topic, hour, storage,
                            lambda tasks, hour=hour: run_compactions_on_spark(spark, tasks, f"compact {topic.topic} {hour}"),
                            publish.switch_to_generations,
                        )
                    except CompactionNotDue as error:
                        not_due.append(str(error))  # the other hours of a backfill still compact
                        continue
                    context.log.info(
                        f"{topic.topic} {partition_key}: {len(result.manifests)} partition(s) rewritten, "
                        f"{len(result.up_to_date)} already compact, {len(result.deleted_sources)} source files deleted"
                    )
                    yield AssetMaterialization(key, partition=partition_key, metadata=compaction_metadata(storage, result))
                    yield row_set_check(key, partition_key, storage, result)
                if not_due:
                    raise CompactionNotDue(f"{len(not_due)} of {len(context.partition_keys)} hour(s) not due: "
                                           + " | ".join(not_due))

    return compact


def compaction_metadata(storage, result: CompactionResult) -> dict:
    reports, manifests = result.reports, result.manifests
    rows = sum(r.rows for r in reports)
    return {
        "dagster/row_count": rows,
        "partitions_rewritten": len(manifests),
        "partitions_up_to_date": len(result.up_to_date),
        "files_before": sum(len(r.task.sources) for r in reports),
        "files_after": sum(len(r.files) for r in reports),
        "bytes_before": sum(r.source_bytes for r in reports),
        "bytes_after": sum(f.bytes for r in reports for f in r.files),
        "rows": rows,
        "duplicate_rows_dropped": sum(r.rows_read - r.rows for r in reports),
        "locations": MetadataValue.json({str(m.partition): storage.uri(m.location) for m in manifests[:100]}),
    }


def row_set_check(key, partition_key: str, storage, result: CompactionResult) -> AssetCheckEvaluation:
    written = {m.partition: generation_checksum(storage, m) for m in result.manifests}
    problems = [
        f"{m.partition}: files hold {written[m.partition]}, sources held {m.offsets_checksum}"
        for m in result.manifests if written[m.partition] != m.offsets_checksum
    ]
    return AssetCheckEvaluation(
        asset_key=key, check_name=ROW_SET_UNCHANGED, partition=partition_key, passed=not problems,
        description="; ".join(problems) or f"{len(result.manifests)} generation(s) hold exactly their sources' offsets",
        metadata={"generations": len(result.manifests)},
    )
