"""Reading a Kafka topic's log: partitions, log bounds, time boundaries and offset slices.
A broker's time lookup is checked against the records around its answer; where it is wrong, timestamps are searched.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import itemgetter
from typing import cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.records import KafkaBatch, names_an_hour
from kafka_lake.settings import ISOLATION_LEVEL, check_client_properties

log = logging.getLogger(__name__)

_TIMEOUT_S = 15.0
# The values of one decode batch stay under this many bytes: decoding holds about eight times a batch's bytes at
# its peak, so 20,000 records of 10 MiB each must not make one batch.
DEFAULT_MAX_BATCH_BYTES = 32 * 1024 * 1024
# librdkafka wants fetch.max.bytes ≥ message.max.bytes, which only bounds what a producer sends.
_ONE_BATCH_FETCHES = {"fetch.max.bytes": 1024, "max.partition.fetch.bytes": 1024, "message.max.bytes": 1000}

@dataclass(frozen=True)
class PartitionLog:
    """What the broker says about one partition, for one hour: log bounds and time lookups."""

    partition: int
    log_start: int
    log_end: int
    # First offset whose timestamp ≥ H (≥ H+1), None if none yet; also None, and unread, where an
    # adjacent landed hour fixes that boundary (see `fixed_by_neighbours`).
    first_at_or_after_hour_start: int | None
    first_at_or_after_hour_end: int | None
    # Past `log_end` while a transaction is open: [log_end, high_watermark) is not decided yet. None: as log_end.
    high_watermark: int | None = None
    reported_end: int | None = None  # the broker's answer for the log end, where reading found another
    # Offsets past `log_end`, not readable committed yet, whose records are stamped before the hour's end (`KafkaLog.
    # held_back`): where the hour ends at `log_end`, it is incomplete by them.
    held_back: tuple[int, int] | None = None

    @property
    def undecided(self) -> tuple[int, int] | None:
        """Offsets past the last stable offset that an open transaction holds, if any."""
        if self.high_watermark is None or self.high_watermark <= self.log_end:
            return None
        return self.log_end, self.high_watermark



class KafkaUnavailable(RuntimeError):
    """The broker did not answer; nothing is committed when this is raised."""


class SliceReadError(RuntimeError):
    """A slice could not be read to its end."""


def consumer_config(bootstrap_servers: str, client_properties: dict[str, str] | None = None) -> dict:
    """librdkafka settings for reading exact offset ranges: committed records only, no group commits, short
    fetch waits. An operator's `isolation.level` other than read_committed is refused: aborted and
    uncommitted records would land as rows."""
    client_properties = dict(client_properties or {})
    check_client_properties(client_properties)
    config = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": "kafka-lake-landing",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        # Aborted transactions never land, and a transaction still open ends the readable log (its last
        # stable offset): a read_committed consumer sees exactly the records that will stay.
        "isolation.level": ISOLATION_LEVEL,
        # Short: a boundary search reads dozens of single records; a fetch must not idle waiting for more.
        "fetch.wait.max.ms": 2,
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "queued.max.messages.kbytes": 65536,
        # librdkafka keeps this many messages fetched ahead of the reader (100k by default). A slice ends where
        # its hour ends, not where the log does, so all of them past the slice's end were read for nothing: a
        # slice of 125k records made the broker serve 229k. One batch ahead keeps the reader fed.
        "queued.min.messages": 20_000,
        # Once its prefetch queue is full, librdkafka waits this long before fetching again (1 s by default): a
        # task that drains the queue faster sat idle for most of that second, every time.
        "fetch.queue.backoff.ms": 20,
        "socket.timeout.ms": 10000,
        "log_level": 3,
    }
    config.update(client_properties)
    return config


@dataclass(frozen=True)
class LogBounds:
    """A partition's log as read, not as told: `end` is confirmed by reading at it."""

    start: int  # the first offset kept
    end: int  # no committed record is readable at or after it: the last stable offset under read_committed
    high_watermark: int  # past `end` while a transaction is open: [end, high_watermark) is not yet decided
    reported_end: int  # what the broker's ListOffsets answered; differs from `end` on a broker that under-reports


# A boundary B of time T is Kafka's: the first offset whose record is stamped at or after T. It is checked by
# reading the record at B and this many offsets before it (producers' clocks disagree, so a record stamped
# after T can sit a little before one stamped before it); a record stamped at or after T in that window moves
# B back to it, window after window, up to the limit below.
BOUNDARY_WINDOW = 2_000
_MAX_WINDOWS_BACK = 64
# How long a probe waits for a record or the end of the log before concluding it asked past the end.
_PROBE_WAIT_S = 0.3
_WINDOW_FETCHES = {"fetch.max.bytes": 1024 * 1024, "max.partition.fetch.bytes": 1024 * 1024,
                   "queued.min.messages": BOUNDARY_WINDOW}


@dataclass(frozen=True)
class _Probe:
    """What a single read at an offset found: a record at or after it, the end of the log there, or nothing."""

    record: tuple[int, int] | None = None  # (offset, timestamp ms)
    end: int | None = None  # the offset where the log ends, as the fetch said (the probe asked at or before it)
    high_watermark: int | None = None  # the fetch's high watermark


class KafkaLog:
    """One topic's log, read through a single consumer that never commits offsets."""

    def __init__(self, config: dict, topic: str):
        self.topic = topic
        self._config = config
        self._consumer = Consumer(config)
        self._prober: Consumer | None = None  # reads single records; made on the first
        self._windows: Consumer | None = None  # reads the records before a boundary; made on the first
        self._uncommitted: KafkaLog | None = None  # the log past the committed end (`held_back`); made on the first

    def close(self) -> None:
        self._consumer.close()
        for consumer in (self._prober, self._windows):
            if consumer is not None:
                consumer.close()
        if self._uncommitted is not None:
            self._uncommitted.close()

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def partitions(self) -> list[int]:
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=_TIMEOUT_S)
        except KafkaException as error:
            raise KafkaUnavailable(f"cannot read metadata of topic {self.topic}: {error}") from None
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            reason = topic.error if topic is not None else "unknown topic"
            raise KafkaUnavailable(f"topic {self.topic} is not available on the cluster: {reason}")
        return sorted(topic.partitions)

    def bounds(self, partition: int) -> tuple[int, int]:
        """(log start, log end) of a partition, the end confirmed by reading at it."""
        found = self.log_bounds(partition)
        return found.start, found.end

    def log_bounds(self, partition: int) -> LogBounds:
        """The partition's log start and its end as read: the broker's answer is confirmed by a read at it, and
        where records are readable past it (a broker that under-reports its high watermark, or its last stable
        offset while a transaction is open), the end is found by reading."""
        try:
            start, reported = self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=_TIMEOUT_S)
        except KafkaException as error:
            raise KafkaUnavailable(f"{self.topic} partition {partition}: cannot read log bounds: {error}") from None
        probe = self._probe(partition, max(reported, start))
        if probe.end is not None:
            return LogBounds(start, probe.end, max(probe.high_watermark or 0, probe.end), reported)
        end, high_watermark = self._readable_end(partition, start, reported, probe)
        log.warning(
            "%s[%d]: the broker reports the log ends at offset %d, but committed records are readable up to offset "
            "%d; landing reads up to %d", self.topic, partition, reported, end, end,
        )
        return LogBounds(start, end, max(high_watermark, end), reported)

    def _readable_end(self, partition: int, start: int, reported: int, first: _Probe) -> tuple[int, int]:
        """(end, high watermark) where the broker's reported end is contradicted by `first`: a bisection between
        the last record read and the fetch's high watermark, each probe reading a record, the end, or nothing."""
        low = first.record[0] + 1 if first.record else start  # the end is at or after `low`
        high = max(first.high_watermark or 0, low)  # and, as far as known, at or before `high`
        high_watermark = first.high_watermark or 0
        while True:
            probe = self._probe(partition, high if low == high else (low + high + 1) // 2)
            high_watermark = max(high_watermark, probe.high_watermark or 0)
            if probe.end is not None:
                return probe.end, high_watermark
            if probe.record is not None:
                low = probe.record[0] + 1
                high = max(high, low)
            elif low == high:
                raise KafkaUnavailable(
                    f"{self.topic} partition {partition}: the broker reports the log ends at offset {reported}, but "
                    f"records are readable past it and no read finds where it really ends (at or after offset {low})"
                )
            else:
                high = (low + high + 1) // 2 - 1

    def _probe(self, partition: int, offset: int) -> _Probe:
        """One read at `offset` with end-of-log events on: the first record at or after it, or the end of the
        log if the fetch says it is there, or nothing (asked past the end) after a short wait."""
        consumer = self._probe_consumer()
        consumer.assign([TopicPartition(self.topic, partition, offset)])
        try:
            deadline = time.monotonic() + _PROBE_WAIT_S
            while time.monotonic() < deadline:
                for message in consumer.consume(num_messages=1, timeout=0.05):
                    error = message.error()
                    if error is None:
                        return _Probe(record=_stamp(message),
                                      high_watermark=self._cached_high_watermark(consumer, partition))
                    if error.code() == KafkaError._PARTITION_EOF:
                        return _Probe(end=message.offset(), high_watermark=self._cached_high_watermark(consumer, partition))
                    if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                        return _Probe()
                    self._raise_for(error, partition, offset)
            return _Probe()
        finally:
            consumer.unassign()

    def _cached_high_watermark(self, consumer: Consumer, partition: int) -> int | None:
        _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), cached=True)
        return high if high >= 0 else None

    def describe_hour(
        self, hour: KafkaHour, partitions: list[int], known_starts: AbstractSet[int] = frozenset(), known_ends: AbstractSet[int] = frozenset(),
    ) -> list[PartitionLog]:
        """Log bounds and time boundaries of `hour`; boundaries landed neighbours fix are not looked up
        (searching record timestamps costs dozens of reads when the broker's answer is wrong)."""
        logs = []
        for partition in partitions:
            bounds = self.log_bounds(partition)
            lookup = lambda moment_ms: self.first_offset_at_or_after(partition, moment_ms, bounds.start, bounds.end)
            end_lookup = None if partition in known_ends else lookup(hour.end_ms)
            # No committed record at or after the hour's end: the hour may end at the committed end, below records
            # stamped in it that cannot be read yet.
            held_back, high_watermark = (None, bounds.high_watermark) if end_lookup is not None \
                else self.held_back(partition, hour, bounds)
            logs.append(
                PartitionLog(
                    partition=partition,
                    log_start=bounds.start,
                    log_end=bounds.end,
                    first_at_or_after_hour_start=None if partition in known_starts else lookup(hour.start_ms),
                    first_at_or_after_hour_end=end_lookup,
                    high_watermark=high_watermark,
                    reported_end=bounds.reported_end,
                    held_back=held_back,
                )
            )
        return logs

    def held_back(self, partition: int, hour: KafkaHour, committed: LogBounds) -> tuple[tuple[int, int] | None, int]:
        """(offsets past the committed end whose records are stamped before the hour's end, or None; the log's end
        past the committed end). They are offsets of the hour by Kafka's rule that a read_committed consumer cannot
        read yet: a transaction still open, or a broker whose committed end lags. Found by reading the log as it is
        written (read_uncommitted), for offsets and timestamps only: no value read this way is landed."""
        written = self._as_written().log_bounds(partition)
        return self.stamped_before_end_past(partition, hour, committed.end, written), max(written.end, committed.high_watermark)

    def stamped_before_end_past(self, partition: int, hour: KafkaHour, offset: int,
                                written: LogBounds | None = None) -> tuple[int, int] | None:
        """[offset, first offset at or after it stamped at or after the hour's end) in the log as written, or None if
        that is empty: by Kafka's rule the hour's offsets, had they been readable where the hour ended at `offset`.
        Read for offsets and timestamps only (read_uncommitted: an open transaction's records and those behind it)."""
        as_written = self._as_written()
        written = written or as_written.log_bounds(partition)
        if written.end <= offset:
            return None
        first_after = as_written.first_offset_at_or_after(partition, hour.end_ms, offset, written.end)
        stop = written.end if first_after is None else first_after
        return (offset, stop) if stop > offset else None

    def _as_written(self) -> KafkaLog:
        if self._uncommitted is None:
            self._uncommitted = KafkaLog({**self._config, "isolation.level": "read_uncommitted"}, self.topic)
        return self._uncommitted

    def first_offset_at_or_after(self, partition: int, timestamp_ms: int, log_start: int, log_end: int) -> int | None:
        """The first offset whose record is stamped at or after `timestamp_ms`, or None if no record is yet.

        The broker's time lookup is a candidate only: it stands once the record at it is stamped at or after the
        time and the records before it (`BOUNDARY_WINDOW` of them) are stamped before; otherwise record timestamps
        are searched. Control markers and aborted records are not records here: reads skip them."""
        if log_start >= log_end:
            return None
        answer = self._broker_lookup(partition, timestamp_ms)
        # -1 is Kafka's "no record at or after": the same answer as the log end, not an offset.
        candidate = log_end if answer is not None and (answer < 0 or answer >= log_end) else answer
        if candidate is None or candidate < log_start or not self._stamped_at_or_after(partition, candidate, timestamp_ms, log_end):
            log.info(
                "%s[%d]: the broker's time lookup for %d answered %s, which the record there contradicts; "
                "searching record timestamps", self.topic, partition, timestamp_ms, answer,
            )
            candidate = self._search(partition, timestamp_ms, log_start, log_end)
        boundary = self._moved_back_over_earlier_records(partition, timestamp_ms, candidate, log_start)
        return boundary if boundary < log_end else None

    def _stamped_at_or_after(self, partition: int, offset: int, timestamp_ms: int, log_end: int) -> bool:
        """Whether the first record at or after `offset` is stamped at or after the time (at the log end: yes)."""
        if offset >= log_end:
            return True
        found = self.record_at_or_after(partition, offset, log_end)
        return found is None or found[1] >= timestamp_ms

    def _moved_back_over_earlier_records(self, partition: int, timestamp_ms: int, boundary: int, log_start: int) -> int:
        """`boundary`, or the first record stamped at or after the time in the windows before it."""
        for _ in range(_MAX_WINDOWS_BACK):
            window_start = max(log_start, boundary - BOUNDARY_WINDOW)
            if window_start >= boundary:
                return boundary
            stamped_later = [offset for offset, ts in self.records_between(partition, window_start, boundary) if ts >= timestamp_ms]
            if not stamped_later:
                return boundary
            log.info("%s[%d]: offset %d is stamped at or after %d but sits before the candidate boundary %d; moving back",
                     self.topic, partition, stamped_later[0], timestamp_ms, boundary)
            boundary = stamped_later[0]
        log.warning("%s[%d]: records stamped at or after %d reach back more than %d offsets before offset %d; the "
                    "boundary stays there", self.topic, partition, timestamp_ms, _MAX_WINDOWS_BACK * BOUNDARY_WINDOW, boundary)
        return boundary

    def records_between(self, partition: int, start: int, end: int) -> list[tuple[int, int]]:
        """(offset, timestamp ms) of every committed record in [start, end) that time can place; markers, gaps and
        records stamped with no time (-1, the year 10000) take no part in boundaries."""
        found: list[tuple[int, int]] = []
        for messages in self._message_chunks(partition, start, end, BOUNDARY_WINDOW, self._window_consumer()):
            found.extend(stamp for stamp in map(_stamp, messages) if names_an_hour(stamp[1]))
        return found

    def _broker_lookup(self, partition: int, timestamp_ms: int) -> int | None:
        try:
            [answer] = self._consumer.offsets_for_times(
                [TopicPartition(self.topic, partition, timestamp_ms)], timeout=_TIMEOUT_S
            )
        except KafkaException:
            return None  # unsupported or failed: the search below does not need it
        if answer.error is not None:
            return None
        return answer.offset  # -1 means "no such record" in Kafka's protocol

    def _search(self, partition: int, timestamp_ms: int, log_start: int, log_end: int) -> int:
        """Bisection's narrowing with a better pivot: timestamps grow about steadily with offsets, so each probe
        is aimed where the records known on either side put the boundary (a few probes instead of ~20 a
        million offsets); after two aimed probes in a row that did not halve the range, it probes the middle.
        The narrowing is bisection's, so where timestamps follow offsets the answer is the one bisection gives.
        Returns `log_end` where no record is stamped at or after the time."""
        low, high = log_start, log_end
        below = above = None  # (offset, timestamp) of the nearest records probed before `low` and at/after `high`
        misses = 0  # aimed probes in a row that left more than half of the range
        while low < high:
            aimed = misses < 2 and below is not None and above is not None
            pivot = _pivot(low, high, below, above, timestamp_ms) if misses < 2 else (low + high) // 2
            span = high - low
            found = self.record_at_or_after(partition, pivot, high)
            if found is None or found[1] >= timestamp_ms:
                high, above = pivot, found or above
            else:
                low, below = found[0] + 1, found
            misses = misses + 1 if aimed and high - low > span // 2 else 0
        return low

    def record_at_or_after(self, partition: int, offset: int, limit: int) -> tuple[int, int] | None:
        """(offset, timestamp ms) of the first record at or after `offset` and before `limit` that time can place:
        one stamped with no time (-1, the year 10000) decides no boundary, and the record after it answers."""
        for messages in self._message_chunks(partition, offset, limit, 1, self._probe_consumer()):
            for stamp in map(_stamp, messages):
                if names_an_hour(stamp[1]):
                    return stamp
        return None

    def _probe_consumer(self) -> Consumer:
        # Fetches of one record batch, not megabytes: a broker returns the first batch whole however small the
        # limits (Kafka's KIP-74), and a probe here then takes ~1 ms instead of ~30 ms. End-of-log events on, so a
        # probe at the log end answers at once.
        if self._prober is None:
            self._prober = Consumer({**self._config, **_ONE_BATCH_FETCHES, "enable.partition.eof": True})
        return self._prober

    def _window_consumer(self) -> Consumer:
        if self._windows is None:
            self._windows = Consumer({**self._config, **_WINDOW_FETCHES})
        return self._windows

    def read_slice_batches(self, partition: int, start: int, end: int, batch_size: int,
                           max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> Iterator[KafkaBatch]:
        """The records of [start, end) as column batches of `batch_size` records, or fewer where their values
        reach `max_batch_bytes` (the last one shorter), whatever chunks the client hands over, so a re-run cuts
        the same batches: no Python object per record."""
        columns: tuple[list, ...] = ([], [], [], [], [])  # offsets, timestamps, keys, values, headers
        held = 0  # bytes of the values in `columns`
        for messages in self._message_chunks(partition, start, end, batch_size):
            values = list(map(Message.value, messages))
            columns[0].extend(map(Message.offset, messages))
            columns[1].extend(map(itemgetter(1), map(Message.timestamp, messages)))
            columns[2].extend(map(Message.key, messages))
            columns[3].extend(values)
            columns[4].extend(map(Message.headers, messages))
            held += _bytes_of(values)
            while len(columns[0]) >= batch_size or held >= max_batch_bytes:
                # Under the cap, the first `batch_size` values are too: they need no counting again.
                cut = batch_size if held < max_batch_bytes else _next_batch(columns[3], batch_size, max_batch_bytes)
                if cut == len(columns[0]):  # the common case, chunks adding up to a batch: no copies of the lists
                    batch, columns, held = columns, ([], [], [], [], []), 0
                else:
                    batch = tuple(column[:cut] for column in columns)
                    columns = tuple(column[cut:] for column in columns)
                    held = _bytes_of(columns[3])
                yield KafkaBatch([partition] * cut, *batch)
        if columns[0]:
            yield KafkaBatch([partition] * len(columns[0]), *columns)

    def _message_chunks(self, partition: int, start: int, end: int, chunk_size: int,
                        consumer: Consumer | None = None) -> Iterator[list[Message]]:
        """The messages of [start, end), as the client hands them over, at most `chunk_size` at a time."""
        if start >= end:
            return
        consumer = consumer or self._consumer
        consumer.assign([TopicPartition(self.topic, partition, start)])
        next_offset = start
        idle_since = time.monotonic()
        try:
            while next_offset < end:
                # consume() waits out its timeout until it has all it asked for: never ask past the slice's end,
                # where the log may end too (the latest hour).
                messages = consumer.consume(num_messages=min(chunk_size, 10_000, end - next_offset), timeout=0.5)
                if not messages:
                    if self._position(consumer, partition) >= end:
                        return
                    if time.monotonic() - idle_since > _TIMEOUT_S:
                        raise SliceReadError(
                            f"{self.topic} partition {partition}: no record after offset {next_offset} for "
                            f"{_TIMEOUT_S:.0f}s although the slice ends at {end}: the broker is unreachable or "
                            f"no longer holds them"
                        )
                    continue
                idle_since = time.monotonic()
                if any(map(Message.error, messages)):
                    messages, log_ended = self._records_before_the_end(messages, partition, next_offset)
                    if log_ended:
                        if messages:
                            yield messages
                        return
                    if not messages:
                        continue
                offsets = cast(list[int], list(map(Message.offset, messages)))  # records: none without one
                if offsets[-1] >= end:
                    messages = messages[:bisect_left(offsets, end)]
                if not messages:
                    return
                next_offset = _offset(messages[-1]) + 1
                yield messages
        finally:
            consumer.unassign()

    def _records_before_the_end(self, messages: list[Message], partition: int, offset: int) -> tuple[list[Message], bool]:
        """The records among `messages` up to an end-of-log event (probes ask for them), and whether one came;
        any other error raises."""
        records = []
        for message in messages:
            error = message.error()
            if error is None:
                records.append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                return records, True
            else:
                self._raise_for(error, partition, offset)
        return records, False

    def _position(self, consumer: Consumer, partition: int) -> int:
        [position] = consumer.position([TopicPartition(self.topic, partition)])
        return position.offset

    def _raise_for(self, error: KafkaError, partition: int, offset: int) -> None:
        if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
            raise SliceReadError(
                f"{self.topic} partition {partition}: offset {offset} is out of range (expired by retention?)"
            )
        if error.fatal() or not error.retriable():
            raise KafkaUnavailable(f"{self.topic} partition {partition} at offset {offset}: {error.str()}")
        log.warning("%s[%d]: transient error at offset %d: %s", self.topic, partition, offset, error.str())


def _offset(message: Message) -> int:
    """A fetched record's offset: the client types it optional, for messages that carry an error instead."""
    return cast(int, message.offset())


def _stamp(message: Message) -> tuple[int, int]:
    return _offset(message), message.timestamp()[1]


def _pivot(low: int, high: int, below: tuple[int, int] | None, above: tuple[int, int] | None, timestamp_ms: int) -> int:
    """Where in [low, high) to probe next: the range's ends until a record on each side is known (a boundary at
    the log's start or past its end is then found with one probe), then the offset interpolated between them."""
    if below is None:
        return low
    if above is None:
        return high - 1
    (low_offset, low_ms), (high_offset, high_ms) = below, above
    if high_ms <= low_ms:  # timestamps out of order here: nothing to aim with
        return (low + high) // 2
    aimed = low_offset + (timestamp_ms - low_ms) * (high_offset - low_offset) // (high_ms - low_ms)
    return min(max(aimed, low), high - 1)


def _bytes_of(values: list[bytes | None]) -> int:
    return sum(map(len, filter(None, values)))


def _next_batch(values: list[bytes | None], batch_size: int, max_batch_bytes: int) -> int:
    """How many of `values` the next batch takes: `batch_size`, or fewer whose bytes reach `max_batch_bytes` (always
    at least one, so a single value larger than the cap still makes a batch)."""
    held = 0
    for length, value in enumerate(values[:batch_size], start=1):
        held += len(value) if value else 0
        if held >= max_batch_bytes:
            return length
    return min(len(values), batch_size)
