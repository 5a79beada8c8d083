"""The rules the platform runs itself by: when a Kafka hour is closed, which placement hours a landing makes due for
compaction, how fresh a topic is and how far it lags: plain functions of what the broker, manifests and clock say.
"""


from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from kafka_lake.hours import ONE_HOUR, KafkaHour, floor_hour, to_millis
from kafka_lake.kafka.cluster import LogTail
from kafka_lake.lake.manifests import HourManifest
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import TopicCatalog, is_internal_topic, whole_catalog_topics
from kafka_lake.upkeep.compaction import missing_raw_hours, raw_hours_that_feed

# A sensor that was off for days catches up a day at a time: older hours are a backfill, a person's call.
MAX_HOURS_PER_TICK = 24
# How far back freshness looks for the first hour of a gap.
FRESHNESS_LOOKBACK = timedelta(days=7)


# --- When an hour is closed ------------------------------------------------------------------

def closed_by_clock_at(topic: TableSpec, hour: KafkaHour) -> datetime:
    """Quiet partitions close `hour` when the wall clock passes its end plus the idle timeout."""
    return hour.end + timedelta(minutes=topic.close_grace_minutes)


def closed_by_records_from(topic: TableSpec, hour: KafkaHour) -> datetime:
    """The "H+1 appears" rule: a partition closes `hour` once it holds a record stamped this late."""
    return hour.end + timedelta(minutes=topic.record_grace_minutes)


def needs_log_tails(topic: TableSpec, hour: KafkaHour, now: datetime) -> bool:
    """Only between those two moments does the answer depend on the broker: before, no record can
    prove the hour closed; after, the clock has closed it anyway."""
    return closed_by_records_from(topic, hour) <= now < closed_by_clock_at(topic, hour)


def is_closed(topic: TableSpec, hour: KafkaHour, now: datetime, tails: Iterable[LogTail] | None = None) -> bool:
    return why_open(topic, hour, now, tails) is None


def why_open(topic: TableSpec, hour: KafkaHour, now: datetime, tails: Iterable[LogTail] | None = None) -> str | None:
    """Why `hour` is not closed yet, in a sentence an operator can check against the broker; None once closed."""
    by_clock = closed_by_clock_at(topic, hour)
    if now >= by_clock:
        return None
    from_records = closed_by_records_from(topic, hour)
    clock = f"the clock closes it at {moment(by_clock, now)}"
    if now < from_records:
        return f"no record can close it before {moment(from_records, now)} (end + record_grace_minutes); {clock}"
    if tails is None:
        return f"the topic is not on the cluster; {clock}"
    tails = list(tails)
    threshold = to_millis(from_records)
    waiting = [t.partition for t in tails if t.last_timestamp_ms is None or t.last_timestamp_ms < threshold]
    if tails and not waiting:
        return None
    described = f"partition(s) {', '.join(map(str, waiting))} hold" if tails else "the topic has no partition, so it holds"
    return f"{described} no record stamped at or after {moment(from_records, now)} yet; {clock}"


def moment(at: datetime, now: datetime) -> str:
    """A time in a line read at `now`: `13:10Z` on the same (UTC) day, with its date on another (a day's idle timeout
    closes an hour tomorrow, not at a time of today that has passed). Rounded up to the minute: a moment within the minute
    of the tick is never shown as a minute that has begun before it."""
    if at.second or at.microsecond:
        at = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return f"{at:%H:%M}Z" if at.date() == now.date() else f"{at:%Y-%m-%d %H:%M}Z"


def increment_due(topic: TableSpec, hour: KafkaHour, now: datetime, last_requested: str | None) -> str | None:
    """Why the open hour's next increment is not due now (None: it is): the hour has not begun, or the last increment
    was asked for less than `open_hour_minutes` ago (`last_requested`, ISO time)."""
    if topic.open_hour_minutes is None:
        return "the topic lands its hours once closed (open_hour off)"
    if now < hour.start:
        return f"{hour} has not begun"
    if last_requested is None:
        return None
    next_at = datetime.fromisoformat(last_requested) + timedelta(minutes=topic.open_hour_minutes)
    if now >= next_at:
        return None
    return f"next increment of {hour} due at {moment(next_at, now)} (every {topic.open_hour_minutes} min)"


def hours_closed_by_clock(topic: TableSpec, first: KafkaHour, now: datetime) -> list[KafkaHour]:
    """`first` and the consecutive hours after it that the clock has closed, at most a day of them."""
    hours: list[KafkaHour] = []
    hour = first
    while len(hours) < MAX_HOURS_PER_TICK and is_closed(topic, hour, now):
        hours.append(hour)
        hour = hour.next()
    return hours


def first_hour_to_land(topic: TableSpec, newest_landed: KafkaHour | None, now: datetime) -> KafkaHour:
    """Where automation starts: after the newest landed hour, or, on a topic never landed, at its `start_hour` (which
    `add_topic` sets to the hour of the topic's earliest retained record): the retained history lands by itself, a
    day of hours a tick, however long ago the topic started. `now` plays no part."""
    if newest_landed is not None:
        return newest_landed.next()
    return KafkaHour(topic.start_hour)


# --- What a landing makes due downstream -----------------------------------------------------

def placement_hours(manifest: HourManifest) -> list[KafkaHour]:
    """The placement hours the landed hour wrote data into (late events reach older hours)."""
    return sorted({KafkaHour(f.placement_hour) for f in manifest.files if f.kind == "data"})


def due_for_compaction(
    topic: TableSpec, landed_hour: KafkaHour, touched: Iterable[KafkaHour], is_landed: Callable[[KafkaHour], bool],
) -> list[KafkaHour]:
    """Placement hours to compact after `landed_hour` landed: those it wrote into, and the hour its
    landing completes the allowed lateness of; each only once every raw hour that feeds it has landed."""
    completed = KafkaHour(landed_hour.start - topic.allowed_lateness_hours * ONE_HOUR)
    candidates = {h for h in (*touched, completed) if h.start >= topic.start_hour}
    return sorted(h for h in candidates if not missing_raw_hours(topic, h.start, _landed_among(topic, h, is_landed)))


def _landed_among(topic: TableSpec, hour: KafkaHour, is_landed: Callable[[KafkaHour], bool]) -> list[KafkaHour]:
    return [h for h in raw_hours_that_feed(topic, hour.start) if is_landed(h)]


# --- Freshness --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Freshness:
    passed: bool
    description: str
    due_hour: KafkaHour | None  # the latest hour whose deadline has passed
    minutes_late: float  # of the oldest hour still missing; 0 when passing
    missing_hours: int


def _due_and_floor(topic: TableSpec, freshness_minutes: int, now: datetime) -> tuple[KafkaHour, datetime]:
    """The latest closed hour whose deadline has passed, and the start of the oldest hour freshness looks back to."""
    due = KafkaHour.containing(now - timedelta(minutes=freshness_minutes)).previous()
    return due, max(topic.start_hour, floor_hour(now - FRESHNESS_LOOKBACK))


def due_hour(topic: TableSpec, now: datetime) -> KafkaHour:
    """The latest closed hour past its deadline (its end + `freshness_minutes`): the one freshness asks about first."""
    return _due_and_floor(topic, topic.freshness_minutes or 0, now)[0]


def freshness_window(topic: TableSpec, now: datetime) -> list[KafkaHour]:
    """The hours `freshness` may ask about: the latest closed hour due and those before it, within
    `FRESHNESS_LOOKBACK`; none without an SLA. What the check reads does not grow with the table's history."""
    if topic.freshness_minutes is None:
        return []
    due, floor = _due_and_floor(topic, topic.freshness_minutes, now)
    hours = []
    while due.start >= floor:
        hours.append(due)
        due = due.previous()
    return hours


def hours_after_due(topic: TableSpec, now: datetime) -> list[KafkaHour]:
    """The closed hours after the latest one due: not due yet, but landed as soon as they closed, so the newest landed
    hour is among them or in the freshness window."""
    if topic.freshness_minutes is None:
        return []
    due, _ = _due_and_floor(topic, topic.freshness_minutes, now)
    hours = []
    while (due := due.next()).end <= now:
        hours.append(due)
    return hours


def freshness(topic: TableSpec, landed_at: Callable[[KafkaHour], datetime | None], now: datetime,
              newest_landed: KafkaHour | None) -> Freshness | None:
    """The latest hour past its deadline (its end + `freshness_minutes`) must be landed by now; `landed_at` says when
    an hour landed (None: not landed). None when the topic declares no SLA."""
    if topic.freshness_minutes is None:
        return None
    allowed = timedelta(minutes=topic.freshness_minutes)
    due, floor = _due_and_floor(topic, topic.freshness_minutes, now)
    newest = f"newest landed hour {newest_landed}" if newest_landed else "no hour landed yet"
    if due.start < topic.start_hour:
        return Freshness(True, f"no hour is due yet (the topic starts at {KafkaHour(topic.start_hour)})", None, 0.0, 0)
    landed = landed_at(due)
    if landed is not None:
        return Freshness(True, f"hour {due} is landed: {_when_landed(landed, due.end + allowed)}; {newest}", due, 0.0, 0)
    oldest, missing = due, 1
    while oldest.start - ONE_HOUR >= floor and landed_at(oldest.previous()) is None:
        oldest, missing = oldest.previous(), missing + 1
    late = (now - (oldest.end + allowed)).total_seconds() / 60
    gap = f"{missing} hours missing since {oldest}" if missing > 1 else f"hour {due} missing"
    return Freshness(
        False,
        f"{topic.topic} is {late:.0f} min late: {gap}, each due {topic.freshness_minutes} min after its end; {newest}",
        due, late, missing,
    )


def _when_landed(landed: datetime, deadline: datetime) -> str:
    """When an hour landed, against its deadline: a recovery says how late the hour was, not that it was in time."""
    minutes = abs(landed - deadline).total_seconds() / 60
    side = "after" if landed > deadline else "before"
    return f"landed at {landed:%Y-%m-%d %H:%M}Z, {minutes:.0f} min {side} its deadline {deadline:%Y-%m-%d %H:%M}Z"


def freshness_alert(topic: TableSpec, before: bool | None, now: Freshness) -> str | None:
    """The alert a freshness evaluation calls for, given whether the one before passed (None: no evaluation before):
    a failure when it starts failing (also the first time), a recovery when it passes again, else nothing."""
    if (before is None and now.passed) or before == now.passed:
        return None
    return f"[{'RECOVERED' if now.passed else 'FAILED'}] freshness of {topic.topic}: {now.description}"


# --- Lag --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionLag:
    partition: int
    landed_end: int  # the first offset not landed yet
    log_end: int
    records: int  # offsets between the landed end and the log end
    seconds: float  # from the end of the newest landed hour to the newest record, when records wait


def landing_lag(newest: HourManifest | None, tails: Iterable[LogTail]) -> list[PartitionLag]:
    """How far landing is behind each partition's log end, in records and in time."""
    landed_through_ms = to_millis(newest.landed_through) if newest else None
    lags = []
    for tail in sorted(tails, key=lambda t: t.partition):
        landed = newest.partition(tail.partition) if newest else None
        landed_end = landed.end if landed else 0
        records = max(0, tail.log_end - landed_end)
        seconds = 0.0
        if records and tail.last_timestamp_ms is not None:
            since = landed_through_ms if landed_through_ms is not None else tail.last_timestamp_ms
            seconds = max(0.0, (tail.last_timestamp_ms - since) / 1000)
        lags.append(PartitionLag(tail.partition, landed_end, tail.log_end, records, seconds))
    return lags


# --- Topics the catalog does not know ---------------------------------------------------------

def topics_missing_from_catalog(cluster_topics: Iterable[str], catalog: TopicCatalog) -> list[str]:
    """Topics on the cluster that no table of the whole catalog lands (`catalog` may be a slice of it) and the archive
    rule does not take (it archives them by itself); Kafka's and tools' internal topics aside, and those of rejected
    entries: they are in the catalog, broken, and reported as such."""
    landed = whole_catalog_topics(catalog) | {entry.topic for entry in catalog.broken if entry.topic}
    archive = catalog.archive
    return sorted(t for t in cluster_topics
                  if t not in landed and not is_internal_topic(t) and not (archive is not None and archive.matches(t)))
