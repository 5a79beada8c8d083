"""The platform running itself: closed hours land, landings make compaction and registration follow,
and topics report their freshness, lag and absence from the catalog. One sensor of each kind serves
every topic, so a tick costs a few batched broker requests however many topics there are.

The rules are `kafka_lake.automation`; these functions only gather what the rules need.
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetObservation,
    DagsterEventType,
    DefaultSensorStatus,
    RunFailureSensorContext,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    sensor,
)
from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES
from dagster._core.storage.tags import SENSOR_NAME_TAG, WILL_RETRY_TAG

from kafka_lake import automation
from kafka_lake.asks import Ask
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.cluster import TICK_BUDGET_S, ClusterTails, KafkaCluster, batches
from kafka_lake.kafka.schema_resolution import SchemaRegistryUnavailable, new_schema_versions
from kafka_lake.lake.manifests import HourManifest, ManifestStore
from kafka_lake.run_plan import PlannedRun, plan_runs
from kafka_lake.settings import DEFAULT_TOPICS_PER_RUN
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.archive import ArchivedTopics, topics_to_archive
from kafka_lake.topics.loader import TopicCatalog
from platform_assets.asks import follow_asks, in_flight, materialized_by, record_asks
from platform_assets.assets import landing_groups
from platform_assets.catalog_health import rejected_entries_sensor
from platform_assets.checks import (
    FRESHNESS,
    evaluate_freshness,
    evaluated_against,
    freshness_evaluation,
    landed_hours,
    landed_in_freshness_window,
    latest_landings,
    recent_landings,
)
from platform_assets.jobs import (
    COMPACTION_JOB,
    PARTITION_RANGE_END,
    PARTITION_RANGE_START,
    PARTITION_TAG,
    TOPIC_TAG,
    TOPICS_TAG,
    LayerRun,
    compaction_job,
    compaction_run,
    current_state_job,
    current_state_run,
    landing_job,
    landing_run,
    registration_job,
    registration_run,
)
from platform_assets.keys import asset_key, raw_key
from platform_assets.pools import ensure_pools
from resources import AlertWebhookResource, KafkaResource, LakeStorageResource, SchemaRegistryResource

# The landing sensor's cursor entry naming the topics the broker did not answer for in the last tick (no Kafka topic
# name holds parentheses, so it never meets a topic's own entry).
UNREAD = "(unread last tick)"
# The landing sensor's cursor entry holding, per topic landed in increments, when its last increment was requested.
INCREMENTS = "(increments)"
# The landing sensor's cursor entry saying which set of pools (a digest) is known to exist in the instance.
POOLS_MADE = "(pools made)"
# A sensor new to a topic asks the instance for its newest landed hour, a query each: a new sensor over thousands of
# topics spends this much of a tick on them, and looks up the rest in the next ticks.
NEW_TOPICS_BUDGET_S = 10.0
# What `topic_health` does in one tick, well inside Dagster's tick timeout (60 s) on a busy host, and a few CPU seconds
# of the code server: a topic whose due hour the tick's one pass over recent landings does not show costs a few reads of
# the instance and the lake, so a catalog of thousands late at once is judged over several ticks, none skipped twice.
HEALTH_TICK_BUDGET_S = 12.0
# How far back `topic_health` reads every topic's landings in one pass; a due hour older than this is asked on its own.
RECENT_LANDINGS = timedelta(hours=30)
# Manifests read at once by `topic_health`: requests to S3 wait on the network, not the CPU.
MANIFEST_READERS = 16
# Follow-up work found in one tick: more waits for the next tick rather than flooding the queue.
MAX_EVENTS_PER_TICK = 500


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _status(running: bool) -> DefaultSensorStatus:
    return DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED


def newest_landed_hour(context: SensorEvaluationContext, topic: TableSpec) -> KafkaHour | None:
    return landed_hours(context.instance, topic)[1]


def landing_sensor(catalog: TopicCatalog, running: bool = True, topics_per_run: int = DEFAULT_TOPICS_PER_RUN,
                   pools: tuple[str, ...] = ()):
    topics = catalog.topics
    pools_digest = hashlib.sha1("\n".join(sorted(pools)).encode()).hexdigest()[:12]
    shared = {t.topic for t in topics if len(catalog.tables_of(t.topic)) > 1}

    by_name = {t.name: t for t in topics}
    by_raw_key = {raw_key(t): t.name for t in topics}

    def tables_of_subject(subject: str) -> list[str]:
        """A landing step's failure names its Kafka topic: every table landed from it."""
        return [t.name for t in catalog.tables_of(subject)] if subject not in by_name else [subject]

    def landing_request_of_ask(ask: Ask) -> RunRequest:
        tables = tuple(by_name[name] for name in ask.units if name in by_name)
        return landing_run(landing_groups(tables)).request(ask.key, ask.first, ask.last)

    def _cursor_key(topic: TableSpec) -> str:
        """A table's key in the cursor: its Kafka topic, or `topic database/table` where several tables land it."""
        return f"{topic.topic} {topic.name}" if topic.topic in shared else topic.topic

    @sensor(
        name="land_closed_hours",
        description="Requests each topic's raw hour H once it is closed: every partition holds a record stamped "
        "after H+1 + record_grace_minutes, or the clock passed H+1 + close_grace_minutes (quiet partitions). "
        "Each tick logs, per topic, which hour it judged and why.",
        minimum_interval_seconds=60,
        jobs=[landing_job(topics)],
        default_status=_status(running),
    )
    def land_closed_hours(context: SensorEvaluationContext, kafka: KafkaResource, alerts: AlertWebhookResource):
        now = _now()
        cursor = json.loads(context.cursor) if context.cursor else {}
        if cursor.get(POOLS_MADE) != pools_digest:
            created, left = ensure_pools(context.instance, pools)
            if created:
                context.log.info(f"{len(created)} concurrency pool(s) created at the default limit: "
                                 f"{', '.join(created[:20])}{' …' if len(created) > 20 else ''}")
            if left:
                context.log.info(f"{left} concurrency pool(s) left to create next tick")
            else:
                cursor[POOLS_MADE] = pools_digest
        asked_again = follow_asks(context, "land_closed_hours", cursor, landing_request_of_ask, by_raw_key,
                                  tables_of_subject, alerts, now)
        going = in_flight(cursor)
        # Keyed by table: the tables of one Kafka topic land on their own, each from its newest landed hour.
        closed: dict[str, list[KafkaHour]] = {}
        starts: dict[str, str] = {}
        pending: dict[str, KafkaHour] = {}
        awaiting_records: dict[str, tuple[TableSpec, KafkaHour]] = {}
        not_looked_up: list[TableSpec] = []
        looked_up = 0
        lookups_end = time.monotonic() + NEW_TOPICS_BUDGET_S
        # Of the topics new to the sensor, those never landed need no query of their own: one read tells them all.
        new = [raw_key(topic) for topic in topics if _cursor_key(topic) not in cursor]
        ever_landed = latest_landings(context.instance, new) if new else {}
        for topic in topics:
            name = _cursor_key(topic)
            if name in cursor:
                first, starts[name] = KafkaHour.from_partition_key(cursor[name]), "where the last tick left off"
            elif raw_key(topic) not in ever_landed:
                first, starts[name] = automation.first_hour_to_land(topic, None, now), "a new topic: its start_hour"
            elif time.monotonic() >= lookups_end:
                not_looked_up.append(topic)  # not in the cursor: looked up by the next tick
                continue
            else:
                looked_up += 1
                newest = newest_landed_hour(context, topic)
                first = automation.first_hour_to_land(topic, newest, now)
                starts[name] = f"after the newest landed hour {newest}" if newest else "a new topic: its start_hour"
            cursor[name] = first.partition_key
            hours = automation.hours_closed_by_clock(topic, first, now)
            closed[name] = hours
            pending[name] = hours[-1].next() if hours else first
            if len(hours) < automation.MAX_HOURS_PER_TICK and automation.needs_log_tails(topic, pending[name], now):
                awaiting_records[name] = (topic, pending[name])
        tails = ClusterTails()
        if awaiting_records:
            cluster = KafkaCluster(kafka.consumer_config())
            on_cluster = cluster.topics()
            # The topics the broker did not answer for last tick are asked first: each is judged within a tick or two.
            wanted = sorted({topic.topic for topic, _ in awaiting_records.values()},
                            key=lambda kafka_topic: (kafka_topic not in cursor.get(UNREAD, []), kafka_topic))
            tails = cluster.log_tails({kafka_topic: on_cluster[kafka_topic] for kafka_topic in wanted if kafka_topic in on_cluster})
            for name, (topic, hour) in awaiting_records.items():
                if topic.topic not in tails.unread and automation.is_closed(topic, hour, now, tails.get(topic.topic)):
                    closed[name].append(hour)
                    pending[name] = hour.next()
        cursor[UNREAD] = sorted(tails.unread)
        # A topic whose open hour lands in increments (`open_hour`): the hour still open lands what it holds so far,
        # every `open_hour_minutes`; the hour's landing once closed makes it final.
        increments, held_back, last_increments = {}, {}, cursor.get(INCREMENTS, {})
        for topic in topics:
            name = _cursor_key(topic)
            if topic.open_hour_minutes is None or name not in closed or len(closed[name]) >= automation.MAX_HOURS_PER_TICK:
                continue
            due = automation.increment_due(topic, pending[name], now, last_increments.get(name))
            if due is None and (topic.name, pending[name].partition_key) in going:
                held_back[name] = pending[name]  # one increment of a topic at a time: the next lands all it missed
            elif due is None:
                increments[name] = pending[name]
                last_increments[name] = now.isoformat(timespec="seconds")
        cursor[INCREMENTS] = {name: at for name, at in last_increments.items() if name in closed}
        requests = landing_requests({table: closed.get(_cursor_key(table), []) + (
            [increments[_cursor_key(table)]] if _cursor_key(table) in increments else []) for table in topics},
            topics_per_run, f":{now:%Y%m%d%H%M}" if increments else "")
        record_asks(cursor, requests, by_raw_key, now)  # those asked again are kept by `follow_asks`
        requests += asked_again
        if requests:
            context.log.info(f"{len(requests)} run(s) requested: " + "; ".join(
                f"{request.tags.get(TOPICS_TAG) or request.tags.get(TOPIC_TAG)} for {_hours_of(request)}"
                for request in requests)[:4000])
        judged = []
        for topic in not_looked_up:
            line = (f"{_who(topic, _cursor_key(topic) != topic.topic)}: not judged this tick, judged next tick: its newest "
                    f"landed hour is asked of the instance first (this tick's {NEW_TOPICS_BUDGET_S:.0f}s for topics new to "
                    f"the sensor went to {looked_up} others)")
            context.log.info(line)
            judged.append(line)
        for topic in topics:
            name = _cursor_key(topic)
            if name not in closed:
                continue
            hours = closed[name]
            if hours:
                cursor[name] = hours[-1].next().partition_key
            line = _landing_judgement(topic, starts[name], hours, pending[name], now,
                                      tails.get(topic.topic) if name in awaiting_records else None, name != topic.topic,
                                      tails.unread.get(topic.topic) if name in awaiting_records else None)
            if topic.open_hour_minutes is not None:
                line += "; " + (f"increment of {pending[name]} requested (the hour is open; every "
                                f"{topic.open_hour_minutes} min)" if name in increments else
                                f"increment of {pending[name]} waits for the one asked before, still queued or running"
                                if name in held_back else
                                automation.increment_due(topic, pending[name], now, last_increments.get(name)) or "")
            context.log.info(line)
            judged.append(line)
        if not requests:
            return SensorResult(skip_reason=SkipReason(_shortened("no hour closed since the last tick: " + " | ".join(judged))),
                                cursor=json.dumps(cursor, sort_keys=True))
        return SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))

    return land_closed_hours


def landing_requests(closed: dict[TableSpec, list[KafkaHour]], topics_per_run: int = DEFAULT_TOPICS_PER_RUN,
                     run_key_suffix: str = "") -> list[RunRequest]:
    """The runs landing the closed hours of many topics (`run_plan.plan_runs`): a unit of a run is the tables of one
    landing asset (one Kafka topic) that need an hour, which land it in one step that reads the topic once. An open
    hour among them is landed as an increment; its runs recur, so their keys carry `run_key_suffix` (the tick's time)."""
    due: dict[tuple[TableSpec, ...], set[KafkaHour]] = {}
    for group in landing_groups(tuple(closed)):
        by_hour: dict[KafkaHour, list[TableSpec]] = {}
        for table in group:
            for hour in closed[table]:
                by_hour.setdefault(hour, []).append(table)
        for hour, tables in by_hour.items():
            due.setdefault(tuple(tables), set()).add(hour)
    runs = plan_runs(due, name=lambda unit: f"{unit[0].topic} {unit[0].name}", topics_per_run=topics_per_run)
    return [requested(landing_run(run.units), run, [t.name for unit in run.units for t in unit], run_key_suffix)
            for run in runs]


def requested(layer_run: LayerRun, run: PlannedRun, names: list[str], run_key_suffix: str = "") -> RunRequest:
    """The run request of a planned run: its key names the layer, the hours and (by digest) the tables it carries."""
    return layer_run.request(f"{layer_run.job_name}:{run.key(names)}{run_key_suffix}", run.first.partition_key,
                             run.last.partition_key)


def _hours_of(request: RunRequest) -> str:
    tags = request.tags
    return tags.get(PARTITION_TAG) or f"{tags.get(PARTITION_RANGE_START)}...{tags.get(PARTITION_RANGE_END)}"


def _landing_judgement(topic: TableSpec, start: str, requested: list[KafkaHour], pending: KafkaHour, now: datetime,
                       tails, shared: bool = False, unread: str | None = None) -> str:
    """One line per topic and tick: what was requested, and why the next hour was not (or was not judged)."""
    done = (f"requested {requested[0]}{' to ' + str(requested[-1]) if len(requested) > 1 else ''} (closed)"
            if requested else "requested nothing")
    if len(requested) >= automation.MAX_HOURS_PER_TICK:
        why = f"caught up {len(requested)} hours; {pending} and later next tick"
    elif unread is not None:
        why = f"{pending} not judged this tick, judged first next tick: {unread}"
    else:
        why = f"{pending} not closed: {automation.why_open(topic, pending, now, tails)}"
    return f"{_who(topic, shared)}: {done}; {why} (started {start})"


def _who(topic: TableSpec, shared: bool) -> str:
    return f"{topic.topic} into {topic.name}" if shared else topic.topic


def _shortened(text: str, limit: int = 2000) -> str:
    """A skip reason stays readable in the UI's tick list; the tick's log has every line."""
    return text if len(text) <= limit else text[: limit - 40] + f" … ({len(text) - limit + 40} more characters in the tick's log)"


def follow_up_sensor(catalog: TopicCatalog, running: bool = True, topics_per_run: int = DEFAULT_TOPICS_PER_RUN):
    """After raw hour H lands: compaction of the placement hours it wrote into (late data included) and of
    the hour it completes the allowed lateness of; after a compaction: registration of that hour."""
    by_raw = {raw_key(t): t for t in catalog.topics}
    by_compacted = {asset_key("compacted", t): t for t in catalog.topics}
    unit_of_key = {**{key: t.name for key, t in by_compacted.items()},
                   **{asset_key("catalog", t): t.name for t in catalog.topics}}
    by_name = {t.name: t for t in catalog.topics}

    def request_of_ask(ask: Ask) -> RunRequest:
        layer_run = compaction_run if ask.key.startswith(f"{COMPACTION_JOB}:") else registration_run
        return layer_run(tuple(by_name[name] for name in ask.units if name in by_name)).request(
            ask.key, ask.first, ask.last)

    @sensor(
        name="compact_and_register_landed_hours",
        description="Follows every raw landing with compaction of the hours it made due, and every compaction "
        "with the hour's registration in the table catalog.",
        minimum_interval_seconds=30,
        jobs=[compaction_job(catalog.topics), registration_job(catalog.topics)],
        default_status=_status(running),
    )
    def compact_and_register(context: SensorEvaluationContext, lake: LakeStorageResource,
                             alerts: AlertWebhookResource):
        now = _now()
        cursor = follow_up_cursor(context)
        after = cursor[AFTER]
        events, waiting = events_of_ended_runs(context.instance, after)
        again = follow_asks(context, "compact_and_register_landed_hours", cursor, request_of_ask, unit_of_key,
                            lambda subject: [subject], alerts, now)
        if not events:
            return SensorResult(run_requests=again, skip_reason=None if again else SkipReason(
                waiting or "no landing or compaction since the last tick"), cursor=json.dumps(cursor))
        storage = lake.storage()
        to_compact: dict[TableSpec, set[KafkaHour]] = {}
        to_register: dict[TableSpec, set[KafkaHour]] = {}
        landed: dict[tuple[str, KafkaHour], bool] = {}  # asked of storage once a tick, for the hours in question only
        for event in events:
            if event.partition is None:
                continue
            hour = KafkaHour.from_partition_key(event.partition)
            if event.asset_key in by_raw:
                topic = by_raw[event.asset_key]
                manifests = ManifestStore(storage, topic.database, topic.table)
                manifest = manifests.read(hour)
                if manifest is not None and not manifest.final:
                    continue  # an increment of the open hour: compaction follows the hour once final
                if manifest is not None and manifest.run_id and event.run_id and manifest.run_id != event.run_id:
                    continue  # a run that did not land the hour restated its standing landing: nothing new to follow
                touched = automation.placement_hours(manifest) if manifest else []

                def is_landed(kafka_hour: KafkaHour, topic=topic, manifests=manifests) -> bool:
                    if (topic.topic, kafka_hour) not in landed:
                        landed[topic.topic, kafka_hour] = manifests.exists(kafka_hour)
                    return landed[topic.topic, kafka_hour]

                due = automation.due_for_compaction(topic, hour, touched, is_landed)
                to_compact.setdefault(topic, set()).update(due)
            elif event.asset_key in by_compacted:
                to_register.setdefault(by_compacted[event.asset_key], set()).add(hour)
        requests = []
        for layer_run, wanted in ((compaction_run, to_compact), (registration_run, to_register)):
            for table, hours in sorted(((t, h) for t, h in wanted.items() if h), key=lambda item: item[0].name):
                context.log.info(f"{table.topic}: {layer_run((table,)).job_name} of {table.name} requested for "
                                 f"{', '.join(map(str, sorted(hours)))}")
            # The event's id in the run key: late data may ask for the same hour again later.
            requests += table_requests(layer_run, wanted, topics_per_run, f":{events[-1].storage_id}")
        if not requests:
            context.log.info(f"{len(events)} new materialization(s), none made an hour due")
        cursor[AFTER] = events[-1].storage_id
        record_asks(cursor, requests, unit_of_key, now)
        return SensorResult(run_requests=requests + again, cursor=json.dumps(cursor))

    return compact_and_register


def current_state_sensor(catalog: TopicCatalog, running: bool = True, topics_per_run: int = DEFAULT_TOPICS_PER_RUN):
    """After raw hour H of a change topic lands, or lands again: H applied to the topic's current-state table."""
    by_raw = {raw_key(t): t for t in catalog.topics if t.current_state is not None}
    unit_of_key = {asset_key("current", t): t.name for t in by_raw.values()}
    by_name = {t.name: t for t in by_raw.values()}

    def request_of_ask(ask: Ask) -> RunRequest:
        return current_state_run(tuple(by_name[name] for name in ask.units if name in by_name)).request(
            ask.key, ask.first, ask.last)

    @sensor(
        name="apply_landed_hours_to_current_state",
        description="Follows every landing of a change topic's raw hour with its application to the topic's "
        "current-state table (topics with current_state).",
        minimum_interval_seconds=30,
        jobs=[current_state_job(catalog.topics)] if by_raw else [],
        default_status=_status(running),
    )
    def apply_to_current_state(context: SensorEvaluationContext, lake: LakeStorageResource,
                               alerts: AlertWebhookResource):
        now = _now()
        cursor = follow_up_cursor(context)
        after = cursor[AFTER]
        events, waiting = events_of_ended_runs(context.instance, after)
        again = follow_asks(context, "apply_landed_hours_to_current_state", cursor, request_of_ask, unit_of_key,
                            lambda subject: [subject], alerts, now)
        if not events:
            return SensorResult(run_requests=again, skip_reason=None if again else SkipReason(
                waiting or "no landing since the last tick"), cursor=json.dumps(cursor))
        landed: dict[TableSpec, set[KafkaHour]] = {}
        for event in events:
            if event.asset_key in by_raw and event.partition is not None:
                topic, hour = by_raw[event.asset_key], KafkaHour.from_partition_key(event.partition)
                if topic.open_hour_minutes is not None and not _is_final(lake, topic, hour):
                    continue  # an increment of the open hour: the hour is applied once final
                landed.setdefault(topic, set()).add(hour)
        for topic, hours in sorted(landed.items(), key=lambda item: item[0].name):
            context.log.info(f"{topic.topic}: current-state application requested for "
                             f"{', '.join(map(str, sorted(hours)))}")
        # The event's id in the run key: a landing again of the same hour asks for its application again.
        requests = table_requests(current_state_run, landed, topics_per_run, f":{events[-1].storage_id}")
        cursor[AFTER] = events[-1].storage_id
        record_asks(cursor, requests, unit_of_key, now)
        return SensorResult(run_requests=requests + again, cursor=json.dumps(cursor))

    return apply_to_current_state


def table_requests(layer_run, due: dict[TableSpec, set[KafkaHour]], topics_per_run: int,
                   run_key_suffix: str = "") -> list[RunRequest]:
    """The runs of a layer whose unit is a table (compaction, registration, current state): the tables due for the same
    stretch of hours share runs of at most `topics_per_run` tables."""
    runs = plan_runs(due, name=lambda table: table.name, topics_per_run=topics_per_run)
    return [requested(layer_run(run.units), run, [t.name for t in run.units], run_key_suffix) for run in runs]


def _is_final(lake: LakeStorageResource, topic: TableSpec, hour: KafkaHour) -> bool:
    manifest = ManifestStore(lake.storage(), topic.database, topic.table).read(hour)
    return manifest is not None and manifest.final


def events_of_ended_runs(instance, after: int) -> tuple[list, str]:
    """The materializations after storage id `after`, up to the first of a run still going, and why the rest waits.

    A run carrying many topics materializes them over minutes: followed up as they come, each tick would ask for a
    run of the few topics landed since the one before, each paying a run's fixed cost. Followed up once the run has
    ended, its topics go on together. Runless events (reported from outside a run) never wait."""
    events = instance.get_asset_event_summary_records(
        DagsterEventType.ASSET_MATERIALIZATION, after_storage_id=after, limit=MAX_EVENTS_PER_TICK, ascending=True)
    run_ids = sorted({event.run_id for event in events if event.run_id})
    going = {run.run_id: run for run in instance.get_runs(RunsFilter(run_ids=run_ids, statuses=NOT_FINISHED_STATUSES))
             } if run_ids else {}
    for index, event in enumerate(events):
        if event.run_id in going:
            run = going[event.run_id]
            return events[:index], (f"waiting for run {run.run_id[:8]} ({run.job_name}"
                                    f"{', ' + run.tags[TOPICS_TAG].split(':')[0] + ' topics' if TOPICS_TAG in run.tags else ''})"
                                    f" to end before following up what it materialized")
    return events, ""


# The follow-up sensors' cursor entry: the storage id of the last materialization followed up.
AFTER = "after"


def follow_up_cursor(context: SensorEvaluationContext) -> dict:
    """A follow-up sensor's cursor: where it left off in the event log, and its open asks. A cursor of earlier
    versions held the storage id alone."""
    if not context.cursor:
        return {AFTER: _latest_storage_id(context)}
    cursor = json.loads(context.cursor)
    return cursor if isinstance(cursor, dict) else {AFTER: int(cursor)}


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
        description="Per topic: the freshness check (the latest hour past its deadline, freshness_minutes after "
        "its end, is landed, and when), "
        "offset and time lag per partition as observations of raw/…, alerts on failure and recovery "
        "(in the tick's log and to ALERT_WEBHOOK_URL), and the schema versions the newest landed hour met that the "
        "catalog lacks, named as the registry has them (an alert once per new id).",
        minimum_interval_seconds=300,
        default_status=_status(running),
    )
    def topic_health(context: SensorEvaluationContext, kafka: KafkaResource, lake: LakeStorageResource,
                     alerts: AlertWebhookResource, schema_registry: SchemaRegistryResource):
        now = _now()
        deadline = time.monotonic() + HEALTH_TICK_BUDGET_S
        state = json.loads(context.cursor) if context.cursor else {}
        storage = lake.storage()
        cluster = KafkaCluster(kafka.consumer_config())
        on_cluster = cluster.topics()
        with_sla = [t for t in topics if t.freshness_minutes is not None]
        shown = shown_freshness(context.instance, with_sla)
        # Every topic's landings since the earliest due hour ended, in one pass over the event log; a topic whose due
        # hour is not among them (late, or older than a day) is asked about on its own.
        since = max([min((automation.due_hour(t, now).end for t in with_sla), default=now), now - RECENT_LANDINGS])
        recent = recent_landings(context.instance, {raw_key(t) for t in topics}, since)
        latest = latest_landings(context.instance, [raw_key(t) for t in topics])
        newest_of: dict[str, KafkaHour | None] = {}

        def judge(topic: TableSpec, tails: ClusterTails, manifests: dict) -> list:
            events: list = []
            landed, newest = newest_of.pop(topic.name, None) or landed_in_freshness_window(context.instance, topic, now,
                                                                                            recent, latest)
            result = automation.freshness(topic, lambda h: landed.get(h.partition_key), now, newest)
            if result is not None:
                previous = state.get(topic.topic)
                evaluation = freshness_evaluation(topic, result, shown[topic.topic].latest_materialization)
                if shown[topic.topic].differs_from(evaluation):
                    events.append(evaluation)  # a change, or a run or a landing made the shown state stale
                context.log.info(f"{topic.topic}: freshness {'passed' if result.passed else 'FAILED'}: {result.description}")
                alert = automation.freshness_alert(topic, previous["passed"] if previous else None, result)
                if alert:
                    alerts.send(alert, context.log)
                state[topic.topic] = {"passed": result.passed, "due": str(result.due_hour)}
            if topic.topic in tails:
                manifest = manifests.get(topic.name)
                events.append(lag_observation(topic, automation.landing_lag(manifest, tails[topic.topic]), newest))
                if manifest is not None and manifest.unknown_schema_ids:
                    state[ALERTED_SCHEMA_IDS] = report_new_schema_versions(
                        context, topic, manifest, schema_registry.client_url(), alerts, state.get(ALERTED_SCHEMA_IDS, []))
            elif topic.topic in tails.unread:
                context.log.info(f"{topic.topic}: lag not observed this tick, observed first next tick: "
                                 f"{tails.unread[topic.topic]}")
            return events

        # Each tick judges what its time allows, the topics it did not reach last tick first, and names the rest.
        tables: dict[str, list[TableSpec]] = {}
        for topic in topics:
            tables.setdefault(topic.topic, []).append(topic)
        before = set(state.get(UNREAD, []))
        order = sorted(tables, key=lambda name: (name not in before, name))
        events, unjudged = [], {}
        for batch in batches({name: on_cluster.get(name, []) for name in order}):
            left = deadline - time.monotonic()
            tails = (cluster.log_tails({name: numbers for name, numbers in batch.items() if numbers},
                                       budget_s=min(left, TICK_BUDGET_S)) if left > 0 else ClusterTails())
            unjudged.update(tails.unread)
            # The newest landed hour's manifest of each table of the batch, read at once (on S3, a request each).
            in_batch = [topic for name in batch for topic in tables[name] if name in tails]
            for topic in in_batch:
                newest_of[topic.name] = landed_in_freshness_window(context.instance, topic, now, recent, latest)
            with ThreadPoolExecutor(max_workers=MANIFEST_READERS) as readers:
                manifests = dict(zip((t.name for t in in_batch), readers.map(
                    lambda t: ManifestStore(storage, t.database, t.table).read(newest_of[t.name][1])
                    if newest_of[t.name][1] else None, in_batch)))
            for name in batch:
                if time.monotonic() >= deadline:
                    unjudged[name] = f"the tick's {HEALTH_TICK_BUDGET_S:.0f}s went to other topics"
                    context.log.info(f"{name}: not judged this tick, judged first next tick: {unjudged[name]}")
                    continue
                for topic in tables[name]:
                    events += judge(topic, tails, manifests)
        state[UNREAD] = sorted(unjudged)
        if unjudged:
            context.log.warning(f"{len(unjudged)} of {len(tables)} topic(s) not judged in full this tick, first next tick")
        return SensorResult(asset_events=events, cursor=json.dumps(state, sort_keys=True))

    return topic_health


# The cursor's key for the schema ids alerted so far, as `<topic> <id>`: no Kafka topic has a space in its name.
ALERTED_SCHEMA_IDS = "schema ids alerted"


def report_new_schema_versions(context: SensorEvaluationContext, topic: TableSpec, manifest: HourManifest,
                               registry_url: str | None, alerts: AlertWebhookResource, alerted: list[str]) -> list[str]:
    """Logs, in the tick, each schema id of the newest landed hour's dead letters that the catalog lacks, named as the
    registry has it; alerts once per id the registry has. Returns the ids alerted so far."""
    unknown = manifest.unknown_schema_ids
    try:
        named = {new.schema_id: new for new in new_schema_versions(topic, unknown, registry_url)}
    except SchemaRegistryUnavailable as error:
        context.log.warning(f"{topic.topic}: schema ids the catalog lacks in hour {manifest.hour} ({', '.join(unknown)}), "
                            f"not named: {error}")
        return alerted
    for schema_id, records in unknown.items():
        new = named.get(int(schema_id))
        if new is None:
            where = "is not in the schema registry" if registry_url else "cannot be named without SCHEMA_REGISTRY_URL"
            context.log.warning(f"{topic.topic}: {records} dead letter(s) in hour {manifest.hour} carry schema id "
                                f"{schema_id}, which the catalog lacks and {where}")
            continue
        context.log.warning(f"{topic.topic}: {records} dead letter(s) in hour {manifest.hour}: {new.sentence(topic.topic)}")
        key = f"{topic.topic} {schema_id}"
        if key not in alerted:
            alerts.send(f"[SCHEMA] {new.sentence(topic.topic)}", context.log)
            alerted = sorted({*alerted, key})
    return alerted


class ShownFreshness:
    """What the UI shows of a topic's freshness check: its latest recorded execution, and the newest landing
    (an unpartitioned check's result is shown as current only if it is not older than the newest landing)."""

    def __init__(self, execution, latest_materialization):
        self.execution = execution
        self.latest_materialization = latest_materialization

    def differs_from(self, evaluation: AssetCheckEvaluation) -> bool:
        shown = self.execution.event.dagster_event.event_specific_data if self.execution and self.execution.event else None
        if not isinstance(shown, AssetCheckEvaluation):
            return True  # never evaluated, or a run planned it and ended without a result
        target = shown.target_materialization_data
        landed = self.latest_materialization
        return ((shown.passed, shown.description) != (evaluation.passed, evaluation.description)
                or (landed is not None and (target is None or target.storage_id != landed.storage_id)))


def shown_freshness(instance, topics: list[TableSpec]) -> dict[str, ShownFreshness]:
    """Each topic's shown freshness, in two batched reads of the instance."""
    keys = {topic.topic: AssetCheckKey(raw_key(topic), FRESHNESS) for topic in topics}
    executions = instance.event_log_storage.get_latest_asset_check_execution_by_key(list(keys.values()))
    records = {record.asset_entry.asset_key: record.asset_entry.last_materialization_record
               for record in instance.get_asset_records([raw_key(topic) for topic in topics])}
    shown = {}
    for topic in topics:
        shown[topic.topic] = ShownFreshness(executions.get(keys[topic.topic]), evaluated_against(records.get(raw_key(topic))))
    return shown


def lag_observation(topic: TableSpec, lags: list[automation.PartitionLag], newest: KafkaHour | None) -> AssetObservation:
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
    @sensor(
        name="topics_missing_from_catalog",
        description="Archives new topics the catalog's archive rule takes (they appear as raw tables after the code "
        "location reloads), and reports Kafka topics on the cluster that no catalog entry lands (add them under "
        "schema_catalog/).",
        minimum_interval_seconds=600,
        default_status=_status(running),
    )
    def topics_missing_from_catalog(context: SensorEvaluationContext, kafka: KafkaResource, lake: LakeStorageResource,
                                    alerts: AlertWebhookResource):
        on_cluster = KafkaCluster(kafka.consumer_config()).topics()
        archived = ArchivedTopics(lake.storage()).add(topics_to_archive(on_cluster, catalog), _now())
        if archived:
            context.log.info(f"archiving {len(archived)} new topic(s) as raw tables of {catalog.archive.database}, "
                             f"landed once the code location reloads: {', '.join(archived)}")
        missing = automation.topics_missing_from_catalog(on_cluster, catalog)
        rejected = sorted({entry.topic for entry in catalog.broken if entry.topic in on_cluster})
        if rejected:
            context.log.info(f"{len(rejected)} topic(s) on the cluster have a rejected catalog entry, not a missing one "
                             f"(see catalog_entries_rejected): {', '.join(rejected)}")
        reported = set(json.loads(context.cursor)) if context.cursor else set()
        new = [name for name in missing if name not in reported]
        if new:
            alerts.send(f"topics on the cluster missing from the catalog: {', '.join(new)}", context.log)
        if missing:
            context.log.warning(f"{len(missing)} topic(s) on the cluster are missing from the catalog: {', '.join(missing)}")
        # New ones first: on a cluster with hundreds of uncatalogued topics, the one that just appeared is shown.
        shown = new + [name for name in missing if name not in new]
        summary = (f"{len(missing)} topic(s) missing from the catalog ({len(new)} new): {', '.join(shown[:50])}"
                   f"{' …' if len(shown) > 50 else ''}" if missing else "every topic on the cluster is in the catalog")
        if archived:
            summary = f"{len(archived)} new topic(s) archived (reload the code location to land them); {summary}"
        return SensorResult(skip_reason=SkipReason(summary), cursor=json.dumps(missing))

    return topics_missing_from_catalog


# The sensors that keep what they asked for (`platform_assets.asks`): when a run of theirs is lost with its announced
# retry, they ask again for what it did not land, alerting `[ASKED AGAIN]`; their runs' failures wait for the retries.
ASKING_SENSORS = frozenset({"land_closed_hours", "compact_and_register_landed_hours",
                            "apply_landed_hours_to_current_state"})


def failed_runs_sensor(catalog: TopicCatalog, running: bool = True):
    by_raw = {raw_key(t): t for t in catalog.topics if t.freshness_minutes is not None}

    @run_failure_sensor(
        name="alert_on_failed_runs",
        description="Posts every failed run to the alert webhook, with the error's first line (a run of the layers' "
        "sensors after its retries); records the freshness of a topic again when a failed run left its check without a "
        "result.",
        default_status=_status(running),
        monitor_all_code_locations=False,
    )
    def alert_on_failed_runs(context: RunFailureSensorContext, alerts: AlertWebhookResource):
        run = context.dagster_run
        # A landing launched from the UI also runs the freshness check, which its failure leaves "execution
        # failed": what has landed did not change, so the freshness shown is put right at once.
        shown = shown_freshness(context.instance, list(by_raw.values()))
        for topic in by_raw.values():
            execution = shown[topic.topic].execution
            if execution is not None and execution.run_id == run.run_id and execution.status.value == "PLANNED":
                result = evaluate_freshness(context.instance, topic, _now())
                context.instance.report_runless_asset_event(
                    freshness_evaluation(topic, result, shown[topic.topic].latest_materialization))
        if run.tags.get(WILL_RETRY_TAG) == "true" and run.tags.get(SENSOR_NAME_TAG) in ASKING_SENSORS:
            return  # the retry is not a failure yet; should it never start, the sensor asks again, saying so
        # This sensor sees each failure once: a run nothing else watches (launched from the UI, the CLI or the
        # retention schedule) is posted now, saying its retry is announced, lest a retry that never starts go unseen.
        step_failures = [step.step_failure_data for step in context.get_step_failure_events()]
        committed = None if step_failures else len(table_hours_materialized(context.instance, run.run_id))
        alerts.send(failed_run_alert(run, step_failures, context.failure_event.message, committed), context.log)

    return alert_on_failed_runs


def failed_run_alert(run, step_failures: list, run_message: str | None, committed: int | None = None) -> str:
    """A failed run in one alert. A run carrying many topics names each failed step's topic or table, the hours it did
    not do and why, one line each (the other topics of the run committed); a run of one topic says its cause. A run
    none of whose steps failed (failed before they started, its worker lost) says so, with the run's failure message
    and the table-hours its materializations show `committed` (None: not counted)."""
    partition = run.tags.get(PARTITION_TAG) or _partition_range(run.tags)
    carried = run.tags.get(TOPICS_TAG)
    one = carried is None and len(step_failures) < 2
    what = (", ".join(sorted(k.to_user_string() for k in run.asset_selection or [])) or run.job_name if one
            else f"{run.job_name} of {carried.split(':', 1)[0]} topics" if carried else run.job_name)
    retry = ("\nA retry is announced: if none appears in the Runs list within minutes, it was lost and nothing retries "
             "this run." if run.tags.get(WILL_RETRY_TAG) == "true" else "")
    head = f"[FAILED] run {run.run_id[:8]} of {what}{' ' + partition if partition else ''}"
    if not step_failures:
        known = ("what committed, its materializations show" if committed is None
                 else "no materialization of it was recorded: nothing of it is known to have committed" if not committed
                 else f"its materializations show {committed} table-hour(s) committed; nothing else of it is known to "
                      f"have committed")
        return (f"{head}: no step failed; the run failed before or outside its steps: "
                f"{_first_line(run_message or 'no message').rstrip('.')} ({known}).{retry}")
    if one:
        return f"{head}: {_first_line(failure_cause(step_failures[0]) or 'no message')}{retry}"
    return (f"{head}: {len(step_failures)} failed, the others committed:\n"
            + "\n".join(f"- {_failed_step_line(failure)}" for failure in step_failures) + retry)


def table_hours_materialized(instance, run_id: str) -> set[tuple[tuple[str, ...], str]]:
    """The (table, hour) pairs the run's materializations record, whatever their layer."""
    return {(tuple(key.path[1:]), partition) for key, partition in materialized_by(instance, run_id)}


def _failed_step_line(step_failure) -> str:
    metadata = step_failure.user_failure_data.metadata if step_failure.user_failure_data is not None else {}
    subject, hours = (metadata[name].value if name in metadata else "" for name in ("subject", "hours"))
    where = " ".join(part for part in (subject, hours) if part)
    cause = _first_line(failure_cause(step_failure) or "no message")
    return f"{where}: {cause}" if where else cause


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:1000] if text.strip() else "no message"


def _partition_range(tags) -> str:
    """The hours of a run over a range, as the UI and the CLI write a range: `first...last`."""
    first, last = tags.get(PARTITION_RANGE_START), tags.get(PARTITION_RANGE_END)
    return f"{first}...{last}" if first and last else ""


# Spark's own wrappers of a task's exception: the cause below them is already named by `SparkTaskFailed`.
_SPARK_WRAPPERS = {"PythonException", "Py4JJavaError", "CapturedException"}


def failure_cause(step_failure) -> str | None:
    """The step's cause in one line: the description of a `Failure` the asset raised (a lasting cause it
    classified), else the innermost exception Dagster wrapped, above Spark's own wrappers."""
    if step_failure is None:
        return None
    if step_failure.user_failure_data is not None and step_failure.user_failure_data.description:
        return step_failure.user_failure_data.description
    error = step_failure.error
    while error is not None and error.cause is not None and error.cause.cls_name not in _SPARK_WRAPPERS:
        error = error.cause  # Dagster wraps the asset's own exception: that one says what happened
    if error is None:
        return None
    named = not error.cls_name or error.message.startswith(error.cls_name)
    return error.message if named else f"{error.cls_name}: {error.message}"


def platform_sensors(catalog: TopicCatalog, running: bool = True, topics_per_run: int = DEFAULT_TOPICS_PER_RUN,
                     pools: tuple[str, ...] = ()) -> list:
    """`pools`: every concurrency pool the code location's assets use, made by the landing sensor ahead of their runs."""
    sensors = [landing_sensor(catalog, running, topics_per_run, pools), follow_up_sensor(catalog, running, topics_per_run)]
    sensors += [factory(catalog, running) for factory in
                (health_sensor, missing_topics_sensor, failed_runs_sensor, rejected_entries_sensor)]
    if any(topic.current_state is not None for topic in catalog.topics):
        sensors.append(current_state_sensor(catalog, running, topics_per_run))
    return sensors
