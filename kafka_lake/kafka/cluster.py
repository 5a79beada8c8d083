"""The Kafka cluster as the platform's sensors see it: which topics exist, and the tail of every
partition's log, for many topics at once in batched requests bounded in size and time rather than one per partition.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_lake.kafka.log import KafkaUnavailable

_TIMEOUT_S = 15.0
_PARTITIONS_PER_LIST_OFFSETS = 1000


@dataclass(frozen=True)
class LogTail:
    """The end of one partition's log: its high watermark and the newest record timestamp seen there."""

    partition: int
    log_end: int
    last_timestamp_ms: int | None  # None: the partition holds no record

# A sensor's tick must end well inside Dagster's (DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS, 60 s by default): the broker
# gets this long a tick, and the topics it has not answered for by then are named and asked first at the next tick.
TICK_BUDGET_S = 20.0
# Partitions asked about in one request: a slow or failed answer costs only the topics of its batch.
PARTITIONS_PER_BATCH = 2000


@dataclass
class ClusterTails:
    """The tails read in one tick, per topic, and why the others were not read (each is asked again)."""

    tails: dict[str, list[LogTail]] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)

    def get(self, topic: str) -> list[LogTail] | None:
        return self.tails.get(topic)

    def __contains__(self, topic: str) -> bool:
        return topic in self.tails

    def __getitem__(self, topic: str) -> list[LogTail]:
        return self.tails[topic]


def batches(partitions: dict[str, list[int]], size: int = PARTITIONS_PER_BATCH) -> Iterator[dict[str, list[int]]]:
    """Whole topics, in the order given, gathered until a batch holds `size` partitions (a larger topic alone)."""
    batch: dict[str, list[int]] = {}
    for topic, numbers in partitions.items():
        if batch and sum(map(len, batch.values())) + len(numbers) > size:
            yield batch
            batch = {}
        batch[topic] = numbers
    if batch:
        yield batch


class KafkaCluster:
    """Read-only questions about the whole cluster, through one consumer that never commits."""

    def __init__(self, config: dict):
        # One fetch brings every partition's tail: let the broker fill it rather than answer
        # partition by partition (the landing's 2 ms suits single-record probes, not thousands of partitions).
        self._config = {**config, "enable.partition.eof": True, "auto.offset.reset": "latest", "fetch.wait.max.ms": 500}
        self._admin: AdminClient | None = None
        self._admin_lock = threading.Lock()

    def _admin_client(self) -> AdminClient:
        """One admin client for the cluster's life, shared by the threads asking (librdkafka's handles are
        thread-safe): a client made and dropped per question (a metrics scrape's, a tick's) opens its connections each
        time, and a metrics server making one a scrape has died of a segmentation fault in librdkafka's ListOffsets."""
        with self._admin_lock:
            if self._admin is None:
                self._admin = AdminClient(self._config)
            return self._admin

    def topics(self, timeout_s: float = _TIMEOUT_S) -> dict[str, list[int]]:
        """Every topic on the cluster and its partitions, from one metadata request."""
        consumer = Consumer(self._config)
        try:
            metadata = consumer.list_topics(timeout=timeout_s)
        except KafkaException as error:
            raise KafkaUnavailable(f"cannot read the cluster's topic list: {error}") from None
        finally:
            consumer.close()
        return {name: sorted(t.partitions) for name, t in metadata.topics.items() if t.error is None}

    def oldest_records(self, topic: str, partitions: list[int], timeout_s: float = _TIMEOUT_S) -> dict[int, tuple[int, int]]:
        """Per partition of `topic` that holds records, the oldest one it keeps, as (offset, timestamp ms): read at each
        log's start in one fetch. KafkaUnavailable names the partitions that did not answer within `timeout_s`."""
        consumer = Consumer(self._config)
        oldest: dict[int, tuple[int, int]] = {}
        pending = set(partitions)
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            deadline = time.monotonic() + timeout_s
            while pending and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=len(pending), timeout=0.2):
                    partition, error = cast(int, message.partition()), message.error()
                    if partition not in pending:
                        continue
                    if error is None:
                        oldest[partition] = (cast(int, message.offset()), message.timestamp()[1])
                    elif error.code() != KafkaError._PARTITION_EOF and (error.fatal() or not error.retriable()):
                        raise KafkaUnavailable(f"{topic} partition {partition}: reading its oldest record failed: "
                                               f"{error.str()}")
                    pending.discard(partition)
        finally:
            consumer.close()
        if pending:
            raise KafkaUnavailable(f"{topic}: the oldest records of partition(s) {', '.join(map(str, sorted(pending)))} "
                                   f"did not arrive within {timeout_s:.0f}s")
        return oldest

    def log_ends(self, partitions: dict[str, list[int]], timeout_s: float = _TIMEOUT_S,
                 admin: AdminClient | None = None) -> tuple[dict[tuple[str, int], int], dict[str, str]]:
        """Each partition's high watermark, from ListOffsets requests of at most a thousand partitions; and, per topic
        whose answer failed or did not come within `timeout_s`, why."""
        admin = admin or self._admin_client()
        wanted = [TopicPartition(topic, p) for topic, numbers in partitions.items() for p in numbers]
        futures = {}
        # The client's cost grows faster than the partitions of one call: 16,000 partitions take two to four times as
        # long in one call as in calls of a thousand (bench/RESULTS.md, "Metrics scrapes"). All are sent before any
        # answer is awaited.
        for first in range(0, len(wanted), _PARTITIONS_PER_LIST_OFFSETS):
            futures.update(admin.list_offsets(
                {tp: OffsetSpec.latest() for tp in wanted[first:first + _PARTITIONS_PER_LIST_OFFSETS]},
                request_timeout=max(timeout_s, 0.1),
            ))
        ends: dict[tuple[str, int], int] = {}
        failed: dict[str, list[str]] = defaultdict(list)
        for tp, future in futures.items():
            try:
                ends[tp.topic, tp.partition] = future.result().offset
            except KafkaException as error:
                failed[tp.topic].append(f"{tp.partition} ({error})")
        return ends, {topic: f"the broker did not give the log end of partition(s) {', '.join(errors[:3])}"
                      f"{' …' if len(errors) > 3 else ''} within {timeout_s:.1f}s" for topic, errors in failed.items()}

    def confirmed_ends(self, reported: dict[tuple[str, int], int], timeout_s: float = _TIMEOUT_S
                       ) -> tuple[dict[tuple[str, int], int], dict[str, str]]:
        """The log ends as read, as the landing reads them: each reported end confirmed by reading from the partition's
        last record to the end of its log, in one fetch over them all (a broker whose watermark lags its last batch,
        Tansu, shows the records past it); and, per topic a partition of which did not answer within `timeout_s`, why."""
        ends = dict(reported)
        non_empty = {key: end for key, end in ends.items() if end > 0}
        if not non_empty:
            return ends, {}
        consumer = Consumer(self._config)
        try:
            _, slow = self._newest_timestamps(consumer, non_empty, ends, timeout_s)
        finally:
            consumer.close()
        return ends, slow

    def log_tails(self, partitions: dict[str, list[int]], budget_s: float | None = None,
                  batch_partitions: int | None = None) -> ClusterTails:
        """Per topic, each partition's log end and newest record timestamp, in batches of whole topics (the ends in
        one request, then one fetch over the batch's non-empty partitions from their last offsets), within
        `budget_s` in all. A topic whose batch failed, was slow, or was not reached by then is in `unread` with why:
        the others are judged all the same."""
        result = ClusterTails()
        if not any(partitions.values()):
            return result
        budget_s = TICK_BUDGET_S if budget_s is None else budget_s
        deadline = time.monotonic() + budget_s
        asked = 0
        admin, consumer = self._admin_client(), Consumer(self._config)
        try:
            for batch in batches(partitions, batch_partitions or PARTITIONS_PER_BATCH):
                left = deadline - time.monotonic()
                if left <= 0:
                    for topic in batch:
                        result.unread[topic] = (f"not asked this tick: the broker's {budget_s:.0f}s of the tick went to "
                                                f"{asked} other topic(s)")
                    continue
                asked += len(batch)
                timeout = min(left, _TIMEOUT_S)
                ends, failed = self.log_ends(batch, timeout, admin)
                newest, slow = self._newest_timestamps(consumer, {key: end for key, end in ends.items() if end > 0},
                                                       ends, min(deadline - time.monotonic(), _TIMEOUT_S))
                for topic, why in slow.items():
                    failed.setdefault(topic, why)
                result.unread.update(failed)
                tails = defaultdict(list)
                for topic, p in sorted(ends):
                    if topic not in failed:
                        tails[topic].append(LogTail(p, ends[(topic, p)], newest.get((topic, p))))
                result.tails.update(tails)
        finally:
            consumer.close()
        return result

    def _newest_timestamps(self, consumer: Consumer, non_empty: dict[tuple[str, int], int], ends: dict,
                           timeout_s: float) -> tuple[dict[tuple[str, int], int], dict[str, str]]:
        """The newest record timestamp of each non-empty partition; and, per topic a partition of which did not
        answer within `timeout_s` or answered with an error, why."""
        if not non_empty:
            return {}, {}
        newest: dict[tuple[str, int], int] = {}
        errors: dict[tuple[str, int], str] = {}
        consumer.assign([TopicPartition(topic, p, end - 1) for (topic, p), end in sorted(non_empty.items())])
        pending = set(non_empty)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                key = (cast(str, message.topic()), cast(int, message.partition()))
                error = message.error()
                if error is None:
                    newest[key] = max(newest.get(key, message.timestamp()[1]), message.timestamp()[1])
                    # A broker whose watermark lags its last batch (Tansu) shows records past it.
                    ends[key] = max(ends[key], cast(int, message.offset()) + 1)
                elif error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(key)
                elif error.fatal() or not error.retriable():
                    errors[key] = error.str()
                    pending.discard(key)
        consumer.unassign()
        why: dict[str, list[str]] = defaultdict(list)
        for topic, p in sorted(pending):
            why[topic].append(str(p))
        reasons = {topic: f"the last records of partition(s) {', '.join(numbers)} did not arrive within {timeout_s:.1f}s"
                   for topic, numbers in why.items()}
        for (topic, p), text in sorted(errors.items()):
            reasons.setdefault(topic, f"reading the last record of partition {p} failed: {text}")
        return newest, reasons
