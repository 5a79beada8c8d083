"""`compacted/<db>/<table>`: each placement hour rewritten into few large files once raw landing can
no longer add to it, and again when late data does. The work is `kafka_lake.compaction`."""

from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetDep,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionMapping,
    asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.catalog import TopicSpec
from kafka_lake.compaction import CompactionNotDue, CompactionResult, compact_hour, generation_checksum
from kafka_lake.hours import KafkaHour
from platform_assets.assets import HOURS_PER_BACKFILL_RUN
from platform_assets.keys import asset_key, raw_key
from platform_assets.partitions import backfill_policy_in_beta, hourly_partitions
from platform_assets.pools import table_pool
from platform_assets.table_publishing import table_publisher
from resources import LakeStorageResource
from resources.table_catalog import TableCatalogResource
from spark_jobs.compaction_job import run_compactions_on_spark

ROW_SET_UNCHANGED = "row_set_unchanged"


def compacted_asset(topic: TopicSpec, embedded_metastore: bool = True):
    key = asset_key("compacted", topic)

    with backfill_policy_in_beta():
        @asset(
            key=key,
            description=f"`{topic.name}` placement hours rewritten into files near {topic.target_file_mb} MiB, "
            f"once raw hours up to {topic.allowed_lateness_hours} h later have landed; rows unchanged.",
            group_name=topic.database,
            partitions_def=hourly_partitions(topic),
            # Hour H holds rows landed by raw hours H … H + allowed lateness.
            deps=[AssetDep(raw_key(topic), partition_mapping=TimeWindowPartitionMapping(
                start_offset=0, end_offset=topic.allowed_lateness_hours))],
            check_specs=[AssetCheckSpec(ROW_SET_UNCHANGED, asset=key,
                                        description="The new generation holds exactly the offsets of its sources.")],
            kinds={"spark", "parquet"},
            tags={"layer": "compacted"},
            op_tags={"topic": topic.topic},
            pool=table_pool(topic, "compaction", embedded_metastore),
            backfill_policy=BackfillPolicy.multi_run(max_partitions_per_run=HOURS_PER_BACKFILL_RUN),
        )
        def compact(
            context: AssetExecutionContext,
            pyspark: LazyPySparkResource,
            lake: LakeStorageResource,
            table_catalog: TableCatalogResource,
        ):
            storage = lake.storage()
            spark = pyspark.spark_session
            publish = table_publisher(table_catalog, spark, topic, storage)
            results: list[CompactionResult] = []
            not_due: list[str] = []
            for key in context.partition_keys:
                hour = KafkaHour.from_partition_key(key).start
                try:
                    result = compact_hour(
                        topic, hour, storage,
                        lambda tasks, hour=hour: run_compactions_on_spark(spark, tasks, f"compact {topic.topic} {hour}"),
                        publish.switch_to_generations,
                    )
                except CompactionNotDue as error:
                    not_due.append(str(error))  # the other hours of a backfill still compact
                    continue
                results.append(result)
                context.log.info(
                    f"{topic.topic} {key}: {len(result.manifests)} partition(s) rewritten, "
                    f"{len(result.up_to_date)} already compact, {len(result.deleted_sources)} source files deleted"
                )
            if not_due:
                raise CompactionNotDue(f"{len(not_due)} of {len(context.partition_keys)} hour(s) not due "
                                       f"({len(results)} compacted): " + " | ".join(not_due))
            reports = [r for result in results for r in result.reports]
            manifests = [m for result in results for m in result.manifests]
            yield MaterializeResult(metadata={
                "hours": len(results),
                "partitions_rewritten": len(manifests),
                "partitions_up_to_date": sum(len(result.up_to_date) for result in results),
                "files_before": sum(len(r.task.sources) for r in reports),
                "files_after": sum(len(r.files) for r in reports),
                "bytes_before": sum(r.source_bytes for r in reports),
                "bytes_after": sum(f.bytes for r in reports for f in r.files),
                "rows": sum(r.rows for r in reports),
                "duplicate_rows_dropped": sum(r.rows_read - r.rows for r in reports),
                "locations": MetadataValue.json({str(m.partition): storage.uri(m.location) for m in manifests[:100]}),
            })
            written = {m.partition: generation_checksum(storage, m) for m in manifests}
            problems = [
                f"{m.partition}: files hold {written[m.partition]}, sources held {m.offsets_checksum}"
                for m in manifests if written[m.partition] != m.offsets_checksum
            ]
            yield AssetCheckResult(
                check_name=ROW_SET_UNCHANGED,
                passed=not problems,
                description="; ".join(problems) or f"{len(manifests)} generation(s) hold exactly their sources' offsets",
                metadata={"generations": len(manifests)},
            )

    return compact
