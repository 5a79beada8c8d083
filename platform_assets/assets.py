"""The asset factory: every catalog topic becomes `raw/<db>/<table>` + `dead_letters/<db>/<table>`.

One multi-asset per table (per Kafka topic, for the tables landing one topic) lands Kafka hours on Spark; the work
is `kafka_lake.landing.driver`. A run of several hours (a backfill, `--partition-range`) lands them in order in one Spark
application, and records each hour as it commits: its own materialization, metadata and check results, as a run of
that hour alone would.
"""

import re
from datetime import datetime, timedelta, timezone

from dagster import (
    AssetCheckKey,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetRecordsFilter,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    Config,
    FreshnessPolicy,
    MetadataValue,
    multi_asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.decoding.formats import payload_format
from kafka_lake.decoding.pii import pseudonymizer_for
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.schema_resolution import NewSchemaVersion, SchemaRegistryUnavailable, new_schema_versions
from kafka_lake.lake.dead_letters import causes_in
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import HourManifest, ManifestStore
from kafka_lake.landing.driver import LandingResult, LandingSettings, land_hours
from kafka_lake.table_spec import TableSpec
from platform_assets.checks import (
    FRESHNESS,
    HourLanded,
    check_outputs,
    evaluated_against,
    hour_check_evaluations,
    not_landed_evaluations,
    raw_check_specs,
    record_freshness,
    standing_evaluations,
)
from platform_assets.failures import PreflightError, cause_line, failures_explained
from platform_assets.keys import dead_letters_key, layer_attributes, name_the_run, raw_key
from platform_assets.partitions import hourly_partitions, quiet_warnings
from platform_assets.pools import landing_pool
from platform_assets.tables import column_schema, dagster_metadata, topic_tables
from resources import KafkaResource, LakeStorageResource, PiiKeyResource, SchemaRegistryResource, TableCatalogResource
from spark_jobs.landing_job import SlicesOnSpark


def raw_freshness_policy(topic: TableSpec) -> FreshnessPolicy | None:
    """Hours land one after another, so the newest landing is at most an hour plus the SLA old."""
    if topic.freshness_minutes is None:
        return None
    fail = timedelta(hours=1, minutes=topic.freshness_minutes)
    return FreshnessPolicy.time_window(fail_window=fail, warn_window=timedelta(hours=1, minutes=topic.freshness_minutes // 2))


class RawLandingConfig(Config):
    accept_lost_offsets: bool = False
    """Land an hour whose offsets expired from Kafka before they were landed: the rest lands, and the
    loss is recorded in the manifest, reported by `slices_contiguous` and audited under `_audit/`."""


def raw_landing_asset(topic: TableSpec, embedded_metastore: bool = True, together: tuple[TableSpec, ...] = ()):
    """The landing of `topic`, and of the other tables of its Kafka topic in `together` (which share its hourly
    partitions): a run selecting several of them reads the topic once per hour for all (`land_hours`)."""
    tables = (topic, *together)
    name = (f"land_{topic.database}__{topic.table}" if not together
            else f"land_topic__{re.sub('[^a-z0-9_]', '_', topic.topic.lower())}")

    with quiet_warnings(BetaWarning):
        @multi_asset(
            name=name,
            specs=[spec for table in tables for spec in _landing_specs(table)],
            partitions_def=hourly_partitions(topic, open_hour=True),
            check_specs=[spec for table in tables for spec in raw_check_specs(table)],
            op_tags={"topic": topic.topic, "owner": ", ".join(sorted({t.owner for t in tables}))},
            pool=landing_pool(topic, together, embedded_metastore),
            # A range is one run, its hours landed in order in one Spark application (and the CLI's
            # `--partition-range` needs a single run); each hour commits and is recorded on its own.
            backfill_policy=BackfillPolicy.single_run(),
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
            table_catalog: TableCatalogResource,
        ):
            committed: list[str] = []  # the run's hours landed so far, in order
            standing: list[str] = []  # hours it did not land whose earlier landing stands
            landed_tables: set[tuple[str, str]] = set()  # (table, hour)
            with failures_explained(context, topic.topic,
                                    lambda: hours_landed_before_failing(context.partition_keys, committed, standing),
                                    lambda: [hour for hour in context.partition_keys if hour not in committed]):
                name_the_run(context, "raw", topic.topic)
                selected = context.selected_asset_keys
                landing = [t for t in tables if raw_key(t) in selected or dead_letters_key(t) in selected]
                by_name = {(t.database, t.table): t for t in landing}
                try:
                    settings = [landing_settings(t, kafka, lake, schema_registry, pii) for t in landing][0]
                    formats = {t.name: topic_tables(t, lake, table_catalog, pyspark) for t in landing}
                    hours = [KafkaHour.from_partition_key(key) for key in context.partition_keys]
                    if len(hours) > 1:
                        context.log.info(f"landing {topic.topic} into {', '.join(t.name for t in landing)}: {len(hours)} "
                                         f"hours, {hours[0]} to {hours[-1]}")
                    # Each hour's slices start while the hour before still runs; the hours commit in order, and
                    # each is recorded as it commits: a failure later leaves the hours before it landed and shown.
                    for result in land_hours(landing[0], hours, settings, SlicesOnSpark(pyspark.spark_session, topic.topic),
                                             run_id=context.run.run_id, accept_lost_offsets=config.accept_lost_offsets,
                                             together=tuple(landing[1:]), table_formats=lambda t: formats[t.name],
                                             holder_alive=lambda holder: run_going(context.instance, holder)):
                        table = by_name[result.manifest.database, result.manifest.table]
                        if result.unchanged:
                            # An increment of the open hour that found nothing new: the hour stands as it was.
                            landed_tables.add((table.name, result.manifest.hour))
                            context.log.info(f"{table.topic} {result.manifest.hour}: nothing new since its increment "
                                             f"{len(result.manifest.increments)}")
                            yield AssetObservation(raw_key(table), partition=result.manifest.hour,
                                                   metadata=increment_metadata(result.manifest, nothing_new=True))
                            continue
                        context.log.info(_summary_line(table, result))
                        if result.manifest.hour not in committed:
                            committed.append(result.manifest.hour)
                        landed_tables.add((table.name, result.manifest.hour))
                        manifests = ManifestStore(lake.storage(), table.database, table.table)
                        landed = HourLanded(table, result.manifest, manifests, settings.kafka_config, formats[table.name])
                        new_versions = named_schema_versions(context, table, result, settings.schema_registry_url)
                        yield from landed_hour_events(context, landed, lake, result, new_versions)
                except Exception as error:
                    # Each hour the run did not land is shown as what it is: an hour landed before stands, restated with
                    # its standing results; an hour never landed is not judged, saying why.
                    for table in landing:
                        not_landed = [h for h in context.partition_keys if (table.name, h) not in landed_tables]
                        if not_landed:
                            why = f"the run stopped at hour {not_landed[0]}: {cause_line(error)}"
                            for event in unlanded_hour_events(context, table, not_landed, lake, why):
                                if isinstance(event, AssetMaterialization) and event.partition not in standing:
                                    standing.append(event.partition)
                                yield event
                    raise
                finally:
                    for table in landing:
                        if not plans_freshness(context, table):
                            continue  # `topic_health` shows it anew at its next tick
                        if fresh := record_freshness(context.instance, table, datetime.now(timezone.utc)):
                            context.log.info(f"{table.name}: freshness {'passed' if fresh.passed else 'FAILED'}: "
                                             f"{fresh.description}")
                yield from check_outputs(context)

    return land


def plans_freshness(context: AssetExecutionContext, table: TableSpec) -> bool:
    """Whether the run planned the table's freshness check: a run launched from the UI with the asset's checks does, and
    its check step never runs (the landing yields its hours as events, not the output the check waits for), so the
    landing records the check itself; the sensors' runs leave freshness to `topic_health`."""
    if table.freshness_minutes is None:
        return False
    checks = context.run.asset_check_selection
    return checks is None or AssetCheckKey(raw_key(table), FRESHNESS) in checks


def run_going(instance, run_id: str) -> bool:
    """Whether the run holding an hour's lease is still going: a run the instance does not know (a landing outside
    Dagster) counts as going, and its lease expires."""
    run = instance.get_run_by_id(run_id) if run_id else None
    return run is None or not run.is_finished


def hours_landed_before_failing(hours: list[str], landed: list[str], standing: list[str] = ()) -> str:
    """What a run of several hours did before one failed (the hours commit in order, so the first one not landed is the
    one that failed), every hour it did not land, and those whose earlier landing stands. A run can fail after its last
    hour committed (recording it, or its checks): then every hour landed, and the sentence says so."""
    stands = f" The earlier landing of {', '.join(sorted(standing))} stands." if standing else ""
    if len(hours) < 2:
        return stands.strip()
    if all(hour in landed for hour in hours):
        return f"Every hour of the run committed before it failed: {', '.join(landed)}.{stands}"
    failed = next(hour for hour in hours if hour not in landed)
    after = [hour for hour in hours[hours.index(failed) + 1:] if hour not in landed]
    before = f"this run landed {', '.join(landed)} before it" if landed else "this run landed none of its hours"
    return f"Hour {failed} did not land{', nor ' + ', '.join(after) + ' after it' if after else ''}; {before}.{stands}"


def _landing_specs(topic: TableSpec) -> list[AssetSpec]:
    schema = column_schema(topic, partition_columns=False)
    return [
        AssetSpec(
            raw_key(topic),
            description=f"Raw layer: Kafka topic `{topic.topic}`, {payloads_of(topic)}, landed as Parquet, one Kafka "
            f"hour per partition (placed by {topic.time_source}).",
            metadata={"topic": topic.topic, "catalog_file": topic.source_file,
                      "payload_format": payload_format(topic).title,
                      **({"dagster/column_schema": schema} if schema else {})},
            freshness_policy=raw_freshness_policy(topic),
            **layer_attributes("raw", topic, "kafka", payload_format(topic).kind, "spark", "parquet"),
        ),
        AssetSpec(
            dead_letters_key(topic),
            description=f"Dead letters of `{topic.topic}`: records that could not be decoded or placed, with "
            "their raw bytes (PII in clear unless DEAD_LETTER_KEY is set): readable by the owner only."
            + (f" Also the topic's records that no table takes, under _dead_letters/_unrouted/{topic.topic}/."
               if topic.route is not None and topic.lands_unrouted else ""),
            deps=[raw_key(topic)],
            metadata={"topic": topic.topic, "catalog_file": topic.source_file},
            **layer_attributes("dead_letters", topic, "parquet"),
        ),
    ]


def payloads_of(topic: TableSpec) -> str:
    """What the topic's values are, as its description says: the format, and the record (the Protobuf message) its
    newest version reads them as, e.g. `Protobuf messages acme.shop.Order`."""
    payloads = payload_format(topic)
    if not topic.schema_versions:
        return payloads.title
    schema = topic.schema_versions[-1].schema
    record = ".".join(part for part in (schema.get("namespace"), schema.get("name")) if part)
    return f"{payloads.title} {'messages' if payloads.needs_message else 'records'} {record}"


def landing_groups(topics: tuple[TableSpec, ...]) -> list[tuple[TableSpec, ...]]:
    """The tables landed by one asset: those of one Kafka topic sharing their hourly partitions (`start_hour`, and
    whether the open hour is one)."""
    groups: dict[tuple, list[TableSpec]] = {}
    for table in topics:
        groups.setdefault((table.topic, table.start_hour, table.open_hour_minutes is not None), []).append(table)
    return [tuple(group) for group in groups.values()]


def landing_settings(topic: TableSpec, kafka: KafkaResource, lake: LakeStorageResource,
                     schema_registry: SchemaRegistryResource, pii: PiiKeyResource) -> LandingSettings:
    """The run's settings, checked on the driver before any Spark work: a missing secret is one clear line."""
    try:
        dead_letter_key = pii.dead_letter_key()
    except ValueError as error:
        raise PreflightError(str(error)) from None
    settings = LandingSettings(
        lake_root=lake.root,
        kafka_config=kafka.consumer_config(),
        schema_registry_url=schema_registry.client_url(),
        pii_key=pii.key(),
        dead_letter_key=dead_letter_key,
    )
    pseudonymizer_for(topic, settings.pii_key)  # MissingPiiKey here, not in every Spark task
    return settings


def named_schema_versions(context: AssetExecutionContext, topic: TableSpec, result: LandingResult,
                          registry_url: str | None) -> list[NewSchemaVersion]:
    """The schema ids of the hour's dead letters that the catalog lacks and the registry has, each logged by name with
    the command that adds it; the hour is landed either way, so a registry that does not answer is only logged."""
    unknown = result.manifest.unknown_schema_ids
    try:
        found = new_schema_versions(topic, unknown, registry_url)
    except SchemaRegistryUnavailable as error:
        context.log.warning(f"{topic.topic} {result.manifest.hour}: the schema ids the catalog lacks "
                            f"({', '.join(unknown)}) could not be named: {error}")
        return []
    for new in found:
        context.log.warning(f"{topic.topic} {result.manifest.hour}: {unknown[str(new.schema_id)]} dead letter(s): "
                            f"{new.sentence(topic.topic)}")
    return found


def landed_hour_events(context: AssetExecutionContext, landed: HourLanded, lake: LakeStorageResource, result: LandingResult,
                       new_versions: list[NewSchemaVersion] | None = None):
    """The materializations of one committed hour (of the selected assets), then its check results."""
    topic, hour = landed.topic, result.manifest.hour
    selected = context.selected_asset_keys
    if raw_key(topic) in selected:
        metadata = raw_metadata(lake, result, topic)
        if result.manifest.unknown_schema_ids:
            metadata["unknown_schema_ids"] = MetadataValue.json(result.manifest.unknown_schema_ids)
        if new_versions:
            metadata["new_schema_versions"] = MetadataValue.md("\n".join(
                f"- id {new.schema_id}: version {new.version} of subject `{new.subject}`, add it with `{new.command}`"
                for new in new_versions))
        yield AssetMaterialization(raw_key(topic), partition=hour, metadata=metadata)
    if dead_letters_key(topic) in selected:
        yield AssetMaterialization(dead_letters_key(topic), partition=hour, metadata=dead_letter_metadata(lake, result.manifest, topic))
    checks = {key.name for key in context.selected_asset_check_keys if key.asset_key == raw_key(topic)}
    if checks:
        yield from hour_check_evaluations(landed, checks, _latest_materialization(context, topic, hour))


def unlanded_hour_events(context: AssetExecutionContext, table: TableSpec, hours: list[str], lake: LakeStorageResource,
                         why: str):
    """The events of the hours a failed run planned for the table and did not land. An hour whose earlier landing stands
    (its manifest is the commit, untouched by a landing that failed or was refused) is restated: its materializations
    again, from its manifest, and the results its checks had, against them; Dagster shows a partition as failed once
    the latest run that planned it failed, although the hour is landed. An hour never landed gets a failed warning per
    selected check saying it was not evaluated and why: no result, and the check's hour reads "execution failed" and
    turns the check red; a passing one read as passed though nothing was judged."""
    manifests = ManifestStore(lake.storage(), table.database, table.table)
    checks = {key.name for key in context.selected_asset_check_keys if key.asset_key == raw_key(table)}
    never_landed = []
    for hour in hours:
        manifest = manifests.read(KafkaHour.from_partition_key(hour))
        if manifest is None:
            never_landed.append(hour)
            continue
        restated = {"standing_landing": MetadataValue.text(
            f"landed at {manifest.landed_at}{' by run ' + manifest.run_id if manifest.run_id else ''}; it stands: this "
            f"run did not land the hour ({why})")}
        if raw_key(table) in context.selected_asset_keys:
            yield AssetMaterialization(raw_key(table), partition=hour, metadata={
                **hour_metadata(lake, manifest, manifests.path(manifest.kafka_hour), table), **restated})
        if dead_letters_key(table) in context.selected_asset_keys:
            yield AssetMaterialization(dead_letters_key(table), partition=hour,
                                       metadata={**dead_letter_metadata(lake, manifest, table), **restated})
        if checks:
            yield from standing_evaluations(context.instance, context.run.run_id, table, hour, checks,
                                            _latest_materialization(context, table, hour))
    yield from not_landed_evaluations(table, never_landed, checks, why)


def _latest_materialization(context: AssetExecutionContext, topic: TableSpec, hour: str):
    """The hour's materialization just recorded: the check results point at it, so the UI shows them as current."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=raw_key(topic), asset_partitions=[hour]), limit=1).records
    return evaluated_against(records[0] if records else None)


def _summary_line(topic: TableSpec, result: LandingResult) -> str:
    manifest, counts = result.manifest, result.manifest.counts
    return (
        f"{topic.topic} {manifest.hour}: {counts.rows} rows{_kept(counts)}, {counts.dead_letters} dead letters, "
        f"{counts.tombstones} tombstones{_routed(topic, counts)}, {counts.late_events} late, {len(manifest.files)} files from "
        f"{manifest.offsets} offsets in {result.slices} slice(s)"
        + (f", increment {len(manifest.increments)} of the open hour" if not manifest.final
           else f", final after {len(manifest.increments) - 1} increment(s)" if manifest.increments else "")
    )


def _kept(counts: LandingCounts) -> str:
    return f" ({counts.kept_tombstones} of them tombstones kept)" if counts.kept_tombstones else ""


def _routed(topic: TableSpec, counts: LandingCounts) -> str:
    if topic.route is None:
        return ""
    if topic.lands_unrouted:
        return f", {counts.routed_away} routed to other tables, {counts.unrouted} unrouted"
    return f", {counts.routed_away} routed to other tables or unrouted"


def unrouted_keeper(topic: TableSpec) -> AssetKey:
    """The dead letters asset of the routed table that keeps the topic's unrouted records: the first by name."""
    database, table = min([topic.name, *(sibling.name for sibling in topic.routed_siblings)]).split("/")
    return AssetKey(["dead_letters", database, table])


def _routed_counts(topic: TableSpec, counts: LandingCounts) -> dict:
    """A routed table's records that are not its own, named for what each number counts: the table that keeps the
    records no table takes counts them apart; the others count them with the records other tables take."""
    if topic.route is None:
        return {}
    if topic.lands_unrouted:
        return {"routed_to_other_tables": counts.routed_away, "unrouted": counts.unrouted}
    return {"routed_to_other_tables_or_unrouted": counts.routed_away,
            "unrouted_kept_by": MetadataValue.asset(unrouted_keeper(topic))}


def increment_metadata(manifest, nothing_new: bool = False) -> dict:
    """What an hour landed in increments shows on its partition: whether it is final, and each increment's ends and
    when it read the log (everything the hour held then is landed)."""
    if not manifest.increments:
        return {}
    rows = ["| increment | read the log at | landed up to (partition: offset) |", "|---|---|---|"]
    for number, increment in enumerate(manifest.increments, start=1):
        ends = ", ".join(f"{p}: {end}" for p, end in sorted(increment.ends.items(), key=lambda item: int(item[0])))
        rows.append(f"| {number} | {increment.read_at[:19]}Z | {ends} |")
    last = manifest.increments[-1]
    metadata = {
        "final": manifest.final,
        "increments": MetadataValue.md("\n".join(rows)),
        "landed_through": f"{last.read_at[:19]}Z",
        "landed_up_to": MetadataValue.json({p: int(end) for p, end in last.ends.items()}),
    }
    if nothing_new:
        metadata["nothing_new"] = f"the log held nothing beyond increment {len(manifest.increments)} of the open hour"
    return metadata


def raw_metadata(lake: LakeStorageResource, result: LandingResult, topic: TableSpec) -> dict:
    """A landed hour's metadata: what its manifest holds, and what the landing did beside it."""
    return {
        **hour_metadata(lake, result.manifest, result.manifest_path, topic),
        "slices": result.slices,
        "replaced_files": len(result.replaced_files),
        "orphans_removed": len(result.orphans_removed),
        **dagster_metadata(result.table_commit),  # an Iceberg table's snapshot of the hour
    }


def hour_metadata(lake: LakeStorageResource, manifest: HourManifest, manifest_path: str, topic: TableSpec) -> dict:
    """What a landed hour's manifest says of it: offsets, counts, files, how each schema version was decoded."""
    counts = manifest.counts
    rows = ["| partition | start | end | records | rows | dead letters | tombstones | late | start from | end from |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for p in manifest.partitions:
        how = manifest.boundaries.get(str(p.partition), {})
        rows.append(
            f"| {p.partition} | {p.start} | {p.end} | {p.counts.records} | {p.counts.rows} | {p.counts.dead_letters} "
            f"| {p.counts.tombstones} | {p.counts.late_events} | {how.get('start_from', '')} | {how.get('end_from', '')} |"
        )
    return {
        "dagster/row_count": counts.rows,
        "rows": counts.rows,
        "records_read": counts.records,
        "offsets": manifest.offsets,
        "dead_letters": counts.dead_letters,
        "tombstones": counts.tombstones,
        **({"tombstones_kept_as_rows": counts.kept_tombstones} if counts.kept_tombstones else {}),
        **_routed_counts(topic, counts),
        "late_events": counts.late_events,
        "files": len(manifest.files),
        "bytes": manifest.file_bytes,
        "duration_s": manifest.duration_s,
        "schema_versions": MetadataValue.json(manifest.schema_versions),
        "decoding_paths": MetadataValue.json(manifest.decoding_paths),  # per version: columnar, or the record path and why
        **increment_metadata(manifest),
        "partitions": MetadataValue.md("\n".join(rows)),
        "offset_ranges": MetadataValue.json({str(p.partition): [p.start, p.end] for p in manifest.partitions}),
        # Offsets past the hour's end still in an open transaction: committed, they land with the next hour.
        "open_transactions": MetadataValue.json(manifest.open_transactions),
        "held_back": MetadataValue.json(manifest.held_back),
        "manifest": MetadataValue.path(lake.storage().uri(manifest_path)),
    }


def dead_letter_metadata(lake: LakeStorageResource, manifest: HourManifest, topic: TableSpec) -> dict:
    """The hour's dead letters; for a routed topic also its records no table takes (`_dead_letters/_unrouted/<topic>/`),
    listed by the table that keeps them and pointed to by the others."""
    storage = lake.storage()
    files = [f for f in manifest.files if f.kind == "dead_letter"]
    metadata = {
        "dagster/row_count": manifest.counts.dead_letters,
        "dead_letters": manifest.counts.dead_letters,
        "causes": MetadataValue.json(manifest.dead_letter_causes),
        "files": len(files),
        "paths": MetadataValue.json([storage.uri(f.path) for f in files][:50]),
    }
    if topic.route is None:
        return metadata
    if not topic.lands_unrouted:
        return {**metadata, "unrouted_kept_by": MetadataValue.asset(unrouted_keeper(topic))}
    unrouted = [f.path for f in manifest.files if f.kind == "unrouted"]
    return {
        **metadata,
        "dagster/row_count": manifest.counts.dead_letters + manifest.counts.unrouted,  # the rows of the files listed
        "unrouted": manifest.counts.unrouted,
        "unrouted_causes": MetadataValue.json(causes_in(storage, unrouted)),
        "unrouted_paths": MetadataValue.json([storage.uri(path) for path in unrouted][:50]),
    }
