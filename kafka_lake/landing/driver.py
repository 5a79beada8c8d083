"""Landing a Kafka hour: plan the slices, run them, commit the manifest, then the table format's commit and clean-up.
The driver's half of raw landing: the manifest write is the commit of the hour's boundaries and files.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.log import BOUNDARY_WINDOW, KafkaLog
from kafka_lake.lake.audit import AuditEntry, write_audit
from kafka_lake.lake.landing_checks import BoundaryRecords, CheckOutcome, boundaries_confirmed, held_past
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.leases import HourHeld, HourLease
from kafka_lake.lake.manifests import (
    BoundaryOrigin,
    HourManifest,
    Increment,
    ManifestStore,
    PartitionLanding,
    PlacementIndex,
    merged_decoding_paths,
)
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.landing_settings import LandingSettings
from kafka_lake.landing.slice_task import SliceReport, SliceTask
from kafka_lake.landing.slices import (
    OffsetSlice,
    OffsetsLost,
    PartitionBounds,
    fixed_by_neighbours,
    plan_hour,
    split_slices,
)
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.formats import table_format
from kafka_lake.tables.table_format import TableAccess, TableFormat
from kafka_lake.upkeep.subjects import ErasedSubjects, accepted_erasures

log = logging.getLogger(__name__)

# How the driver starts an hour's slices: on Spark in production, in a plain loop in unit tests.
StartSlices = Callable[[list[SliceTask]], "Future[list[SliceReport]]"]  # starts them; the future has their reports


@dataclass(frozen=True)
class LandingResult:
    manifest: HourManifest
    manifest_path: str
    replaced_files: tuple[str, ...]  # files of the previous landing of this hour, now removed
    orphans_removed: tuple[str, ...]  # files of crashed attempts that no manifest owned
    slices: int
    audit_path: str | None = None  # the audit entry of an accepted loss of expired offsets
    table_commit: dict = field(default_factory=dict)  # what the table format's commit did, for the UI
    # An increment of the open hour that found nothing beyond the increments before it: nothing was written.
    unchanged: bool = False


def land_hours(
    topic: TableSpec,
    hours: Sequence[KafkaHour],
    settings: LandingSettings,
    start_slices: StartSlices,
    now: datetime | None = None,
    run_id: str = "",
    accept_lost_offsets: bool = False,
    together: Sequence[TableSpec] = (),
    table_formats: Callable[[TableSpec], TableFormat] | None = None,
    holder_alive: Callable[[str], bool] | None = None,
) -> Iterator[LandingResult]:
    """Lands every record of `topic` whose offsets belong to each of `hours`, in order, replacing any earlier
    landing of it, and yields each hour's result once it is committed. `table_formats`: each table's table format
    (default: as the table says, with the settings' Iceberg catalog).

    `together`: other tables of the same Kafka topic landing the same hours. Where an hour's offsets are the same
    for all of them (their landed neighbours agree, as they do when the tables always land together), the topic is
    read once for all: each slice's batches are decoded for every table. Each table commits its own manifest; the
    hour's results come in the order of the tables.

    Offsets of an hour that expired from the log before they were landed fail the run, unless
    `accept_lost_offsets`: then the rest lands, and the loss is written to the manifest and audited.

    The next hour is planned, and its slices started, while the one before it still runs: the cluster's
    slots that the tail of an hour's tasks leaves idle take the next hour's tasks, and its planning no
    longer waits for them. The next hour's plan starts where the running hour's plan ends, as it would
    from that hour's manifest; commits stay in order. When an hour fails, the hour started after it is
    cancelled and not committed; when an hour cannot be planned (still open), the hour before it commits.

    A topic landed in increments holds each hour it lands (`lake.leases`); `holder_alive` tells whether the run holding
    one is still running, so a killed run's hour is taken over at once.
    """
    tables = (topic, *together)
    if any(table.topic != topic.topic for table in tables):
        raise ValueError(f"tables landed together must land one Kafka topic: {', '.join(t.name for t in tables)}")
    now = now or datetime.now(timezone.utc)
    formats = {table.name: (table_formats or _table_format(settings))(table) for table in tables}
    for table in tables:
        formats[table.name].prepare(table)
    running: deque[tuple[list[_PlannedHour], Future]] = deque()
    previous: list[_PlannedHour] | None = None
    leases: dict[tuple[str, KafkaHour], HourLease] = {}

    def hold(table: TableSpec, hour: KafkaHour) -> None:
        """A topic landed in increments holds each hour while landing it (`lake.leases`)."""
        if table.open_hour_minutes is not None:
            lease = HourLease(LakeStorage(settings.lake_root), table.database, table.table, hour)
            lease.acquire(run_id, alive=holder_alive)
            leases[table.name, hour] = lease

    def commit_oldest() -> list[LandingResult]:
        planned, started = running[0]
        reports = [report for task_report in started.result() for report in (task_report, *task_report.shared)]
        results = [_commit(plan.topic, plan, [r for r in reports if r.table == plan.topic.name], settings, run_id,
                           formats[plan.topic.name])
                   for plan in planned]
        running.popleft()
        for plan in planned:
            if (lease := leases.pop((plan.topic.name, plan.hour), None)) is not None:
                lease.release()
        return results

    try:
        for hour in hours:
            try:
                for table in tables:
                    hold(table, hour)
                planned = [_plan(table, hour, settings, now, accept_lost_offsets, formats[table.name].file_attempt(),
                                 previous[index].as_manifest() if previous is not None and previous[index].hour.next() == hour
                                 else None)
                           for index, table in enumerate(tables)]
            except Exception:
                while running:  # the hours started before an hour that cannot be planned (still open) land
                    yield from commit_oldest()
                raise
            tasks = _tasks(planned, settings)
            running.append((planned, start_slices(tasks) if tasks else _done([])))
            previous = planned
            while len(running) > 1:
                yield from commit_oldest()
        while running:
            yield from commit_oldest()
    finally:
        for _, started in running:
            started.cancel()
            wait([started])
        for lease in leases.values():
            lease.release()


def _table_format(settings: LandingSettings) -> Callable[[TableSpec], TableFormat]:
    access = TableAccess(LakeStorage(settings.lake_root), settings.iceberg_catalog)
    return lambda table: table_format(table, access)


@dataclass(frozen=True)
class _PlannedHour:
    topic: TableSpec
    hour: KafkaHour
    bounds: list[PartitionBounds]
    slices: list[OffsetSlice]
    started: float  # time.monotonic() when planning began
    attempt: str  # in the data files' names, when the table format wants files of each landing's own
    erased: ErasedSubjects = ErasedSubjects()  # of the erasure requests accepted when it was planned: left out
    landed_so_far: HourManifest | None = None  # the open hour's increments committed before this landing
    read_at: str = ""  # when the log's ends were read (an increment's, for its record)
    cuts: dict[int, set[int]] = field(default_factory=dict)  # where slices start besides the hour's start

    @property
    def final(self) -> bool:
        """Whether this landing closes the hour: no partition is still open."""
        return not any(bound.still_open for bound in self.bounds)

    @property
    def in_increments(self) -> bool:
        """An increment of the open hour, or the landing that closes an hour landed in increments."""
        return not self.final or self.landed_so_far is not None

    def as_manifest(self) -> HourManifest:
        """What this hour's manifest will say of its boundaries, before it lands."""
        return build_manifest(self.topic, self.hour, self.bounds, [], "", 0.0, check_reports=False)


def _plan(topic: TableSpec, hour: KafkaHour, settings: LandingSettings, now: datetime, accept_lost_offsets: bool,
          attempt: str, landing_before: HourManifest | None = None) -> _PlannedHour:
    """The hour's boundaries and slices. `landing_before`: the hour before, planned and still landing.

    A topic whose open hour lands in increments (`open_hour`) may land an hour not closed yet: each partition still
    open up to its log's end as read. Such an hour, and one landed in increments before, is landed past what its
    increments committed (`landed_so_far`), and a landing again of an hour landed in increments slices it where its
    increments did, so its files are theirs, rewritten in place (`split_slices`)."""
    started = time.monotonic()
    storage = LakeStorage(settings.lake_root)
    manifests = ManifestStore(storage, topic.database, topic.table)
    before, after = manifests.neighbours(hour)
    before = landing_before or before
    increments = topic.open_hour_minutes is not None
    current = manifests.read(hour) if increments else None
    read_at = datetime.now(timezone.utc)
    with KafkaLog(settings.kafka_config, topic.topic) as kafka_log:
        logs = kafka_log.describe_hour(hour, kafka_log.partitions(), *fixed_by_neighbours(hour, before, after))
    bounds = plan_hour(topic.topic, hour, logs, before, after, now, timedelta(minutes=topic.close_grace_minutes),
                       accept_lost_offsets, increment=increments)
    landed_so_far = current if current is not None and not current.final else None
    if landed_so_far is not None:
        bounds = _past_increments(topic, hour, bounds, landed_so_far)
    landed = {p.partition: p.end for p in landed_so_far.partitions} if landed_so_far is not None else None
    cuts = {int(p): set(offsets) for p, offsets in (current.cuts if current is not None else {}).items()}
    slices = split_slices(bounds, topic.max_rows_per_task, landed, cuts)
    log.info("%s hour %s: %d slice(s) over %d partition(s)", topic.name, hour, len(slices), len(bounds))
    erased = accepted_erasures(storage, topic, settings.pii_key)
    return _PlannedHour(topic, hour, bounds, slices, started, attempt, erased, landed_so_far,
                        read_at.isoformat(timespec="microseconds"), cuts)


def _past_increments(topic: TableSpec, hour: KafkaHour, bounds: list[PartitionBounds],
                     landed_so_far: HourManifest) -> list[PartitionBounds]:
    """The hour's bounds as its increments committed them: each partition starts where they started it (the boundary
    they committed is the hour's), and never ends before what they landed."""
    planned = []
    for bound in bounds:
        landed = landed_so_far.partition(bound.partition)
        if landed is None:
            planned.append(bound)
            continue
        if bound.end < landed.end:
            raise OffsetsLost(topic.topic, hour, {bound.partition: (bound.end, landed.end)},
                              "the log now ends before offsets the hour's increments landed (topic recreated?)")
        how = landed_so_far.boundaries.get(str(bound.partition), {})
        planned.append(replace(bound, start=landed.start, start_from=how.get("start_from", bound.start_from),
                               start_origin=BoundaryOrigin(how.get("start_origin", bound.start_origin.value))))
    return planned


def _tasks(planned: list[_PlannedHour], settings: LandingSettings) -> list[SliceTask]:
    """The hour's slice tasks: one read for all tables where their offsets agree, else a read per table."""
    first = planned[0]
    erasures = {plan.topic.name: plan.erased for plan in planned if plan.erased}
    offsets = [[(b.partition, b.start, b.end) for b in plan.bounds] for plan in planned]
    if all(o == offsets[0] for o in offsets) and all(plan.attempt == first.attempt for plan in planned):
        # The finest split any table asks for (its smallest max_rows_per_task): no task reads more than it allows.
        slices = max((plan.slices for plan in planned), key=len)
        return [SliceTask(first.topic, first.hour, piece, settings, first.attempt, tuple(p.topic for p in planned[1:]),
                          erasures) for piece in slices]
    log.info("%s hour %s: the tables' landed offsets differ, each reads the topic on its own", first.topic.topic,
             first.hour)
    return [SliceTask(plan.topic, plan.hour, piece, settings, plan.attempt, erasures=erasures)
            for plan in planned for piece in plan.slices]


def _commit(topic: TableSpec, planned: _PlannedHour, reports: list[SliceReport], settings: LandingSettings,
            run_id: str, tables: TableFormat) -> LandingResult:
    """Writes the hour's manifest (the commit), then the table format commits it and removes the files it replaced
    and those of crashed attempts."""
    storage = LakeStorage(settings.lake_root)
    manifests = ManifestStore(storage, topic.database, topic.table)
    so_far = planned.landed_so_far
    if so_far is not None and not planned.final and all(
            (landed := so_far.partition(b.partition)) is not None and landed.end == b.end for b in planned.bounds):
        return LandingResult(so_far, manifests.path(planned.hour), (), (), 0, unchanged=True)
    manifest = build_manifest(topic, planned.hour, planned.bounds, reports, run_id, time.monotonic() - planned.started,
                              landed_so_far=planned.landed_so_far, increment=planned.read_at if planned.in_increments
                              else None, cuts=planned.cuts)
    # Audited before the commit: no manifest ever carries an accepted loss without its audit entry.
    audit_path = _audit_accepted_losses(storage, topic, manifest) if manifest.accepted_losses else None
    previous = manifests.read(planned.hour)
    if planned.landed_so_far is not None and (
            previous is None or (previous.landed_at, previous.run_id) != (planned.landed_so_far.landed_at,
                                                                          planned.landed_so_far.run_id)):
        raise HourHeld(f"{topic.name} hour {planned.hour}: another landing of the hour committed while this one ran; "
                       f"this one is not committed, and the next lands what it holds beyond")
    PlacementIndex(storage, topic.database, topic.table).record(manifest)  # before the commit: never a file unindexed
    path = manifests.write(manifest)
    committed = tables.commit_hour(topic, manifest, previous, planned.attempt)
    return LandingResult(manifest, path, committed.replaced_files, committed.orphans_removed, len(planned.slices),
                         audit_path, committed.metadata)


def _done(reports: list[SliceReport]) -> Future:
    done: Future = Future()
    done.set_result(reports)
    return done


def _audit_accepted_losses(storage: LakeStorage, topic: TableSpec, manifest: HourManifest) -> str:
    losses = {int(p): tuple(r) for p, r in manifest.accepted_losses.items()}
    described = "; ".join(f"partition {p}: offsets [{a}, {b})" for p, (a, b) in sorted(losses.items()))
    log.warning("%s hour %s: accepting the loss of expired offsets: %s", topic.topic, manifest.hour, described)
    return write_audit(storage, topic, AuditEntry(
        action="accept_lost_offsets",
        topic=topic.topic,
        at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        rows=sum(b - a for a, b in losses.values()),
        partitions=(manifest.hour,),
        detail=f"expired from the log before hour {manifest.hour} was landed, accepted by run "
               f"{manifest.run_id or '(no run id)'}: {described}",
    ))


def build_manifest(
    topic: TableSpec, hour: KafkaHour, bounds: list[PartitionBounds], reports: list[SliceReport],
    run_id: str, duration_s: float, check_reports: bool = True, landed_so_far: HourManifest | None = None,
    increment: str | None = None, cuts: dict[int, set[int]] | None = None,
) -> HourManifest:
    """The hour's manifest from its bounds and slice reports. `landed_so_far`: the increments of the open hour committed
    before, whose offsets, counts and files the new manifest keeps and adds to; `increment`: when this landing read the
    log, for a landing in increments (recorded with its ends); `cuts`: where its slices started besides the hour's
    start, kept with those of its increments for a landing again."""
    by_partition: dict[int, list[SliceReport]] = {}
    for report in reports:
        by_partition.setdefault(report.slice.partition, []).append(report)
    partitions = []
    for bound in bounds:
        parts = by_partition.get(bound.partition, [])
        earlier = landed_so_far.partition(bound.partition) if landed_so_far is not None else None
        if check_reports:
            _check_reports_tile(topic, hour, bound, parts, earlier.end if earlier is not None else bound.start)
        counts = [r.counts for r in parts] + ([earlier.counts] if earlier is not None else [])
        partitions.append(PartitionLanding(bound.partition, bound.start, bound.end, LandingCounts.total(counts)))
    versions: Counter = Counter(landed_so_far.schema_versions if landed_so_far is not None else {})
    causes: Counter = Counter(landed_so_far.dead_letter_causes if landed_so_far is not None else {})
    unknown_ids: Counter = Counter(landed_so_far.unknown_schema_ids if landed_so_far is not None else {})
    for report in reports:
        versions.update({str(k): v for k, v in report.schema_versions.items()})
        causes.update(report.dead_letter_causes)
        unknown_ids.update({str(k): v for k, v in report.unknown_schema_ids.items()})
    files = sorted({f.path: f for f in (*(landed_so_far.files if landed_so_far is not None else ()),
                                        *(f for r in reports for f in r.files))}.values(), key=lambda f: f.path)
    landed_at = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    starts: dict[int, set[int]] = {p: set(offsets) for p, offsets in (cuts or {}).items()}
    for earlier in landed_so_far.partitions if landed_so_far is not None else ():
        starts.setdefault(earlier.partition, set()).add(earlier.end)
    start_of = {b.partition: b.start for b in bounds}
    starts = {p: {o for o in offsets if o > start_of[p]} for p, offsets in starts.items() if p in start_of}
    increments = (*(landed_so_far.increments if landed_so_far is not None else ()),
                  *((Increment({str(b.partition): b.end for b in bounds}, increment, landed_at),) if increment else ()))
    return HourManifest(
        database=topic.database,
        table=topic.table,
        topic=topic.topic,
        hour=hour.partition_key,
        partitions=tuple(partitions),
        files=tuple(files),
        # With the run id, a landing's identity (`current` and Iceberg commits tell landings apart by both): to the
        # microsecond, so two landings of an hour within one second are not taken for one.
        landed_at=landed_at,
        run_id=run_id,
        boundaries={str(b.partition): {"start_from": b.start_from, "end_from": b.end_from,
                                       "start_origin": b.start_origin.value, "end_origin": b.end_origin.value}
                    for b in bounds},
        schema_versions=dict(sorted(versions.items())),
        dead_letter_causes=dict(sorted(causes.items())),
        unknown_schema_ids=dict(sorted(unknown_ids.items())),
        decoding_paths={**(landed_so_far.decoding_paths if landed_so_far is not None else {}),
                        **merged_decoding_paths(report.decoding_paths for report in reports)},
        duration_s=round(duration_s, 3),
        accepted_losses={str(b.partition): list(b.accepted_loss) for b in bounds if b.accepted_loss},
        new_partitions=tuple(b.partition for b in bounds if b.new_partition),
        open_transactions={str(b.partition): list(b.open_transaction) for b in bounds if b.open_transaction},
        held_back={str(b.partition): list(b.held_back) for b in bounds if b.held_back},
        final=not any(b.still_open for b in bounds),
        increments=increments,
        cuts={str(p): sorted(offsets) for p, offsets in sorted(starts.items()) if offsets},
    )


def _check_reports_tile(topic: TableSpec, hour: KafkaHour, bound: PartitionBounds, reports: list[SliceReport],
                        start: int) -> None:
    covered = start
    for report in sorted(reports, key=lambda r: r.slice.start):
        if report.slice.start != covered:
            break
        covered = report.slice.end
    if covered != bound.end:
        raise RuntimeError(
            f"{topic.topic} hour {hour} partition {bound.partition}: the slice reports cover offsets up to "
            f"{covered}, not the planned [{start}, {bound.end}); the manifest was not written"
        )


def confirm_boundaries(topic: TableSpec, manifest: HourManifest, manifests: ManifestStore, kafka_config: dict) -> CheckOutcome:
    """`boundaries_confirmed` against the broker now: the records around each boundary no landed neighbour fixes.

    A start no landed hour before binds is where the landed offsets begin: a record before it stamped in the hour
    would be in no hour. An end no landed hour after binds is confirmed by the records before and at it. Records
    stamped before the hour's end past an end the committed log decided are read as the log is written now."""
    hour = manifest.kafka_hour
    before, _ = manifests.neighbours(hour)
    after = manifests.read(hour.next())
    around = []
    with KafkaLog(kafka_config, topic.topic) as kafka_log:
        for landed in manifest.partitions:
            number = landed.partition
            bounds = kafka_log.log_bounds(number)

            def window(boundary: int) -> tuple[tuple[int, int], ...]:
                end = min(boundary, bounds.end)
                return tuple(kafka_log.records_between(number, max(bounds.start, end - BOUNDARY_WINDOW), end))

            start_free = before is None or before.partition(number) is None
            end_free = after is None or after.partition(number) is None
            by_time = manifest.boundaries.get(str(number), {}).get("end_origin") == BoundaryOrigin.TIME_LOOKUP
            at_end = kafka_log.record_at_or_after(number, landed.end, bounds.end) if end_free and by_time else None
            # An open hour ends where its last increment read: what lies past it lands with the next one.
            past = held_past(manifest, number, manifests.read) if manifest.final else None
            held = kafka_log.stamped_before_end_past(number, hour, past.offset) if past is not None else None
            around.append(BoundaryRecords(number, window(landed.start) if start_free else None,
                                          window(landed.end) if end_free else None, at_end, by_time, held,
                                          past.hour if past is not None else ""))
    return boundaries_confirmed(manifest, around)
