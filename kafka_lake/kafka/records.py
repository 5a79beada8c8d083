"""Kafka records as the log reader hands them over, one at a time or a batch as columns, and the lake's own
`_kafka_*` columns built from them: every row and every dead letter carries them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import pyarrow as pa

from kafka_lake.event_time import END_SECOND

Headers = Sequence[tuple[str, bytes | None]]  # as confluent-kafka hands them: (key, value) pairs

KAFKA_HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
# Every column, struct field, list item and map value is written nullable, whatever Avro says: a reader unifying
# the files of two schema versions fills a field one version lacks with nulls, which a non-nullable field refuses.
KAFKA_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("_kafka_topic", pa.string()),
    pa.field("_kafka_partition", pa.int32()),
    pa.field("_kafka_offset", pa.int64()),
    pa.field("_kafka_timestamp", pa.timestamp("ms", tz="UTC")),
    pa.field("_kafka_key", pa.binary()),
    pa.field("_kafka_headers", KAFKA_HEADERS_TYPE),  # null when the record has none
)


@dataclass(frozen=True)
class KafkaRecord:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None  # None: a tombstone
    headers: Headers | None = None


@dataclass(frozen=True)
class KafkaBatch:
    """A batch of one topic's records as columns, the way the log reader hands them over: no object per record."""

    partitions: Sequence[int]
    offsets: Sequence[int]
    timestamps_ms: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]  # None: a tombstone
    headers: Sequence[Headers | None] | None = None  # None: no record has any

    @classmethod
    def of(cls, records: Sequence[KafkaRecord]) -> KafkaBatch:
        ordered = sorted(records, key=attrgetter("partition", "offset"))
        return cls(
            [r.partition for r in ordered], [r.offset for r in ordered], [r.timestamp_ms for r in ordered],
            [r.key for r in ordered], [r.value for r in ordered], [r.headers for r in ordered],
        )

    def __len__(self) -> int:
        return len(self.offsets)

    def record(self, index: int) -> KafkaRecord:
        return KafkaRecord(self.partitions[index], self.offsets[index], self.timestamps_ms[index], self.keys[index],
                           self.values[index], self.headers[index] if self.headers is not None else None)

    def take(self, indices: Sequence[int]) -> KafkaBatch:
        """The records at `indices`, in that order."""
        picked = [int(i) for i in indices]
        return KafkaBatch([self.partitions[i] for i in picked], [self.offsets[i] for i in picked],
                          [self.timestamps_ms[i] for i in picked], [self.keys[i] for i in picked],
                          [self.values[i] for i in picked],
                          None if self.headers is None else [self.headers[i] for i in picked])

    def in_log_order(self) -> KafkaBatch:
        partitions, offsets = np.asarray(self.partitions, dtype=np.int64), np.asarray(self.offsets, dtype=np.int64)
        if len(offsets) < 2 or bool(np.all((partitions[1:] > partitions[:-1]) | (
                (partitions[1:] == partitions[:-1]) & (offsets[1:] > offsets[:-1])))):
            return self
        return KafkaBatch.of([self.record(i) for i in range(len(self))])


class BatchPositions:
    """Where the rows of a decoded table sit in their batch (in log order), by their partition and offset."""

    def __init__(self, batch: KafkaBatch):
        self._partitions = np.asarray(batch.partitions, dtype=np.int64)
        self._offsets = np.asarray(batch.offsets, dtype=np.int64)

    def of(self, table: pa.Table) -> np.ndarray:
        partitions = table.column("_kafka_partition").to_numpy().astype(np.int64)
        offsets = table.column("_kafka_offset").to_numpy()
        positions = np.empty(len(offsets), dtype=np.int64)
        for partition in np.unique(partitions):
            first, last = np.searchsorted(self._partitions, [partition, partition + 1])
            rows = partitions == partition
            positions[rows] = first + np.searchsorted(self._offsets[first:last], offsets[rows])
        return positions


def names_an_hour(timestamps_ms):
    """Whether a Kafka timestamp (or each of an array) places a record in an hour: [1970, 10000). Kafka itself
    refuses negative timestamps but -1, its "none"; producers' clocks and clients can still send anything."""
    return (timestamps_ms >= 0) & (timestamps_ms < END_SECOND * 1000)


def kafka_timestamps(timestamps_ms: Sequence[int]) -> pa.Array:
    """The `_kafka_timestamp` column: null where the Kafka timestamp names no time a timestamp column holds (-1 for
    none, another negative, the year 10000 or later)."""
    millis = np.asarray(timestamps_ms, dtype=np.int64)
    placeable = names_an_hour(millis)
    return pa.array(millis, pa.int64(), mask=None if placeable.all() else ~placeable).view(pa.timestamp("ms", tz="UTC"))


def kafka_headers(headers: Sequence[Headers | None] | None, count: int) -> pa.Array:
    """The `_kafka_headers` column: each record's (key, value) pairs in order, null when it has none."""
    if headers is None or not any(headers):
        return pa.nulls(count, KAFKA_HEADERS_TYPE)
    return pa.array([pairs or None for pairs in headers], KAFKA_HEADERS_TYPE)


def kafka_columns(topic: str, records: Sequence[KafkaRecord]) -> list[pa.Array]:
    """The `_kafka_*` columns of some records, in `KAFKA_COLUMNS` order."""
    return [pa.array([topic] * len(records), pa.string()),
            *_partition_to_headers([r.partition for r in records], [r.offset for r in records],
                                   [r.timestamp_ms for r in records], [r.key for r in records],
                                   [r.headers for r in records])]


class KafkaColumns:
    """The `_kafka_*` columns of a batch, built once, from which each table takes its rows."""

    def __init__(self, topic: str, batch: KafkaBatch):
        self._topic = topic
        self._columns = _partition_to_headers(batch.partitions, batch.offsets, batch.timestamps_ms, batch.keys,
                                              batch.headers)

    def take(self, indices: np.ndarray) -> list[pa.Array]:
        picks = pa.array(indices, pa.int64())
        return [pa.repeat(pa.scalar(self._topic, pa.string()), len(indices)), *(column.take(picks) for column in self._columns)]


def _partition_to_headers(partitions: Sequence[int], offsets: Sequence[int], timestamps_ms: Sequence[int],
                          keys: Sequence[bytes | None], headers: Sequence[Headers | None] | None) -> list[pa.Array]:
    """The `_kafka_*` columns after `_kafka_topic`."""
    return [
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
        kafka_timestamps(timestamps_ms),
        pa.array(keys, pa.binary()),
        kafka_headers(headers, len(offsets)),
    ]
