"""Asset checks of raw landing: the invariants of each landed hour, evaluated from the manifests the landing
just committed and recorded on that hour's partition; and the freshness SLA, evaluated from what has landed.

A landing check is one entry of `LANDING_CHECKS`: its name, severity, description and rule.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetRecordsFilter,
    BetaWarning,
    DagsterEventType,
    Output,
    PreviewWarning,
    asset_check,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.storage.asset_check_execution_record import COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES

from kafka_lake import automation
from kafka_lake.hours import KafkaHour
from kafka_lake.lake import landing_checks
from kafka_lake.lake.manifests import HourManifest, ManifestStore
from kafka_lake.landing.driver import confirm_boundaries
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.formats import TABLE_FORMATS, table_format_type
from kafka_lake.tables.table_format import TableFormat
from platform_assets.keys import raw_key
from platform_assets.partitions import hourly_partitions, quiet_warnings

SLICES_CONTIGUOUS = "slices_contiguous"
COUNTS_BALANCE = "counts_balance"
DEAD_LETTER_RATE = "dead_letter_rate"
BOUNDARIES_CONFIRMED = "boundaries_confirmed"
FRESHNESS = "freshness"


@dataclass(frozen=True)
class HourLanded:
    """What a landing check may judge a landed hour by: its manifest, the table's other manifests, and the broker."""

    topic: TableSpec
    manifest: HourManifest
    manifests: ManifestStore
    kafka_config: dict = field(repr=False)
    tables: TableFormat | None = field(default=None, repr=False)  # the topic's table format, for its own check

    def neighbour(self, offset: int) -> HourManifest | None:
        hour = self.manifest.kafka_hour
        return self.manifests.read(hour.previous() if offset < 0 else hour.next())


@dataclass(frozen=True)
class LandingCheck:
    """One invariant of a landed hour: `rule` judges it."""

    name: str
    severity: AssetCheckSeverity
    description: Callable[[TableSpec], str]
    rule: Callable[[HourLanded], landing_checks.CheckOutcome]


LANDING_CHECKS: list[LandingCheck] = [
    LandingCheck(SLICES_CONTIGUOUS, AssetCheckSeverity.ERROR,
                 lambda topic: "Offsets tile with the landed neighbour hours: no gap, no overlap.",
                 lambda landed: landing_checks.slices_contiguous(landed.manifest, landed.neighbour(-1), landed.neighbour(+1))),
    LandingCheck(COUNTS_BALANCE, AssetCheckSeverity.ERROR,
                 lambda topic: "rows + dead letters + tombstones = records read, per partition.",
                 lambda landed: landing_checks.counts_balance(landed.manifest)),
    LandingCheck(DEAD_LETTER_RATE, AssetCheckSeverity.WARN,
                 lambda topic: f"Dead letters under {topic.dead_letter_rate_threshold:.0%} of records.",
                 lambda landed: landing_checks.dead_letter_rate(landed.manifest, landed.topic.dead_letter_rate_threshold)),
    LandingCheck(BOUNDARIES_CONFIRMED, AssetCheckSeverity.ERROR,
                 lambda topic: "The broker's records confirm every boundary no landed neighbour hour fixes: none before "
                               "the first landed hour's start is stamped in it, none before an end is stamped after it, "
                               "and none stamped in the hour was held back past the committed end it ends at.",
                 lambda landed: confirm_boundaries(landed.topic, landed.manifest, landed.manifests, landed.kafka_config)),
]


def checks_of(topic: TableSpec) -> list[LandingCheck]:
    """`LANDING_CHECKS`, and the check of the topic's table format where it has one (an Iceberg table holds exactly
    the files the manifest lists)."""
    name = table_format_type(topic).landing_check
    if name is None:
        return LANDING_CHECKS
    return LANDING_CHECKS + [LandingCheck(
        name, AssetCheckSeverity.ERROR,
        lambda topic: "The table's current snapshot holds exactly the hour's landed files, its commit recorded in the "
                      "snapshot summary.",
        lambda landed: landed.tables.landed_hour_check(landed.topic, landed.manifest))]


def landing_check_names() -> list[str]:
    """Every check a landing of any table can evaluate, whatever its table format, and freshness: what a run that selected
    a table's raw asset with its checks may name (a run queued before its catalog entry was rejected)."""
    formats = [load() for load in TABLE_FORMATS.values()]
    return [check.name for check in LANDING_CHECKS] + [kind.landing_check for kind in formats if kind.landing_check] + [
        FRESHNESS]


def raw_check_keys(topic: TableSpec) -> list[AssetCheckKey]:
    """The checks a landing of `topic` evaluates on each hour it lands (freshness is `topic_health`'s)."""
    return [AssetCheckKey(raw_key(topic), check.name) for check in checks_of(topic)]


def raw_check_specs(topic: TableSpec) -> list[AssetCheckSpec]:
    """One partition per hour: a check's result belongs to the hour it judged."""
    with quiet_warnings(PreviewWarning, BetaWarning):
        return [AssetCheckSpec(check.name, asset=raw_key(topic), description=check.description(topic),
                               partitions_def=hourly_partitions(topic, open_hour=True)) for check in checks_of(topic)]


def hour_check_evaluations(landed: HourLanded, selected: set[str],
                           target: AssetCheckEvaluationTargetMaterializationData | None) -> list[AssetCheckEvaluation]:
    """The selected landing checks of one landed hour, recorded on its partition against its materialization."""
    evaluations = []
    for check in checks_of(landed.topic):
        if check.name not in selected:
            continue
        outcome = check.rule(landed)
        evaluations.append(AssetCheckEvaluation(
            asset_key=raw_key(landed.topic), check_name=check.name, passed=outcome.passed, severity=check.severity,
            description=outcome.description, metadata=outcome.metadata, partition=landed.manifest.hour,
            target_materialization_data=target,
        ))
    return evaluations


def not_landed_evaluations(topic: TableSpec, hours: list[str], selected: set[str], why: str) -> list[AssetCheckEvaluation]:
    """A result for each selected landing check of each hour a run planned and did not land (an hour not closed, offsets
    lost), none landed before. Nothing of the hour landed, so nothing was judged: the result does not pass, and is a
    warning, not an error, since no invariant of a landing is broken. Without one, the hour's planned check reads
    "execution failed" and the check reads red; a passing one read as passed (green) for an hour never judged. It is
    replaced once the hour lands. The hour itself shows as failed in the asset's partitions, and the run's alert names
    it."""
    return [AssetCheckEvaluation(
        asset_key=raw_key(topic), check_name=check.name, passed=False, severity=AssetCheckSeverity.WARN, partition=hour,
        description=f"not evaluated: hour {hour} did not land, nothing of it to judge until it does ({why})",
    ) for hour in hours for check in checks_of(topic) if check.name in selected]


RESTATED = "the standing landing's result, restated: "


def standing_evaluations(instance, run_id: str, topic: TableSpec, hour: str, selected: set[str],
                         target: AssetCheckEvaluationTargetMaterializationData | None) -> list[AssetCheckEvaluation]:
    """The results the selected landing checks had for an hour whose earlier landing stands, restated against its
    materialization restated by a run that did not land it again (a refused re-landing): the hour is what it was, and
    so are its checks. A check the standing landing has no result of says so, as a warning."""
    evaluations = []
    for check in checks_of(topic):
        if check.name not in selected:
            continue
        history = instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(raw_key(topic), check.name), limit=5, partition_filter=PartitionKeyFilter(key=hour))
        standing = next((record.evaluation for record in history if record.run_id != run_id
                         and record.status in COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES), None)
        if standing is None:
            evaluations.append(AssetCheckEvaluation(
                asset_key=raw_key(topic), check_name=check.name, passed=False, severity=AssetCheckSeverity.WARN,
                partition=hour, target_materialization_data=target,
                description=f"not evaluated: the earlier landing of hour {hour} stands with no result of this check"))
            continue
        evaluations.append(AssetCheckEvaluation(
            asset_key=raw_key(topic), check_name=check.name, passed=standing.passed, severity=standing.severity,
            partition=hour, metadata=standing.metadata, target_materialization_data=target,
            description=standing.description if (standing.description or "").startswith(RESTATED)
            else f"{RESTATED}{standing.description or '(no description)'}"))
    return evaluations


def check_outputs(context) -> Iterator[Output]:
    """The output of each selected check of the op, yielded once its results (one per hour) are recorded. A result of a
    partition is an `AssetCheckEvaluation`, which Dagster does not count as the check's output (an `AssetCheckResult`
    cannot name a partition in a run of several): without it, every run logs that it "did not yield or return expected
    outputs" for every check it evaluated."""
    for name, spec in context.assets_def.check_specs_by_output_name.items():
        if spec.key in context.selected_asset_check_keys:
            yield Output(None, output_name=name)


def evaluated_against(record) -> AssetCheckEvaluationTargetMaterializationData | None:
    """What a check result points at: the materialization it judged (the UI shows a result as current
    only while no newer materialization exists)."""
    if record is None:
        return None
    return AssetCheckEvaluationTargetMaterializationData(storage_id=record.storage_id, run_id=record.run_id,
                                                         timestamp=record.timestamp)


def freshness_check(topic: TableSpec):
    """The freshness SLA; `topic_health` evaluates it every few minutes and alerts. *Execute* in the UI
    evaluates it on demand. The platform's landing runs leave it out."""

    @asset_check(asset=raw_key(topic), name=FRESHNESS,
                 description=f"The latest hour past its deadline ({topic.freshness_minutes} min after its end) is "
                 "landed, and when it landed (evaluated by the sensor topic_health).")
    def fresh(context: AssetCheckExecutionContext) -> AssetCheckResult:
        result = evaluate_freshness(context.instance, topic, datetime.now(timezone.utc))
        return AssetCheckResult(passed=result.passed, severity=AssetCheckSeverity.ERROR, description=result.description,
                                metadata=freshness_metadata(topic, result))

    return fresh


def evaluate_freshness(instance, topic: TableSpec, now: datetime) -> automation.Freshness:
    landed, newest = landed_in_freshness_window(instance, topic, now)
    return automation.freshness(topic, lambda h: landed.get(h.partition_key), now, newest)


def landed_hours(instance, topic: TableSpec) -> tuple[set[str], KafkaHour | None]:
    """The raw hours Dagster has seen landed (partition keys), and the newest of them."""
    keys = instance.get_materialized_partitions(raw_key(topic))
    return keys, (KafkaHour.from_partition_key(max(keys)) if keys else None)


@dataclass(frozen=True)
class RecentLandings:
    """The partitions of raw assets materialized since `since`, each with when it was first materialized then."""

    since: datetime
    by_key: dict

    def of(self, topic: TableSpec, due: KafkaHour) -> tuple[dict[str, datetime], KafkaHour] | None:
        """The topic's landed hours from the due hour on and its newest landed hour, when these landings tell them: the
        due hour cannot land before it ends, so from `since` on every landing of it is here. None when they do not
        (the due hour missing, or older than `since`): the freshness rule then asks Dagster about the whole window."""
        landed = self.by_key.get(raw_key(topic), {})
        if due.end < self.since or due.partition_key not in landed:
            return None
        return ({hour: at for hour, at in landed.items() if hour >= due.partition_key},
                KafkaHour.from_partition_key(max(landed)))


# Summary records read a page at a time by `recent_landings`.
_PAGE = 10_000


def recent_landings(instance, keys: set, since: datetime) -> RecentLandings:
    """Every partition of `keys` materialized since `since`, in one pass over the event log's index of materializations
    (a few pages, whatever the number of topics): `topic_health` judges thousands of topics a tick with it, instead of a
    query a topic."""
    after = _storage_id_before(instance, since)
    by_key: dict = {}
    while True:
        page = instance.get_asset_event_summary_records(DagsterEventType.ASSET_MATERIALIZATION, after_storage_id=after,
                                                        limit=_PAGE, ascending=True)
        for record in page:
            if record.asset_key in keys and record.partition:
                # In storage order: the first seen of a partition is its first landing since `since`.
                by_key.setdefault(record.asset_key, {}).setdefault(
                    record.partition, datetime.fromtimestamp(record.timestamp, timezone.utc))
        if len(page) < _PAGE:
            return RecentLandings(since, by_key)
        after = page[-1].storage_id


def _storage_id_before(instance, moment: datetime) -> int:
    """A storage id after which every materialization is stamped at or after `moment` (less a margin for processes
    whose events interleave), found by bisecting the event log's ids with one-row reads."""
    target = (moment - timedelta(minutes=10)).timestamp()
    [latest] = instance.get_asset_event_summary_records(DagsterEventType.ASSET_MATERIALIZATION, limit=1,
                                                        ascending=False) or [None]
    low, high = 0, latest.storage_id if latest else 0
    while low < high:
        middle = (low + high) // 2
        [first] = instance.get_asset_event_summary_records(DagsterEventType.ASSET_MATERIALIZATION,
                                                           after_storage_id=middle, limit=1, ascending=True)
        if first.timestamp < target:
            low = first.storage_id
        else:
            high = middle
    return low


@dataclass(frozen=True)
class LatestLanding:
    """A raw asset's latest materialization: when it was stored and the hour it landed."""

    at: datetime
    partition: str | None


def latest_landings(instance, keys: list) -> dict:
    """Each raw asset's latest materialization (absent: never materialized), read for all of them in a few queries:
    a topic that landed nothing since its freshness window began is judged by it alone."""
    latest = {}
    for start in range(0, len(keys), 500):
        for record in instance.get_asset_records(keys[start:start + 500]):
            event = record.asset_entry.last_materialization_record
            if event is not None:
                latest[record.asset_entry.asset_key] = LatestLanding(
                    datetime.fromtimestamp(event.timestamp, timezone.utc), event.partition_key)
    return latest


def landed_in_freshness_window(instance, topic: TableSpec, now: datetime, recent: RecentLandings | None = None,
                               latest: dict | None = None) -> tuple[dict[str, datetime], KafkaHour | None]:
    """The hours of the freshness window (`automation.freshness_window`) and after it Dagster has seen landed, each with
    when it first landed, and the newest landed hour: the newest of those, else (nothing landed for the whole window)
    the hour of the asset's latest materialization. Asks about the due hour and the few after it first, and about the
    rest of the window only when the due hour is missing, so a check reads a few events on a topic landed for years;
    where `recent` landings tell the due hour landed, asks nothing.
    The latest materialization is not the newest hour once an older hour is landed again."""
    if recent is not None and topic.freshness_minutes is None:
        landed = recent.by_key.get(raw_key(topic))
        if landed:
            return {}, KafkaHour.from_partition_key(max(landed))
    elif recent is not None:
        known = recent.of(topic, automation.due_hour(topic, now))
        if known is not None:
            return known
    window_hours = automation.freshness_window(topic, now)
    if latest is not None:
        last = latest.get(raw_key(topic))
        latest_hour = KafkaHour.from_partition_key(last.partition) if last is not None and last.partition else None
        if topic.freshness_minutes is None:
            return {}, latest_hour  # no window to judge: its newest landing, not in the recent ones, is its latest
        # No hour lands before it begins: nothing materialized since the window's first hour began, none of it landed.
        if last is None or (window_hours and last.at < window_hours[0].start):
            return {}, latest_hour
    window = [hour.partition_key for hour in window_hours]
    landed = _materialized(instance, topic, [hour.partition_key for hour in automation.hours_after_due(topic, now)]
                           + window[:1])
    if window and window[0] not in landed:
        landed |= _materialized(instance, topic, window[1:])
    newest = max(landed, default=None)
    if newest is None:
        latest = instance.get_latest_materialization_event(raw_key(topic))
        newest = latest.dagster_event.partition if latest is not None and latest.dagster_event is not None else None
    return landed, KafkaHour.from_partition_key(newest) if newest else None


def _materialized(instance, topic: TableSpec, partitions: list[str]) -> dict[str, datetime]:
    """Which of `partitions` of the topic's raw asset Dagster has seen materialized, each with its first
    materialization's time (a re-landing later does not make the hour late)."""
    found: dict[str, datetime] = {}
    cursor = None
    while partitions:
        page = instance.fetch_materializations(AssetRecordsFilter(asset_key=raw_key(topic), asset_partitions=partitions),
                                               limit=1000, cursor=cursor)
        for record in page.records:
            if record.partition_key:
                at = datetime.fromtimestamp(record.timestamp, timezone.utc)
                found[record.partition_key] = min(at, found.get(record.partition_key, at))
        if not page.has_more or page.cursor == cursor:
            break
        cursor = page.cursor
    return found


def freshness_evaluation(topic: TableSpec, result: automation.Freshness, target=None) -> AssetCheckEvaluation:
    return AssetCheckEvaluation(
        asset_key=raw_key(topic),
        check_name=FRESHNESS,
        passed=result.passed,
        severity=AssetCheckSeverity.ERROR,
        description=result.description,
        metadata=freshness_metadata(topic, result),
        target_materialization_data=target,
    )


def record_freshness(instance, topic: TableSpec, now: datetime) -> automation.Freshness | None:
    """Records the freshness as it stands, against the newest landing, at the end of a landing: the UI shows an
    earlier result as not current once the asset has landed again, and a landing launched from the UI plans the
    check in a step that never runs (the landing yields its hours as events, not the output the check waits for)."""
    if topic.freshness_minutes is None:
        return None
    result = evaluate_freshness(instance, topic, now)
    [record] = instance.get_asset_records([raw_key(topic)]) or [None]
    newest = record.asset_entry.last_materialization_record if record else None
    instance.report_runless_asset_event(freshness_evaluation(topic, result, evaluated_against(newest)))
    return result


def freshness_metadata(topic: TableSpec, result: automation.Freshness) -> dict:
    return {
        "minutes_late": round(result.minutes_late, 1),
        "missing_hours": result.missing_hours,
        "due_hour": str(result.due_hour),
        "freshness_minutes": topic.freshness_minutes,
    }
