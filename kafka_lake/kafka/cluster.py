"""The Kafka cluster as the platform's sensors see it: which topics exist, and the tail of every
partition's log, for many topics at once in a few batched requests rather than one per partition.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
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



class KafkaCluster:
    """Read-only questions about the whole cluster, through one consumer that never commits."""

    def __init__(self, config: dict):
        # One fetch brings every partition's tail: let the broker fill it rather than answer
        # partition by partition (the landing's 2 ms suits single-record probes, not thousands of partitions).
        self._config = {**config, "enable.partition.eof": True, "auto.offset.reset": "latest", "fetch.wait.max.ms": 500}

    def topics(self) -> dict[str, list[int]]:
        """Every topic on the cluster and its partitions, from one metadata request."""
        consumer = Consumer(self._config)
        try:
            metadata = consumer.list_topics(timeout=_TIMEOUT_S)
        except KafkaException as error:
            raise KafkaUnavailable(f"cannot read the cluster's topic list: {error}") from None
        finally:
            consumer.close()
        return {name: sorted(t.partitions) for name, t in metadata.topics.items() if t.error is None}

    def log_ends(self, partitions: dict[str, list[int]]) -> dict[tuple[str, int], int]:
        """Every partition's high watermark, from batched ListOffsets requests, all sent before any answer is awaited."""
        admin = AdminClient(self._config)
        wanted = [TopicPartition(topic, p) for topic, numbers in partitions.items() for p in numbers]
        futures = {}
        # The client's cost grows faster than the partitions of one call: 16,000 partitions take two to four times as
        # long in one call as in calls of a thousand (bench/RESULTS.md, "Metrics scrapes").
        for first in range(0, len(wanted), _PARTITIONS_PER_LIST_OFFSETS):
            futures.update(admin.list_offsets(
                {tp: OffsetSpec.latest() for tp in wanted[first:first + _PARTITIONS_PER_LIST_OFFSETS]},
                request_timeout=_TIMEOUT_S,
            ))
        try:
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        except KafkaException as error:
            raise KafkaUnavailable(f"cannot read the log ends of {len(futures)} partition(s): {error}") from None

    def log_tails(self, partitions: dict[str, list[int]]) -> dict[str, list[LogTail]]:
        """Per topic, each partition's log end and newest record timestamp: the ends in one request,
        then one fetch over every non-empty partition from its last offset."""
        if not any(partitions.values()):
            return {}
        ends = self.log_ends(partitions)
        newest = self._newest_timestamps({key: end for key, end in ends.items() if end > 0}, ends)
        tails = defaultdict(list)
        for topic, p in sorted(ends):
            tails[topic].append(LogTail(p, ends[(topic, p)], newest.get((topic, p))))
        return dict(tails)

    def _newest_timestamps(self, non_empty: dict[tuple[str, int], int], ends: dict) -> dict[tuple[str, int], int]:
        if not non_empty:
            return {}
        consumer = Consumer(self._config)
        newest: dict[tuple[str, int], int] = {}
        try:
            consumer.assign([TopicPartition(topic, p, end - 1) for (topic, p), end in sorted(non_empty.items())])
            pending = set(non_empty)
            deadline = time.monotonic() + _TIMEOUT_S
            while pending:
                if time.monotonic() > deadline:
                    example = ", ".join(f"{t}[{p}]" for t, p in sorted(pending)[:5])
                    raise KafkaUnavailable(
                        f"the last records of {len(pending)} partition(s) did not arrive within {_TIMEOUT_S:.0f}s (e.g. {example})"
                    )
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
                        raise KafkaUnavailable(f"{message.topic()}[{message.partition()}]: {error.str()}")
        finally:
            consumer.close()
        return newest
