"""Reading a Kafka topic's log: partitions, log bounds, time boundaries and offset slices.

A broker's time lookup is checked against the records around its answer; where it is wrong
or unsupported, the boundary is found by a binary search over record timestamps.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from operator import itemgetter
from typing import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafka_lake.decoding import KafkaBatch
from kafka_lake.hours import KafkaHour
from kafka_lake.slices import PartitionLog

log = logging.getLogger(__name__)

_TIMEOUT_S = 15.0
# The values of one decode batch stay under this many bytes: decoding holds about eight times a batch's bytes at
# its peak, so 20,000 records of 10 MiB each must not make one batch.
DEFAULT_MAX_BATCH_BYTES = 32 * 1024 * 1024
# librdkafka wants fetch.max.bytes ≥ message.max.bytes, which only bounds what a producer sends.
_ONE_BATCH_FETCHES = {"fetch.max.bytes": 1024, "max.partition.fetch.bytes": 1024, "message.max.bytes": 1000}


class KafkaUnavailable(RuntimeError):
    """The broker did not answer; nothing is committed when this is raised."""


class SliceReadError(RuntimeError):
    """A slice could not be read to its end."""


def consumer_config(bootstrap_servers: str, client_properties: dict[str, str] | None = None) -> dict:
    """librdkafka settings for reading exact offset ranges: no group commits, short fetch waits."""
    config = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": "kafka-lake-landing",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
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
    config.update(client_properties or {})
    return config


class KafkaLog:
    """One topic's log, read through a single consumer that never commits offsets."""

    def __init__(self, config: dict, topic: str):
        self.topic = topic
        self._config = config
        self._consumer = Consumer(config)
        self._prober: Consumer | None = None  # reads single records; made on the first

    def close(self) -> None:
        self._consumer.close()
        if self._prober is not None:
            self._prober.close()

    def __enter__(self) -> "KafkaLog":
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
        """(log start, log end) of a partition: the first offset kept and the high watermark."""
        try:
            return self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=_TIMEOUT_S)
        except KafkaException as error:
            raise KafkaUnavailable(f"{self.topic} partition {partition}: cannot read log bounds: {error}") from None

    def describe_hour(
        self, hour: KafkaHour, partitions: list[int], known_starts: set[int] = frozenset(), known_ends: set[int] = frozenset(),
    ) -> list[PartitionLog]:
        """Log bounds and time boundaries of `hour`; boundaries landed neighbours fix are not looked up
        (searching record timestamps costs dozens of reads when the broker's answer is wrong)."""
        logs = []
        for partition in partitions:
            log_start, log_end = self.bounds(partition)
            lookup = lambda moment_ms: self.first_offset_at_or_after(partition, moment_ms, log_start, log_end)  # noqa: E731
            logs.append(
                PartitionLog(
                    partition=partition,
                    log_start=log_start,
                    log_end=log_end,
                    first_at_or_after_hour_start=None if partition in known_starts else lookup(hour.start_ms),
                    first_at_or_after_hour_end=None if partition in known_ends else lookup(hour.end_ms),
                )
            )
        return logs

    def first_offset_at_or_after(self, partition: int, timestamp_ms: int, log_start: int, log_end: int) -> int | None:
        """The first offset whose record timestamp is ≥ `timestamp_ms`, or None if no record is yet."""
        if log_start >= log_end:
            return None
        answer = self._broker_lookup(partition, timestamp_ms)
        if answer is not None and self._lookup_holds(partition, timestamp_ms, answer, log_start, log_end):
            # -1 is Kafka's "no record at or after": the same answer as the log end, not an offset.
            return None if answer < 0 or answer >= log_end else answer
        log.info(
            "%s[%d]: the broker's time lookup for %d answered %s, which the records around it contradict; "
            "searching record timestamps", self.topic, partition, timestamp_ms, answer,
        )
        return self._search(partition, timestamp_ms, log_start, log_end)

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

    def _lookup_holds(self, partition: int, timestamp_ms: int, answer: int, log_start: int, log_end: int) -> bool:
        if answer < 0 or answer >= log_end:
            last = self.record_at_or_after(partition, log_end - 1, log_end)
            return last is None or last[1] < timestamp_ms
        if answer < log_start:
            return False
        at = self.record_at_or_after(partition, answer, log_end)
        if at is None or at[1] < timestamp_ms:
            return False
        if answer == log_start:
            return True
        before = self._record_before(partition, answer, log_start)
        return before is None or before[1] < timestamp_ms

    def _record_before(self, partition: int, offset: int, log_start: int) -> tuple[int, int] | None:
        # Offsets may have gaps (transaction markers, compaction): step back until a record shows.
        for probe in (offset - 1, offset - 10, offset - 100, log_start):
            probe = max(probe, log_start)
            found = self.record_at_or_after(partition, probe, offset)
            if found is not None:
                return found
        return None

    def _search(self, partition: int, timestamp_ms: int, log_start: int, log_end: int) -> int | None:
        """Bisection's narrowing with a better pivot: timestamps grow about steadily with offsets, so each probe
        is aimed where the records known on either side put the boundary (a few probes instead of ~20 a
        million offsets); after two aimed probes in a row that did not halve the range, it probes the middle.
        The narrowing is bisection's, so where timestamps follow offsets the answer is the one bisection gives."""
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
        return low if low < log_end else None

    def record_at_or_after(self, partition: int, offset: int, limit: int) -> tuple[int, int] | None:
        """(offset, timestamp ms) of the first record at or after `offset` and before `limit`."""
        for [message, *_] in self._message_chunks(partition, offset, limit, 1, self._probe_consumer()):
            return message.offset(), message.timestamp()[1]
        return None

    def _probe_consumer(self) -> Consumer:
        # Fetches of one record batch, not megabytes: a broker returns the first batch whole however small the
        # limits (Kafka's KIP-74), and a probe here then takes ~1 ms instead of ~30 ms.
        if self._prober is None:
            self._prober = Consumer({**self._config, **_ONE_BATCH_FETCHES})
        return self._prober

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
                cut, cut_bytes = _next_batch(columns[3], batch_size, max_batch_bytes)
                yield KafkaBatch([partition] * cut, *(column[:cut] for column in columns))
                held -= cut_bytes
                columns = tuple(column[cut:] for column in columns)
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
                    for message in messages:
                        if message.error() is not None:
                            self._raise_for(message.error(), partition, next_offset)
                offsets = list(map(Message.offset, messages))
                if offsets[-1] >= end:
                    messages = messages[:bisect_left(offsets, end)]
                if not messages:
                    return
                next_offset = messages[-1].offset() + 1
                yield messages
        finally:
            consumer.unassign()

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


def _next_batch(values: list[bytes | None], batch_size: int, max_batch_bytes: int) -> tuple[int, int]:
    """(how many of `values` the next batch takes, their bytes): `batch_size`, or fewer whose bytes reach
    `max_batch_bytes` (always at least one, so a single value larger than the cap still makes a batch)."""
    first = values[:batch_size]
    total = _bytes_of(first)
    if total < max_batch_bytes:
        return len(first), total
    held = 0
    for length, value in enumerate(first, start=1):
        held += len(value) if value else 0
        if held >= max_batch_bytes:
            return length, held
    return len(first), held
