"""Slice planning: which offsets of each Kafka partition belong to a Kafka hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.log import PartitionLog
from kafka_lake.lake.manifests import BoundaryOrigin, HourManifest


@dataclass(frozen=True)
class PartitionBounds:
    partition: int
    start: int
    end: int
    start_from: str  # where the start came from, in words for the manifest and the UI
    end_from: str
    start_origin: BoundaryOrigin
    end_origin: BoundaryOrigin
    # Offsets [a, b) before `start` that expired from the log unlanded, where the run accepted the loss.
    accepted_loss: tuple[int, int] | None = None
    new_partition: bool = False  # absent from the landed hour before: landed from its first record
    # Where the hour ends at the last stable offset: the offsets past it that a transaction still open holds.
    # Committed later, they land in the hour after (whose offsets they are), placed by their own time.
    open_transaction: tuple[int, int] | None = None
    # Of those, the offsets holding records stamped before the hour's end: the hour is incomplete by them, and its
    # checks fail naming them; they land with the first hour landed once they are readable.
    held_back: tuple[int, int] | None = None
    # The hour is still open on this partition (no record at or after its end, the clock short of closing it): an
    # increment lands it up to the log's end as read, and a later landing lands the rest.
    still_open: bool = False


@dataclass(frozen=True)
class OffsetSlice:
    """A contiguous offset range [start, end) of one partition: the work of one Spark task."""

    partition: int
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


class HourNotClosed(RuntimeError):
    """The hour can still receive records; landing it now would land it partially."""

    def __init__(self, topic: str, hour: KafkaHour, open_partitions: list[int], closes_at: datetime):
        self.open_partitions = open_partitions
        self.closes_at = closes_at
        super().__init__(
            f"{topic} hour {hour} is not closed: partition(s) {', '.join(map(str, open_partitions))} "
            f"have no record at or after {hour.end:%Y-%m-%d %H:%M}Z yet. It can land once they do, and at the latest "
            f"from {closes_at:%Y-%m-%d %H:%M}Z, when the wall clock closes it (end of hour + close_grace_minutes). "
            "Nothing of this hour was landed."
        )


class OffsetsLost(RuntimeError):
    """Offsets the hour must read are gone from the log (retention, or the topic was recreated)."""

    def __init__(self, topic: str, hour: KafkaHour, losses: dict[int, tuple[int, int]], reason: str):
        self.losses = losses
        described = "; ".join(f"partition {p}: offsets [{a}, {b})" for p, (a, b) in sorted(losses.items()))
        super().__init__(f"{topic} hour {hour}: {reason}: {described}. Nothing of this hour was landed.")


def plan_hour(
    topic: str,
    hour: KafkaHour,
    logs: list[PartitionLog],
    before: HourManifest | None,
    after: HourManifest | None,
    now: datetime,
    grace: timedelta,
    accept_lost_offsets: bool = False,
    increment: bool = False,
) -> list[PartitionBounds]:
    """The offset range of every partition for `hour`, bound by the nearest landed hours around it.

    Boundaries committed by landed neighbours win over the broker's answers, so consecutive hours tile every
    partition's offsets with no gap and no overlap, in any landing order.

    Offsets that expired before they were landed raise `OffsetsLost`, unless `accept_lost_offsets`:
    then the partition starts at its log start and its bounds carry the loss, for the manifest.

    An hour not closed raises `HourNotClosed`, unless `increment` (a topic whose open hour lands in increments): then
    each partition still open ends at its log's end as read, `still_open`.
    """
    closes_at = hour.end + grace
    closed_by_clock = now >= closes_at
    _check_partitions_still_exist(topic, hour, logs, before, after)
    backwards = _offsets_gone_backwards(logs, before, after)
    if backwards:
        raise OffsetsLost(topic, hour, backwards, "the log now ends before offsets already landed (topic recreated?)")
    bounds, open_partitions, expired = [], [], {}
    for log in sorted(logs, key=lambda item: item.partition):
        start, start_origin, start_from = _start(hour, log, before)
        end, end_origin, end_from = _end(hour, log, after, closed_by_clock)
        still_open = end is None and increment
        if still_open:
            end, end_origin, end_from = log.log_end, BoundaryOrigin.LOG_END, "log end as read (the hour is still open)"
        if end is None:
            open_partitions.append(log.partition)
            continue
        if end < start:
            if end_origin is BoundaryOrigin.NEIGHBOUR:
                raise OffsetsLost(
                    topic, hour, {log.partition: (end, start)},
                    "landed neighbours disagree (an earlier hour ends after a later one starts)",
                )
            end, end_from = start, f"{end_from}, raised to start"
        loss = None
        if start < log.log_start and start < end:
            loss = expired[log.partition] = (start, min(log.log_start, end))
            if accept_lost_offsets:
                start, start_origin, start_from = loss[1], BoundaryOrigin.LOG_START, f"log start (offsets [{loss[0]}, {loss[1]}) expired; loss accepted)"
        new = before is not None and before.partition(log.partition) is None
        held_open = log.undecided if end == log.log_end and not still_open else None
        held_back = log.held_back if end == log.log_end and not still_open else None
        if held_back:
            end_from += (f"; offsets [{held_back[0]}, {held_back[1]}) past it hold records stamped before the hour's "
                         f"end that are not readable yet (a transaction still open, or the broker's committed end "
                         f"lags): the hour is incomplete; they land with the first hour landed once they are readable")
        elif held_open:
            end_from += (f"; offsets [{held_open[0]}, {held_open[1]}) are in a transaction still open: "
                         f"committed, they land with hour {hour.next()}")
        bounds.append(PartitionBounds(log.partition, start, end, start_from, end_from, start_origin, end_origin,
                                      loss if accept_lost_offsets else None, new, held_open or held_back, held_back,
                                      still_open))
    if open_partitions:
        raise HourNotClosed(topic, hour, open_partitions, closes_at)
    if expired and not accept_lost_offsets:
        raise OffsetsLost(
            topic, hour, expired,
            "offsets expired from the log before they were landed (to land the rest and record the loss, "
            "re-run with accept_lost_offsets)",
        )
    return bounds


def _offsets_gone_backwards(logs, before, after) -> dict[int, tuple[int, int]]:
    ends = {log.partition: log.log_end for log in logs}
    gone = {}
    for neighbour in (before, after):
        for landed in neighbour.partitions if neighbour else ():
            if landed.partition in ends and landed.end > ends[landed.partition]:
                gone[landed.partition] = (ends[landed.partition], landed.end)
    return gone


def _start(hour: KafkaHour, log: PartitionLog, before: HourManifest | None) -> tuple[int, BoundaryOrigin, str]:
    if before is None:
        return _start_by_time(log)
    landed = before.partition(log.partition)
    if landed is not None and before.kafka_hour == hour.previous() and not before.final:
        # The hour before is open, landed in increments so far: its end is where its last one read, not where Kafka's
        # rule puts it. This hour starts at its first record stamped in it, which its increments never landed.
        by_time = _start_by_time(log)
        if by_time[0] >= landed.end:
            return by_time[0], by_time[1], f"{by_time[2]} (hour {before.hour} before it still open)"
        return landed.end, BoundaryOrigin.NEIGHBOUR, f"manifest {before.hour} (still open)"
    if landed is not None and before.kafka_hour == hour.previous():
        return landed.end, BoundaryOrigin.NEIGHBOUR, f"manifest {before.hour}"
    if landed is None:
        # Added after the hour before was landed: its records before this hour are in no landed hour yet.
        return log.log_start, BoundaryOrigin.LOG_START, f"log start (partition new since {before.hour})"
    by_time = _start_by_time(log)
    if landed.end > by_time[0]:
        return landed.end, BoundaryOrigin.NEIGHBOUR, f"manifest {before.hour} (after a gap)"
    return by_time


def _start_by_time(log: PartitionLog) -> tuple[int, BoundaryOrigin, str]:
    lookup = log.first_at_or_after_hour_start
    if lookup is not None:
        return lookup, BoundaryOrigin.TIME_LOOKUP, BoundaryOrigin.TIME_LOOKUP.value
    return log.log_end, BoundaryOrigin.LOG_END, "log end (no record in or after the hour)"


def _end(hour: KafkaHour, log: PartitionLog, after: HourManifest | None,
         closed_by_clock: bool) -> tuple[int | None, BoundaryOrigin, str]:
    landed = after.partition(log.partition) if after is not None else None
    if after is not None and landed is not None and after.kafka_hour == hour.next():
        return landed.start, BoundaryOrigin.NEIGHBOUR, f"manifest {after.hour}"
    lookup = log.first_at_or_after_hour_end
    if lookup is not None:
        end, origin, source = lookup, BoundaryOrigin.TIME_LOOKUP, BoundaryOrigin.TIME_LOOKUP.value
    elif closed_by_clock:
        end, origin, source = log.log_end, BoundaryOrigin.LOG_END, "log end (hour closed by the wall clock)"
        if log.reported_end is not None and log.reported_end != log.log_end:
            source = f"log end {log.log_end} as read (hour closed by the wall clock; the broker reported {log.reported_end})"
    else:
        return None, BoundaryOrigin.LOG_END, "open"
    if after is not None and landed is not None and landed.start < end:
        return landed.start, BoundaryOrigin.NEIGHBOUR, f"manifest {after.hour} (after a gap)"
    return end, origin, source


def _check_partitions_still_exist(topic, hour, logs, before, after) -> None:
    present = {log.partition for log in logs}
    for neighbour in (before, after):
        if neighbour is None:
            continue
        missing = {p.partition: (p.start, p.end) for p in neighbour.partitions if p.partition not in present}
        if missing:
            raise OffsetsLost(topic, hour, missing, f"partitions landed in hour {neighbour.hour} no longer exist")


def fixed_by_neighbours(hour: KafkaHour, before: HourManifest | None, after: HourManifest | None) -> tuple[set[int], set[int]]:
    """Partitions whose start (end) the adjacent landed hour already fixes: no broker lookup needed."""
    starts = ({p.partition for p in before.partitions} if before and before.kafka_hour == hour.previous() and before.final
              else set())
    ends = {p.partition for p in after.partitions} if after and after.kafka_hour == hour.next() else set()
    return starts, ends


def split_slices(bounds: list[PartitionBounds], max_rows_per_task: int, landed: dict[int, int] | None = None,
                 cuts: dict[int, set[int]] | None = None) -> list[OffsetSlice]:
    """Cuts each partition's range into slices of at most `max_rows_per_task` offsets; empty ranges need no task.

    `landed`: per partition, where the hour's earlier increments ended: only the offsets after it are sliced.
    `cuts`: per partition, offsets a slice must start at (where increments of an earlier landing started): a landing
    again of an hour landed in increments writes the files they wrote, of the same names and rows, in place."""
    slices = []
    for bound in bounds:
        start = max(bound.start, (landed or {}).get(bound.partition, bound.start))
        edges = sorted({start, *(c for c in (cuts or {}).get(bound.partition, ()) if start < c < bound.end), bound.end})
        for first, last in zip(edges, edges[1:]):
            for offset in range(first, last, max_rows_per_task):
                slices.append(OffsetSlice(bound.partition, offset, min(offset + max_rows_per_task, last)))
    return slices
