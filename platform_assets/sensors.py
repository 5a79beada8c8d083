"""The platform running itself: closed hours land, landings make compaction and registration follow,
and topics report their freshness, lag and absence from the catalog. One sensor of each kind serves
every topic, so a tick costs a few batched broker requests however many topics there are.

The rules are `kafka_lake.automation`; these functions only gather what the rules need.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetObservation,
    DagsterEventType,
    DefaultSensorStatus,
    RunFailureSensorContext,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    sensor,
)

from kafka_lake import automation
from kafka_lake.catalog import TopicCatalog, TopicSpec
from kafka_lake.cluster import KafkaCluster
from kafka_lake.hours import KafkaHour
from kafka_lake.manifests import ManifestStore
from platform_assets.assets import HOURS_PER_BACKFILL_RUN
from platform_assets.catalog_assets import catalog_key
from platform_assets.checks import FRESHNESS, freshness_metadata, landed_hours
from platform_assets.keys import asset_key, dead_letters_key, raw_key
from resources import AlertWebhookResource, KafkaResource, LakeStorageResource

# Dagster's run tags for a run over a range of partitions (what the UI's backfills set).
PARTITION_RANGE_START, PARTITION_RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
# Follow-up work found in one tick: more waits for the next tick rather than flooding the queue.
MAX_EVENTS_PER_TICK = 500


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _status(running: bool) -> DefaultSensorStatus:
    return DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED


def newest_landed_hour(context: SensorEvaluationContext, topic: TopicSpec) -> KafkaHour | None:
    return landed_hours(context.instance, topic)[1]


def landing_sensor(catalog: TopicCatalog, running: bool = True):
    topics = catalog.topics

    @sensor(
        name="land_closed_hours",
        description="Requests each topic's raw hour H once it is closed: every partition holds a record stamped "
        "after H+1 + record_grace_minutes, or the clock passed H+1 + close_grace_minutes (quiet partitions).",
        minimum_interval_seconds=60,
        asset_selection=[key for topic in topics for key in (raw_key(topic), dead_letters_key(topic))],
        default_status=_status(running),
    )
    def land_closed_hours(context: SensorEvaluationContext, kafka: KafkaResource):
        now = _now()
        cursor = json.loads(context.cursor) if context.cursor else {}
        closed: dict[str, list[KafkaHour]] = {}
        awaiting_records: dict[str, tuple[TopicSpec, KafkaHour]] = {}
        for topic in topics:
            first = (KafkaHour.from_partition_key(cursor[topic.topic]) if topic.topic in cursor
                     else automation.first_hour_to_land(topic, newest_landed_hour(context, topic), now))
            cursor[topic.topic] = first.partition_key
            hours = automation.hours_closed_by_clock(topic, first, now)
            closed[topic.topic] = hours
            pending = hours[-1].next() if hours else first
            if len(hours) < automation.MAX_HOURS_PER_TICK and automation.needs_log_tails(topic, pending, now):
                awaiting_records[topic.topic] = (topic, pending)
        if awaiting_records:
            cluster = KafkaCluster(kafka.consumer_config())
            on_cluster = cluster.topics()
            tails = cluster.log_tails({name: on_cluster[name] for name in awaiting_records if name in on_cluster})
            for name, (topic, hour) in awaiting_records.items():
                if automation.is_closed(topic, hour, now, tails.get(name)):
                    closed[name].append(hour)
        requests = []
        for topic in topics:
            hours = closed[topic.topic]
            requests += runs_for_hours([raw_key(topic), dead_letters_key(topic)], hours)
            if hours:
                cursor[topic.topic] = hours[-1].next().partition_key
        if not requests:
            waiting = ", ".join(f"{name} {hour}" for name, (_, hour) in list(awaiting_records.items())[:10])
            return SensorResult(skip_reason=SkipReason(
                f"no hour closed since the last tick{'; waiting for records after ' + waiting if waiting else ''}"
            ), cursor=json.dumps(cursor, sort_keys=True))
        return SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))

    return land_closed_hours


def follow_up_sensor(catalog: TopicCatalog, running: bool = True):
    """After raw hour H lands: compaction of the placement hours it wrote into (late data included) and of
    the hour it completes the allowed lateness of; after a compaction: registration of that hour."""
    by_raw = {raw_key(t): t for t in catalog.topics}
    by_compacted = {asset_key("compacted", t): t for t in catalog.topics}

    @sensor(
        name="compact_and_register_landed_hours",
        description="Follows every raw landing with compaction of the hours it made due, and every compaction "
        "with the hour's registration in the table catalog.",
        minimum_interval_seconds=30,
        asset_selection=[key for t in catalog.topics for key in (asset_key("compacted", t), catalog_key(t))],
        default_status=_status(running),
    )
    def compact_and_register(context: SensorEvaluationContext, lake: LakeStorageResource):
        after = int(context.cursor) if context.cursor else _latest_storage_id(context)
        events = context.instance.get_asset_event_summary_records(
            DagsterEventType.ASSET_MATERIALIZATION, after_storage_id=after, limit=MAX_EVENTS_PER_TICK, ascending=True,
        )
        if not events:
            return SensorResult(skip_reason=SkipReason("no landing or compaction since the last tick"), cursor=str(after))
        storage = lake.storage()
        to_compact: dict[TopicSpec, set[KafkaHour]] = {}
        to_register: dict[TopicSpec, set[KafkaHour]] = {}
        landed_sets: dict[str, set[KafkaHour]] = {}
        for event in events:
            if event.partition is None:
                continue
            hour = KafkaHour.from_partition_key(event.partition)
            if event.asset_key in by_raw:
                topic = by_raw[event.asset_key]
                manifests = ManifestStore(storage, topic.database, topic.table)
                if topic.topic not in landed_sets:
                    landed_sets[topic.topic] = set(manifests.landed_hours())
                manifest = manifests.read(hour)
                touched = automation.placement_hours(manifest) if manifest else []
                due = automation.due_for_compaction(topic, hour, touched, landed_sets[topic.topic].__contains__)
                to_compact.setdefault(topic, set()).update(due)
            elif event.asset_key in by_compacted:
                to_register.setdefault(by_compacted[event.asset_key], set()).add(hour)
        requests = [
            request
            for layer, wanted in (("compacted", to_compact), ("catalog", to_register))
            for topic, hours in wanted.items()
            # The event's id in the run key: late data may ask for the same hour again later.
            for request in runs_for_hours([asset_key(layer, topic)], hours, f":{events[-1].storage_id}")
        ]
        return SensorResult(run_requests=requests, cursor=str(events[-1].storage_id))

    return compact_and_register


def runs_for_hours(keys: list, hours, run_key_suffix: str = "") -> list[RunRequest]:
    """One run per stretch of consecutive hours (a day at most), as a backfill would cut them: a sensor
    catching up, or a backfill's landings followed by compaction, starts one Spark application per day."""
    requests = []
    for run in automation.consecutive_runs(hours, HOURS_PER_BACKFILL_RUN):
        first, last = run[0], run[-1]
        run_key = f"{keys[0].to_user_string()}:{first}{'..' + str(last) if len(run) > 1 else ''}{run_key_suffix}"
        if len(run) == 1:
            requests.append(RunRequest(run_key=run_key, partition_key=first.partition_key, asset_selection=keys))
        else:
            requests.append(RunRequest(run_key=run_key, asset_selection=keys, tags={
                PARTITION_RANGE_START: first.partition_key, PARTITION_RANGE_END: last.partition_key,
            }))
    return requests


def _latest_storage_id(context: SensorEvaluationContext) -> int:
    """A new sensor starts from now: what landed before it was followed up by whoever landed it."""
    [latest, *_] = context.instance.get_asset_event_summary_records(
        DagsterEventType.ASSET_MATERIALIZATION, limit=1, ascending=False,
    ) or [None]
    return latest.storage_id if latest else 0


def health_sensor(catalog: TopicCatalog, running: bool = True):
    """Freshness as check evaluations, lag as observations, and an alert when freshness fails or recovers."""
    topics = catalog.topics

    @sensor(
        name="topic_health",
        description="Per topic: the freshness check (latest closed hour landed within freshness_minutes), "
        "offset and time lag per partition as observations of raw/…, alerts on failure and recovery.",
        minimum_interval_seconds=300,
        default_status=_status(running),
    )
    def topic_health(context: SensorEvaluationContext, kafka: KafkaResource, lake: LakeStorageResource,
                     alerts: AlertWebhookResource):
        now = _now()
        state = json.loads(context.cursor) if context.cursor else {}
        storage = lake.storage()
        cluster = KafkaCluster(kafka.consumer_config())
        on_cluster = cluster.topics()
        tails = cluster.log_tails({t.topic: on_cluster[t.topic] for t in topics if t.topic in on_cluster})
        events = []
        for topic in topics:
            landed, newest = landed_hours(context.instance, topic)
            result = automation.freshness(topic, lambda h: h.partition_key in landed, now, newest)
            if result is not None:
                previous = state.get(topic.topic)
                current = {"passed": result.passed, "due": str(result.due_hour)}
                if previous != current:
                    events.append(freshness_evaluation(topic, result))
                if previous is not None and previous["passed"] != result.passed:
                    alerts.send(f"[{'RECOVERED' if result.passed else 'FAILED'}] freshness of {topic.topic}: {result.description}")
                elif previous is None and not result.passed:
                    alerts.send(f"[FAILED] freshness of {topic.topic}: {result.description}")
                state[topic.topic] = current
            if topic.topic in tails:
                manifest = ManifestStore(storage, topic.database, topic.table).read(newest) if newest else None
                events.append(lag_observation(topic, automation.landing_lag(manifest, tails[topic.topic]), newest))
        return SensorResult(asset_events=events, cursor=json.dumps(state, sort_keys=True))

    return topic_health


def freshness_evaluation(topic: TopicSpec, result: automation.Freshness) -> AssetCheckEvaluation:
    return AssetCheckEvaluation(
        asset_key=raw_key(topic),
        check_name=FRESHNESS,
        passed=result.passed,
        severity=AssetCheckSeverity.ERROR,
        description=result.description,
        metadata=freshness_metadata(topic, result),
    )


def lag_observation(topic: TopicSpec, lags: list[automation.PartitionLag], newest: KafkaHour | None) -> AssetObservation:
    metadata = {
        "lag_records": sum(lag.records for lag in lags),
        "lag_seconds": max((lag.seconds for lag in lags), default=0.0),
        "newest_landed_hour": str(newest) if newest else "none",
    }
    for lag in lags:
        metadata[f"lag_records_p{lag.partition}"] = lag.records
        metadata[f"lag_seconds_p{lag.partition}"] = lag.seconds
    return AssetObservation(asset_key=raw_key(topic), metadata=metadata)


def missing_topics_sensor(catalog: TopicCatalog, running: bool = True):
    catalog_topics = [t.topic for t in catalog.topics]

    @sensor(
        name="topics_missing_from_catalog",
        description="Reports Kafka topics on the cluster that no catalog entry lands (add them under schema_catalog/).",
        minimum_interval_seconds=600,
        default_status=_status(running),
    )
    def topics_missing_from_catalog(context: SensorEvaluationContext, kafka: KafkaResource, alerts: AlertWebhookResource):
        missing = automation.topics_missing_from_catalog(KafkaCluster(kafka.consumer_config()).topics(), catalog_topics)
        reported = set(json.loads(context.cursor)) if context.cursor else set()
        new = [name for name in missing if name not in reported]
        if new:
            alerts.send(f"topics on the cluster missing from the catalog: {', '.join(new)}")
        if missing:
            context.log.warning(f"{len(missing)} topic(s) on the cluster are missing from the catalog: {', '.join(missing)}")
        summary = (f"{len(missing)} topic(s) missing from the catalog: {', '.join(missing[:50])}" if missing
                   else "every topic on the cluster is in the catalog")
        return SensorResult(skip_reason=SkipReason(summary), cursor=json.dumps(missing))

    return topics_missing_from_catalog


def failed_runs_sensor(catalog: TopicCatalog, running: bool = True):
    @run_failure_sensor(
        name="alert_on_failed_runs",
        description="Posts every failed run (after its retries) to the alert webhook, with the error's first line.",
        default_status=_status(running),
        monitor_all_code_locations=False,
    )
    def alert_on_failed_runs(context: RunFailureSensorContext, alerts: AlertWebhookResource):
        run = context.dagster_run
        if run.tags.get("dagster/will_retry") == "true":
            return  # the retry is not a failure yet
        steps = context.get_step_failure_events()
        error = steps[0].step_failure_data.error if steps else None
        while error is not None and error.cause is not None:
            error = error.cause  # Dagster wraps the asset's own exception: that one says what happened
        message = (error.message if error else context.failure_event.message) or "no message"
        partition = run.tags.get("dagster/partition") or run.tags.get("dagster/asset_partition_range_start") or ""
        selection = ", ".join(sorted(k.to_user_string() for k in run.asset_selection or [])) or run.job_name
        alerts.send(f"[FAILED] run {run.run_id[:8]} of {selection} {partition}: {message.strip().splitlines()[0][:500]}")

    return alert_on_failed_runs


def platform_sensors(catalog: TopicCatalog, running: bool = True) -> list:
    return [factory(catalog, running) for factory in
            (landing_sensor, follow_up_sensor, health_sensor, missing_topics_sensor, failed_runs_sensor)]
