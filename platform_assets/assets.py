"""The asset factory: every catalog topic becomes `raw/<db>/<table>` + `dead_letters/<db>/<table>`.

One multi-asset per topic lands a Kafka hour on Spark; the work is `kafka_lake.landing`.
"""


from dagster import AssetCheckKey, AssetExecutionContext, AssetSpec, MaterializeResult, MetadataValue, multi_asset
from dagster_pyspark import LazyPySparkResource

from kafka_lake.catalog import TopicSpec
from kafka_lake.hours import KafkaHour
from kafka_lake.landing import LandingResult, LandingSettings, land_hour
from kafka_lake.manifests import ManifestStore
from platform_assets.checks import raw_check_results, raw_check_specs
from platform_assets.keys import dead_letters_key, raw_key
from platform_assets.partitions import hourly_partitions
from resources import KafkaResource, LakeStorageResource, PiiKeyResource, SchemaRegistryResource
from spark_jobs.landing_job import run_slices_on_spark


def raw_landing_asset(topic: TopicSpec):
    tags = {"topic": topic.topic, "owner": topic.owner}

    @multi_asset(
        name=f"land_{topic.database}__{topic.table}",
        specs=[
            AssetSpec(
                raw_key(topic),
                description=f"Kafka topic `{topic.topic}` landed as Parquet, one Kafka hour per partition "
                f"(placed by {topic.time_source}).",
                group_name=topic.database,
                owners=[f"team:{topic.owner}"] if topic.owner else [],
                tags={"layer": "raw"},
                metadata={"topic": topic.topic, "catalog_file": topic.source_file},
                kinds={"kafka", "spark", "parquet"},
            ),
            AssetSpec(
                dead_letters_key(topic),
                description=f"Records of `{topic.topic}` that could not be decoded or placed, with their raw bytes.",
                group_name=topic.database,
                tags={"layer": "dead_letters"},
                kinds={"parquet"},
            ),
        ],
        partitions_def=hourly_partitions(topic),
        check_specs=raw_check_specs(topic),
        op_tags=tags,
        # `--select raw/<db>/<table>` alone must work: the landing always writes both, and reports what was selected.
        can_subset=True,
    )
    def land(
        context: AssetExecutionContext,
        pyspark: LazyPySparkResource,
        kafka: KafkaResource,
        lake: LakeStorageResource,
        schema_registry: SchemaRegistryResource,
        pii: PiiKeyResource,
    ):
        hour = KafkaHour.from_partition_key(context.partition_key)
        settings = LandingSettings(
            lake_root=lake.root,
            kafka_config=kafka.consumer_config(),
            schema_registry_url=schema_registry.url,
            pii_key=pii.key(),
        )
        spark = pyspark.spark_session
        result = land_hour(
            topic,
            hour,
            settings,
            lambda tasks: run_slices_on_spark(spark, tasks, f"land {topic.topic} {hour}"),
            run_id=context.run.run_id,
        )
        context.log.info(_summary_line(topic, result))
        selected = context.selected_asset_keys
        if raw_key(topic) in selected:
            yield MaterializeResult(asset_key=raw_key(topic), metadata=raw_metadata(lake, result))
        if dead_letters_key(topic) in selected:
            yield MaterializeResult(asset_key=dead_letters_key(topic), metadata=dead_letter_metadata(lake, result))
        checks = raw_check_results(topic, result.manifest, ManifestStore(lake.storage(), topic.database, topic.table))
        yield from (check for check in checks if AssetCheckKey(check.asset_key, check.check_name) in context.selected_asset_check_keys)

    return land


def _summary_line(topic: TopicSpec, result: LandingResult) -> str:
    totals = result.manifest.totals()
    return (
        f"{topic.topic} {result.manifest.hour}: {totals['rows']} rows, {totals['dead_letters']} dead letters, "
        f"{totals['tombstones']} tombstones, {totals['late_events']} late, {totals['files']} files from "
        f"{totals['offsets']} offsets in {result.slices} slice(s)"
    )


def raw_metadata(lake: LakeStorageResource, result: LandingResult) -> dict:
    manifest = result.manifest
    totals = manifest.totals()
    rows = ["| partition | start | end | records | rows | dead letters | tombstones | late | start from | end from |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for p in manifest.partitions:
        how = manifest.boundaries.get(str(p.partition), {})
        rows.append(
            f"| {p.partition} | {p.start} | {p.end} | {p.records} | {p.rows} | {p.dead_letters} | {p.tombstones} "
            f"| {p.late_events} | {how.get('start_from', '')} | {how.get('end_from', '')} |"
        )
    return {
        "rows": totals["rows"],
        "records_read": totals["records"],
        "offsets": totals["offsets"],
        "dead_letters": totals["dead_letters"],
        "tombstones": totals["tombstones"],
        "late_events": totals["late_events"],
        "files": totals["files"],
        "bytes": totals["bytes"],
        "slices": result.slices,
        "duration_s": manifest.duration_s,
        "schema_versions": MetadataValue.json(manifest.schema_versions),
        "partitions": MetadataValue.md("\n".join(rows)),
        "offset_ranges": MetadataValue.json({str(p.partition): [p.start, p.end] for p in manifest.partitions}),
        "manifest": MetadataValue.path(lake.storage().uri(result.manifest_path)),
        "replaced_files": len(result.replaced_files),
        "orphans_removed": len(result.orphans_removed),
    }


def dead_letter_metadata(lake: LakeStorageResource, result: LandingResult) -> dict:
    manifest = result.manifest
    files = [f for f in manifest.files if f.kind == "dead_letter"]
    return {
        "dead_letters": manifest.totals()["dead_letters"],
        "causes": MetadataValue.json(manifest.dead_letter_causes),
        "files": len(files),
        "paths": MetadataValue.json([lake.storage().uri(f.path) for f in files][:50]),
    }
