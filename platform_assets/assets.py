"""The asset factory: every catalog topic becomes `raw/<db>/<table>` + `dead_letters/<db>/<table>`.

One multi-asset per topic lands Kafka hours on Spark; the work is `kafka_lake.landing`. A backfill
run lands up to a day of hours in order, in one Spark application.
"""

from datetime import timedelta

from dagster import (
    AssetCheckKey,
    AssetExecutionContext,
    AssetMaterialization,
    AssetSpec,
    BackfillPolicy,
    Config,
    FreshnessPolicy,
    MaterializeResult,
    MetadataValue,
    multi_asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.catalog import TopicSpec
from kafka_lake.hours import KafkaHour
from kafka_lake.landing import LandingResult, LandingSettings, land_hours
from kafka_lake.manifests import ManifestStore
from platform_assets.checks import raw_check_results, raw_check_specs
from platform_assets.keys import dead_letters_key, raw_key
from platform_assets.partitions import hourly_partitions
from platform_assets.pools import landing_pool
from resources import KafkaResource, LakeStorageResource, PiiKeyResource, SchemaRegistryResource
from spark_jobs.landing_job import SlicesOnSpark

# A backfill run lands up to a day of hours in one Spark application: one start-up per day, not per hour,
# and a failure costs at most a day's re-run (every hour is idempotent).
HOURS_PER_BACKFILL_RUN = 24


def raw_freshness_policy(topic: TopicSpec) -> FreshnessPolicy | None:
    """Hours land one after another, so the newest landing is at most an hour plus the SLA old."""
    if topic.freshness_minutes is None:
        return None
    fail = timedelta(hours=1, minutes=topic.freshness_minutes)
    return FreshnessPolicy.time_window(fail_window=fail, warn_window=timedelta(hours=1, minutes=topic.freshness_minutes // 2))


class RawLandingConfig(Config):
    accept_lost_offsets: bool = False
    """Land an hour whose offsets expired from Kafka before they were landed: the rest lands, and the
    loss is recorded in the manifest, reported by `slices_contiguous` and audited under `_audit/`."""


def raw_landing_asset(topic: TopicSpec, embedded_metastore: bool = True):
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
                freshness_policy=raw_freshness_policy(topic),
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
        pool=landing_pool(topic),
        backfill_policy=BackfillPolicy.multi_run(max_partitions_per_run=HOURS_PER_BACKFILL_RUN),
        # `--select raw/<db>/<table>` alone must work: the landing always writes both, and reports what was selected.
        can_subset=True,
    )
    def land(
        context: AssetExecutionContext,
        config: RawLandingConfig,
        pyspark: LazyPySparkResource,
        kafka: KafkaResource,
        lake: LakeStorageResource,
        schema_registry: SchemaRegistryResource,
        pii: PiiKeyResource,
    ):
        settings = LandingSettings(
            lake_root=lake.root,
            kafka_config=kafka.consumer_config(),
            schema_registry_url=schema_registry.client_url(),
            pii_key=pii.key(),
            dead_letter_key=pii.dead_letter_key(),
        )
        spark = pyspark.spark_session
        hours = [KafkaHour.from_partition_key(key) for key in context.partition_keys]
        results: list[LandingResult] = []
        try:
            # Each hour's slices start while the hour before still runs; the hours commit in order.
            for result in land_hours(topic, hours, settings, SlicesOnSpark(spark, topic.topic),
                                     run_id=context.run.run_id, accept_lost_offsets=config.accept_lost_offsets):
                results.append(result)
                context.log.info(_summary_line(topic, result))
        except Exception:
            # The hours before the failure are committed: the UI shows them landed, the rest failed.
            for result in results:
                for key, metadata in _selected_metadata(context, topic, lake, [result]):
                    context.log_event(AssetMaterialization(key, partition=result.manifest.hour, metadata=metadata))
            raise
        for key, metadata in _selected_metadata(context, topic, lake, results):
            yield MaterializeResult(asset_key=key, metadata=metadata)
        checks = raw_check_results(topic, [r.manifest for r in results], ManifestStore(lake.storage(), topic.database, topic.table))
        yield from (check for check in checks if AssetCheckKey(check.asset_key, check.check_name) in context.selected_asset_check_keys)

    return land


def _summary_line(topic: TopicSpec, result: LandingResult) -> str:
    totals = result.manifest.totals()
    return (
        f"{topic.topic} {result.manifest.hour}: {totals['rows']} rows, {totals['dead_letters']} dead letters, "
        f"{totals['tombstones']} tombstones, {totals['late_events']} late, {totals['files']} files from "
        f"{totals['offsets']} offsets in {result.slices} slice(s)"
    )


def _selected_metadata(context: AssetExecutionContext, topic: TopicSpec, lake: LakeStorageResource,
                       results: list[LandingResult]):
    selected = context.selected_asset_keys
    one = len(results) == 1
    if raw_key(topic) in selected:
        yield raw_key(topic), raw_metadata(lake, results[0]) if one else hours_metadata(results)
    if dead_letters_key(topic) in selected:
        yield dead_letters_key(topic), dead_letter_metadata(lake, results[0]) if one else hours_metadata(results, "dead_letters")


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


def hours_metadata(results: list[LandingResult], focus: str = "rows") -> dict:
    """A run of several hours: totals, and one line per hour (each hour's manifest has the detail)."""
    totals = [r.manifest.totals() for r in results]
    lines = ["| hour | offsets | rows | dead letters | tombstones | late | files |", "|---|---|---|---|---|---|---|"]
    lines += [
        f"| {r.manifest.hour} | {t['offsets']} | {t['rows']} | {t['dead_letters']} | {t['tombstones']} | {t['late_events']} | {t['files']} |"
        for r, t in zip(results, totals)
    ]
    summed = {key: sum(t[key] for t in totals) for key in ("rows", "offsets", "dead_letters", "tombstones", "late_events", "files", "bytes")}
    return {
        focus: summed[focus],
        **{key: value for key, value in summed.items() if key != focus},
        "hours": len(results),
        "first_hour": results[0].manifest.hour,
        "last_hour": results[-1].manifest.hour,
        "per_hour": MetadataValue.md("\n".join(lines)),
    }
