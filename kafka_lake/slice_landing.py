"""Landing one offset slice: read it in bounded batches, decode, write Parquet per placement.

This is the body of one Spark task. It writes files named by topic, partition and first
offset, and reports what it wrote; only the driver's manifest makes them part of the table.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterator, Sequence

import pyarrow as pa

from kafka_lake import layout
from kafka_lake.avro_arrow import DEAD_LETTER_SCHEMA
from kafka_lake.catalog import TopicSpec
from kafka_lake.dead_letters import DeadLetterEncryption
from kafka_lake.decoding import BatchDecoder, CatalogSchemas, DecodedBatch, RegistrySchemas
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka_log import KafkaLog
from kafka_lake.manifests import LandedFile
from kafka_lake.parquet_output import ParquetOutput
from kafka_lake.slices import OffsetSlice
from kafka_lake.storage import LakeStorage

DEFAULT_BATCH_SIZE = 20_000
DEFAULT_MAX_OPEN_FILES = 16


@dataclass(frozen=True)
class SliceTask:
    """Everything a Spark task needs to land one slice; pickled to the executor."""

    topic: TopicSpec
    hour: KafkaHour
    slice: OffsetSlice
    lake_root: str
    kafka_config: dict = field(repr=False)
    schema_registry_url: str | None = field(default=None, repr=False)  # may carry user:password@
    pii_key: bytes | None = field(default=None, repr=False)
    batch_size: int = DEFAULT_BATCH_SIZE
    max_open_files: int = DEFAULT_MAX_OPEN_FILES
    dead_letter_key: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SliceReport:
    slice: OffsetSlice
    records: int
    rows: int
    dead_letters: int
    tombstones: int
    late_events: int
    files: tuple[LandedFile, ...]
    schema_versions: dict[int, int]
    dead_letter_causes: dict[str, int]
    min_timestamp_ms: int | None
    max_timestamp_ms: int | None
    duration_s: float


class PlacementFiles:
    """The open Parquet files of one task, one per placement, at most `max_open` at a time.

    Closing the least recently used file when the cap is hit keeps memory and file handles
    bounded however many event hours a slice spreads over.
    """

    def __init__(self, storage: LakeStorage, topic: TopicSpec, partition: int, max_open: int):
        self._storage = storage
        self._topic = topic
        self._partition = partition
        self._max_open = max_open
        self._open: OrderedDict[tuple, _OpenFile] = OrderedDict()
        self.closed: list[LandedFile] = []

    def write(self, key: tuple, directory: str, table: pa.Table, schema_version: int | None, hour: datetime) -> None:
        if table.num_rows == 0:
            return
        current = self._open.get(key)
        if current is None:
            if len(self._open) >= self._max_open:
                _, oldest = self._open.popitem(last=False)
                self.closed.append(oldest.close())
            first_offset = table.column("_kafka_offset")[0].as_py()
            name = layout.data_file_name(self._topic.topic, self._partition, first_offset)
            kind = "data" if schema_version is not None else "dead_letter"
            current = _OpenFile(self._storage, f"{directory}/{name}", table.schema, kind, self._partition,
                                first_offset, schema_version, layout.hour_directory(hour))
            self._open[key] = current
        self._open.move_to_end(key)
        current.write(table)

    def close_all(self) -> list[LandedFile]:
        while self._open:
            _, oldest = self._open.popitem(last=False)
            self.closed.append(oldest.close())
        return self.closed

    def abort(self) -> None:
        for opened in self._open.values():
            opened.abort()
        self._open.clear()


class _OpenFile(ParquetOutput):
    """A landing file, with what its manifest entry needs."""

    def __init__(self, storage, path, schema, kind, partition, first_offset, schema_version, hour):
        super().__init__(storage, path, schema)
        self.kind, self.partition = kind, partition
        self.first_offset, self.schema_version, self.hour = first_offset, schema_version, hour

    def close(self) -> LandedFile:
        size = super().close()
        return LandedFile(self.path, self.kind, self.partition, self.first_offset, self.rows, size,
                          self.schema_version, self.hour)


def land_slice(task: SliceTask) -> SliceReport:
    """Reads, decodes and writes one slice; the Spark task body."""
    with _startup_objects_frozen():
        return _land(task)


@contextmanager
def _startup_objects_frozen() -> Iterator[None]:
    """Keeps the objects alive before the task (pyarrow's, polars', Spark's: about a million) out of the garbage
    collector's sweeps while it runs. Every consumed message is a tracked object, and the full collections they
    trigger otherwise walk that whole heap again and again: ~10 % of the task's CPU. Thawed after, so none stays."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _land(task: SliceTask) -> SliceReport:
    started = time.monotonic()
    topic, piece = task.topic, task.slice
    storage = LakeStorage(task.lake_root)
    schemas = RegistrySchemas(topic, task.schema_registry_url) if task.schema_registry_url else CatalogSchemas(topic)
    decoder = BatchDecoder(topic, schemas, task.pii_key)
    encryption = DeadLetterEncryption(task.dead_letter_key) if task.dead_letter_key else None
    files = PlacementFiles(storage, topic, piece.partition, task.max_open_files)
    totals = _Totals()
    try:
        with KafkaLog(task.kafka_config, topic.topic) as kafka_log:
            for records in kafka_log.read_slice_batches(piece.partition, piece.start, piece.end, task.batch_size):
                batch = decoder.decode(records)
                totals.add(batch, records.timestamps_ms, task.hour)
                for placement, table in batch.rows.items():
                    directory = layout.data_directory(topic.database, topic.table, placement.schema_version, placement.hour)
                    files.write(("data", placement), directory, table, placement.schema_version, placement.hour)
                for hour, table in batch.dead_letters.items():
                    directory = layout.dead_letter_directory(topic.database, topic.table, hour)
                    table = table.cast(DEAD_LETTER_SCHEMA)
                    if encryption is not None:
                        table = encryption.encrypt_table(table)
                    files.write(("dead", hour), directory, table, None, hour)
        written = files.close_all()
    except BaseException:
        files.abort()
        raise
    return SliceReport(
        slice=piece,
        records=totals.records,
        rows=totals.rows,
        dead_letters=totals.dead_letters,
        tombstones=totals.tombstones,
        late_events=totals.late_events,
        files=tuple(written),
        schema_versions=dict(totals.schema_versions),
        dead_letter_causes=dict(totals.dead_letter_causes),
        min_timestamp_ms=totals.min_timestamp_ms,
        max_timestamp_ms=totals.max_timestamp_ms,
        duration_s=time.monotonic() - started,
    )


@dataclass
class _Totals:
    records: int = 0
    rows: int = 0
    dead_letters: int = 0
    tombstones: int = 0
    late_events: int = 0
    schema_versions: Counter = field(default_factory=Counter)
    dead_letter_causes: Counter = field(default_factory=Counter)
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None

    def add(self, batch: DecodedBatch, timestamps_ms: Sequence[int], hour: KafkaHour) -> None:
        self.records += batch.records
        self.tombstones += batch.tombstones
        self.dead_letter_causes.update(batch.dead_letter_causes)
        self.dead_letters += sum(table.num_rows for table in batch.dead_letters.values())
        for placement, table in batch.rows.items():
            self.rows += table.num_rows
            self.schema_versions[placement.schema_version] += table.num_rows
            if placement.hour < hour.start:
                self.late_events += table.num_rows
        low, high = min(timestamps_ms), max(timestamps_ms)
        self.min_timestamp_ms = low if self.min_timestamp_ms is None else min(self.min_timestamp_ms, low)
        self.max_timestamp_ms = high if self.max_timestamp_ms is None else max(self.max_timestamp_ms, high)
