"""The invariants of a landed hour, evaluated from manifests: each returns a `CheckOutcome`.

Asset checks in the Dagster layer and the tests call these; they can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kafka_lake.hours import KafkaHour
from kafka_lake.lake.manifests import BoundaryOrigin, HourManifest

# How many landed hours after an hour `held_past` follows, each empty at its end, before it judges no further.
HELD_WALK_HOURS = 48


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict = field(default_factory=dict)
    severity: str = "error"  # of a failure: "error", or "warn" where failing says only that nothing could be judged


def slices_contiguous(manifest: HourManifest, previous: HourManifest | None, following: HourManifest | None) -> CheckOutcome:
    """Each partition's slice starts where the previous hour's ended and ends where the next one's starts.

    Two differences are reported but pass: a gap that a run accepted as lost (expired offsets, recorded
    in the later hour's manifest and audited) and a partition added since the previous hour.
    """
    problems, accepted, added, still_open = [], [], [], []
    for neighbour, mine, theirs, label in (
        (previous, "start", "end", "previous"),
        (following, "end", "start", "next"),
    ):
        if neighbour is None:
            continue
        later = manifest if label == "previous" else neighbour
        for landed in manifest.partitions:
            other = neighbour.partition(landed.partition)
            if other is None:
                if label == "previous" and landed.partition in manifest.new_partitions:
                    added.append(f"partition {landed.partition} (new since {neighbour.hour}, from offset {landed.start})")
                else:
                    problems.append(f"partition {landed.partition} is missing from the {label} hour {neighbour.hour}")
                continue
            gap = (other.end, landed.start) if label == "previous" else (landed.end, other.start)
            if gap[0] == gap[1]:
                continue
            if later.accepted_loss(landed.partition) == gap:
                accepted.append(f"partition {landed.partition}: offsets [{gap[0]}, {gap[1]}) accepted as lost in {later.hour}")
            elif gap[0] < gap[1] and not (neighbour.final if label == "previous" else manifest.final):
                # The earlier hour is open, landed in increments so far: the offsets between land when it closes.
                still_open.append(f"partition {landed.partition}: offsets [{gap[0]}, {gap[1]}) land when hour "
                                  f"{(neighbour if label == 'previous' else manifest).hour} closes")
            else:
                problems.append(
                    f"partition {landed.partition}: {mine} {getattr(landed, mine)} ≠ {label} hour "
                    f"{neighbour.hour}'s {theirs} {getattr(other, theirs)}"
                )
    checked = [n.hour for n in (previous, following) if n is not None]
    metadata = {"neighbours": ", ".join(checked) or "none"}
    if accepted:
        metadata["accepted_losses"] = "; ".join(accepted)
    if added:
        metadata["new_partitions"] = "; ".join(added)
    if problems:
        return CheckOutcome(False, "; ".join(problems), metadata)
    described = f"tiles with {', '.join(checked)}" if checked else "no landed neighbour hour to compare with"
    if accepted:
        described += f"; ACCEPTED LOSS (audited): {'; '.join(accepted)}"
    if added:
        described += f"; new partitions: {'; '.join(added)}"
    if still_open:
        described += f"; an hour still open: {'; '.join(still_open)}"
    return CheckOutcome(True, described, metadata)


def counts_balance(manifest: HourManifest) -> CheckOutcome:
    """rows + dead letters + tombstones (+ routed away, unrouted, erased) = records read, and no more records than
    offsets, per partition."""
    problems, gaps = [], 0
    for landed in manifest.partitions:
        counts = landed.counts
        if counts.accounted != counts.records:
            routed = (f" + {counts.routed_away} routed away + {counts.unrouted} unrouted"
                      if counts.routed_away or counts.unrouted else "")
            erased = f" + {counts.erased} erased" if counts.erased else ""
            problems.append(
                f"partition {landed.partition} [{landed.start}, {landed.end}): {counts.rows} rows + "
                f"{counts.dead_letters} dead letters + {counts.tombstones} tombstones{routed}{erased} ≠ "
                f"{counts.records} records read"
            )
        if counts.records > landed.offsets:
            problems.append(f"partition {landed.partition}: {counts.records} records read from {landed.offsets} offsets")
        gaps += landed.offsets - counts.records
    counts = manifest.counts
    metadata = {"offsets": manifest.offsets, "records": counts.records, "rows": counts.rows,
                "dead_letters": counts.dead_letters, "tombstones": counts.tombstones}
    if counts.routed_away or counts.unrouted:  # a routed table of a shared topic
        metadata.update(routed_away=counts.routed_away, unrouted=counts.unrouted)
    if counts.erased:
        metadata["erased"] = counts.erased
    metadata["offset_gaps"] = gaps  # transaction markers or compacted-away offsets, not records
    if problems:
        return CheckOutcome(False, "; ".join(problems), metadata)
    routed = " + routed away + unrouted" if counts.routed_away or counts.unrouted else ""
    erased = " + erased" if counts.erased else ""
    return CheckOutcome(True, f"{counts.records} records = rows + dead letters + tombstones{routed}{erased}", metadata)


def dead_letter_rate(manifest: HourManifest, threshold: float) -> CheckOutcome:
    counts = manifest.counts
    read = counts.records - counts.tombstones - counts.routed_away - counts.unrouted  # the records the table took
    rate = counts.dead_letters / read if read else 0.0
    metadata = {"dead_letters": counts.dead_letters, "rate": round(rate, 6), "threshold": threshold}
    causes = ", ".join(f"{cause}: {count}" for cause, count in manifest.dead_letter_causes.items())
    if rate > threshold:
        return CheckOutcome(False, f"dead-letter rate {rate:.2%} is above {threshold:.2%} ({causes})", metadata)
    return CheckOutcome(True, f"dead-letter rate {rate:.2%} (threshold {threshold:.2%})", metadata)


@dataclass(frozen=True)
class BoundaryRecords:
    """What the broker holds around one partition's landed range, read when the check runs: (offset, timestamp ms)
    of records. A boundary that a landed neighbour hour fixes is not read (None)."""

    partition: int
    before_start: tuple[tuple[int, int], ...] | None  # the window of records before the start
    before_end: tuple[tuple[int, int], ...] | None  # the window of records before the end
    at_end: tuple[int, int] | None = None  # the first record at or after the end, where the end was a time boundary
    end_by_time: bool = False  # the end was decided by record timestamps, not by the end of the log
    # [a, b) past `held_past`'s offset, as the log is written now: records stamped before the hour's end in no landed hour
    held: tuple[int, int] | None = None
    held_past_hour: str = ""  # the landed hour whose end, the committed end when it landed, they sit past


@dataclass(frozen=True)
class HeldPast:
    """Where records stamped before an hour's end would sit in no landed hour: past `offset`, the end of the hour and of
    the landed hours after it that are empty there, the last of which (`hour`) ended at the log's end."""

    offset: int
    hour: str


def held_past(manifest: HourManifest, partition: int,
              read: Callable[[KafkaHour], HourManifest | None]) -> HeldPast | None:
    """Past which offset of `partition` records stamped before `manifest`'s hour's end are in no landed hour, if any
    can be: the hour's end where it ended at the log's end (closed by the wall clock at the committed end) and no hour
    after it is landed; or, through the landed hours after it that are empty at that offset (an hour landed again
    after them ends where they start), the end of the last of them, where it ended at the log's end. None where one
    of them ended by time or landed records from that offset: past it, records stamped earlier are stragglers of the
    later hours' offsets, landed by them (or judged by their own check)."""
    current = manifest
    landed = current.partition(partition)
    if landed is None:
        return None
    offset = landed.end
    for _ in range(HELD_WALK_HOURS):
        origin = current.boundaries.get(str(partition), {}).get("end_origin")
        if origin == BoundaryOrigin.TIME_LOOKUP:
            return None
        following = read(current.kafka_hour.next())
        after = following.partition(partition) if following is not None else None
        if after is None:
            return HeldPast(offset, current.hour) if origin == BoundaryOrigin.LOG_END else None
        if following is None or after.start != offset or after.end != offset:
            return None  # a landing took records from here on (or a gap, which slices_contiguous names)
        current = following
    return None


def boundaries_confirmed(manifest: HourManifest, around: list[BoundaryRecords]) -> CheckOutcome:
    """Each boundary of the hour that no landed neighbour fixes is where Kafka's rule puts it, as the records at it
    show: no record before the start is stamped in the hour or later (it would belong to no landed hour), none before
    the end is stamped at or after the hour's end, and the record at a time boundary is stamped at or after it. And no
    record stamped before the hour's end sits past an end the committed log's end decided, in no landed hour (`held`,
    read now: it fails until a landing takes them, whatever the hour's manifest recorded when it landed)."""
    hour = manifest.kafka_hour
    problems, confirmed = [], []
    landed_since = []
    for records in around:
        landed = manifest.partition(records.partition)
        if landed is None:
            continue
        checked = []
        if records.held is not None:
            first, last = records.held
            where = ("where the committed log ended when it landed" if records.held_past_hour == manifest.hour else
                     f"where hour {records.held_past_hour} after it starts and ends too, at the committed end when it "
                     f"landed")
            problems.append(
                f"partition {records.partition}: the hour ends at {first}, {where}, but offsets [{first}, {last}) past it "
                f"hold records stamped before the hour's end that are in no landed hour (held back by a transaction "
                f"still open or a committed end that lags, or readable since): they land with the first hour landed "
                f"once readable"
            )
        elif str(records.partition) in manifest.held_back:
            first, last = manifest.held_back[str(records.partition)]
            landed_since.append(f"partition {records.partition}: offsets [{first}, {last}) held back when it landed "
                                f"have landed since")
        if records.before_start is not None:
            checked.append("start")
            stamped_in = [(offset, ts) for offset, ts in records.before_start if ts >= hour.start_ms]
            if stamped_in:
                problems.append(
                    f"partition {records.partition}: {len(stamped_in)} record(s) before the hour's start {landed.start} "
                    f"are stamped in the hour or later (first at offset {stamped_in[0][0]}) and belong to no landed hour"
                )
        if records.before_end is not None:
            checked.append("end")
            stamped_after = [(offset, ts) for offset, ts in records.before_end if ts >= hour.end_ms and offset >= landed.start]
            if stamped_after:
                problems.append(
                    f"partition {records.partition}: {len(stamped_after)} record(s) before the hour's end {landed.end} "
                    f"are stamped at or after the hour's end (first at offset {stamped_after[0][0]})"
                )
            if records.end_by_time and records.at_end is not None and records.at_end[1] < hour.end_ms:
                problems.append(
                    f"partition {records.partition}: the hour ends at offset {landed.end} by time, but the record at "
                    f"offset {records.at_end[0]} is stamped before the hour's end"
                )
        if checked:
            confirmed.append(f"{records.partition} ({' and '.join(checked)})")
    metadata: dict = {"partitions_read": len(confirmed)}
    held = {str(r.partition): list(r.held) for r in around if r.held is not None}
    if held:
        metadata["held_back"] = held
    if manifest.held_back:
        metadata["held_back_when_landed"] = dict(manifest.held_back)
    if problems:
        return CheckOutcome(False, "; ".join(problems), metadata)
    since = f"; {'; '.join(landed_since)}" if landed_since else ""
    if not manifest.final:
        since += (f"; the hour is open: landed in {len(manifest.increments)} increment(s) so far, each end where the "
                  f"log ended when it read")
    if not confirmed:
        return CheckOutcome(True, f"every boundary is fixed by a landed neighbour hour{since}", metadata)
    return CheckOutcome(True, f"the records at the boundaries confirm them: partition(s) {', '.join(confirmed)}{since}",
                        metadata)
