"""Landing one offset slice: read it in bounded batches, decode, write Parquet per placement.
The body of one Spark task: it reports the files it wrote; only the driver's manifest makes them part of the table.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.decoding.decoded_batch import DEAD_LETTER_SCHEMA, DecodedBatch
from kafka_lake.decoding.formats import schemas_for
from kafka_lake.decoding.key_columns import TOMBSTONE_COLUMN
from kafka_lake.hours import KafkaHour, hour_key
from kafka_lake.kafka.log import KafkaLog
from kafka_lake.kafka.records import kafka_timestamps
from kafka_lake.lake import layout
from kafka_lake.lake.dead_letters import DeadLetterEncryption
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import AttemptJournal, LandedFile
from kafka_lake.lake.parquet_output import ParquetOutput, dictionary_columns, statistics_columns
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.landing_settings import LandingSettings
from kafka_lake.landing.slices import OffsetSlice
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.formats import table_format_type
from kafka_lake.upkeep.subjects import ErasedSubjects

ROW_GROUP_ROWS = 128 * 1024  # rows of a landing file's row group, unless the buffer below fills first
BUFFER_BYTES = 64 * 2**20  # Arrow bytes a task holds for its open files before writing the fullest out
COLLECT_EVERY_BATCHES = 16


@dataclass(frozen=True)
class SliceTask:
    """Everything a Spark task needs to land one slice; pickled to the executor."""

    topic: TableSpec
    hour: KafkaHour
    slice: OffsetSlice
    settings: LandingSettings
    attempt: str = ""  # in the data files' names when the table format wants files of its own per landing
    # The topic's other tables landing the same offsets of the hour: each batch read once, decoded for every table.
    sharing: tuple[TableSpec, ...] = ()
    # Table name → the subjects of accepted erasure requests as it stores them: their rows are left out.
    erasures: dict[str, ErasedSubjects] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class SliceReport:
    slice: OffsetSlice
    counts: LandingCounts
    files: tuple[LandedFile, ...]
    schema_versions: dict[int, int]
    dead_letter_causes: dict[str, int]
    duration_s: float
    unknown_schema_ids: dict[int, int] = field(default_factory=dict)  # schema id the table lacks → its dead letters
    table: str = ""  # `database/table` landed
    decoding_paths: dict[int, str] = field(default_factory=dict)  # version → "columnar" or the record path and why
    shared: tuple[SliceReport, ...] = ()  # the reports of the task's `sharing` tables, from the same read


class PlacementFiles:
    """The open Parquet files of one task, one per placement, at most `max_open` at a time.

    Rows are held per file until a row group's worth (`row_group_rows`) has gathered, so a file is written in
    large row groups however the batches cut it, and a placement that gets a few rows per batch (late events)
    does not make a row group of each. Memory stays bounded: past `buffer_bytes` held in all, the file holding
    the most is written out; past `max_open` files, the least recently used is closed (a backfill spreading
    over many event hours must not open a file per hour).
    """

    def __init__(self, storage: LakeStorage, topic: TableSpec, partition: int, max_open: int,
                 row_group_rows: int = ROW_GROUP_ROWS, buffer_bytes: int = BUFFER_BYTES, attempt: str = "",
                 journal: AttemptJournal | None = None):
        self._storage = storage
        self._attempt = attempt
        self._journal = journal  # told of each folder before a file is opened in it
        self._topic = topic
        self._partition = partition
        self._max_open = max_open
        self._row_group_rows = row_group_rows
        self._buffer_bytes = buffer_bytes
        self._open: OrderedDict[tuple, _OpenFile] = OrderedDict()
        self.closed: list[LandedFile] = []

    def write(self, key: tuple, directory: str, table: pa.Table, schema_version: int | None, hour: datetime,
              kind: str = "data") -> None:
        """Adds rows to the file of `key`; `kind` is the manifest's (`data`, `dead_letter`, `unrouted`)."""
        if table.num_rows == 0:
            return
        current = self._open.get(key)
        if current is None:
            if len(self._open) >= self._max_open:
                _, oldest = self._open.popitem(last=False)
                self.closed.append(oldest.close())
            if self._journal is not None:
                self._journal.record(directory)
            first_offset = table.column("_kafka_offset")[0].as_py()
            # Dead letters belong to no table format: their names stay deterministic.
            name = layout.data_file_name(self._topic.topic, self._partition, first_offset,
                                         self._attempt if kind == "data" else "")
            current = _OpenFile(self._storage, f"{directory}/{name}", kind, self._partition, first_offset,
                                schema_version, hour_key(hour))
            self._open[key] = current
        self._open.move_to_end(key)
        current.add(table)
        if current.pending_rows >= self._row_group_rows:
            current.flush()
        while sum(opened.pending_bytes for opened in self._open.values()) > self._buffer_bytes:
            max(self._open.values(), key=lambda opened: opened.pending_bytes).flush()

    def close_all(self) -> list[LandedFile]:
        while self._open:
            _, oldest = self._open.popitem(last=False)
            self.closed.append(oldest.close())
        return self.closed

    def abort(self) -> None:
        for opened in self._open.values():
            opened.abort()
        self._open.clear()


class _OpenFile:
    """A landing file and its rows not yet written, with what its manifest entry needs. Nothing is written
    before its first row group: the writer's dictionary columns are chosen from those rows."""

    def __init__(self, storage: LakeStorage, path: str, kind: str, partition: int, first_offset: int,
                 schema_version: int | None, hour: str):
        self.storage, self.path, self.kind, self.partition = storage, path, kind, partition
        self.first_offset, self.schema_version, self.hour = first_offset, schema_version, hour
        self._output: ParquetOutput | None = None
        self._pending: list[pa.Table] = []
        self.pending_rows = 0
        self.pending_bytes = 0

    def add(self, table: pa.Table) -> None:
        self._pending.append(table)
        self.pending_rows += table.num_rows
        # The buffers it keeps alive, not just its rows' share: a slice of a larger table holds all of it.
        self.pending_bytes += table.get_total_buffer_size()

    def flush(self) -> None:
        """Writes the rows held as one row group."""
        if not self._pending:
            return
        table = self._pending[0] if len(self._pending) == 1 else pa.concat_tables(self._pending)
        if self._output is None:
            self._output = ParquetOutput(self.storage, self.path, table.schema, dictionary_columns(table),
                                         statistics_columns(table.schema))
        self._output.write(table, row_group_size=table.num_rows)
        self._pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self) -> LandedFile:
        self.flush()
        if self._output is None:
            raise RuntimeError(f"{self.path}: a file is opened by its first rows, and none were added")
        size = self._output.close()
        return LandedFile(self.path, self.kind, self.partition, self.first_offset, self._output.rows, size,
                          self.schema_version, self.hour)

    def abort(self) -> None:
        self._pending = []
        if self._output is not None:
            self._output.abort()


def land_slice(task: SliceTask) -> SliceReport:
    """Reads, decodes and writes one slice: the Spark task body (`spark_jobs.landing_job` runs it in a worker tuned
    for it). Its files are named by topic, partition and first offset."""
    started = time.monotonic()
    piece, settings = task.slice, task.settings
    storage = LakeStorage(settings.lake_root)
    tables = [_TableLanding(table, task, storage) for table in (task.topic, *task.sharing)]
    batches = 0
    try:
        with KafkaLog(settings.kafka_config, task.topic.topic) as kafka_log:
            for records in kafka_log.read_slice_batches(piece.partition, piece.start, piece.end, settings.batch_size):
                for table in tables:
                    table.add(records)
                del records
                batches += 1
                if batches % COLLECT_EVERY_BATCHES == 0:
                    gc.collect()  # reference cycles the batches left, if any
        reports = [table.finish(time.monotonic() - started) for table in tables]
    except BaseException:
        for table in tables:
            table.files.abort()
        raise
    return replace(reports[0], shared=tuple(reports[1:]))


class _TableLanding:
    """One table's share of a slice: its decoder, its open files and its counts."""

    def __init__(self, topic: TableSpec, task: SliceTask, storage: LakeStorage):
        settings = task.settings
        self.topic, self.slice, self.hour = topic, task.slice, task.hour
        self.decoder = BatchDecoder(topic, schemas_for(topic, settings.schema_registry_url), settings.pii_key,
                                    kafka_hour=task.hour)
        self.encryption = DeadLetterEncryption(settings.dead_letter_key) if settings.dead_letter_key else None
        self.files = PlacementFiles(storage, topic, task.slice.partition, settings.max_open_files, attempt=task.attempt,
                                    journal=AttemptJournal(storage, topic.database, topic.table, task.hour))
        self.as_table_holds = _rows_as_table_holds(topic)
        self.erased = task.erasures.get(topic.name, ErasedSubjects())
        self.totals = _Totals()

    def add(self, records) -> None:
        topic, files = self.topic, self.files
        batch = self.decoder.decode(records)
        rows, erased = batch.rows, 0
        if self.erased:
            kept = {placement: self.erased.without(table) for placement, table in batch.rows.items()}
            rows, erased = {placement: table for placement, (table, _) in kept.items()}, sum(n for _, n in kept.values())
        self.totals.add(batch, rows, erased, records.timestamps_ms, self.hour)
        for placement, table in rows.items():
            directory = layout.data_directory(topic.database, topic.table, placement.schema_version, placement.hour)
            files.write(("data", placement), directory, self.as_table_holds(table), placement.schema_version,
                        placement.hour)
        for kind, letters in (("dead_letter", batch.dead_letters), ("unrouted", batch.unrouted)):
            for hour, table in letters.items():
                directory = (layout.dead_letter_directory(topic.database, topic.table, hour) if kind == "dead_letter"
                             else layout.unrouted_directory(topic.topic, hour))
                table = table.cast(DEAD_LETTER_SCHEMA)
                if self.encryption is not None:
                    table = self.encryption.encrypt_table(table)
                files.write((kind, hour), directory, table, None, hour, kind)

    def finish(self, duration_s: float) -> SliceReport:
        totals = self.totals
        return SliceReport(slice=self.slice, counts=totals.counts, files=tuple(self.files.close_all()),
                           schema_versions=dict(totals.schema_versions),
                           dead_letter_causes=dict(totals.dead_letter_causes), duration_s=duration_s,
                           unknown_schema_ids=dict(totals.unknown_schema_ids),
                           table=self.topic.name, decoding_paths=self.decoder.decoding_paths)


def _rows_as_table_holds(topic: TableSpec):
    """Rows as the topic's table format holds them (Iceberg's times are in microseconds)."""
    return table_format_type(topic).landed_rows


@dataclass
class _Totals:
    counts: LandingCounts = LandingCounts()
    schema_versions: Counter = field(default_factory=Counter)
    dead_letter_causes: Counter = field(default_factory=Counter)
    unknown_schema_ids: Counter = field(default_factory=Counter)

    def add(self, batch: DecodedBatch, landed: dict, erased: int, timestamps_ms: Sequence[int], hour: KafkaHour) -> None:
        """`landed`: the batch's rows by placement, those of erased subjects left out (`erased` of them)."""
        self.dead_letter_causes.update(batch.dead_letter_causes)
        self.unknown_schema_ids.update(batch.unknown_schema_ids)
        rows = late = kept_tombstones = 0
        for placement, table in landed.items():
            rows += table.num_rows
            if TOMBSTONE_COLUMN.name in table.column_names:
                kept_tombstones += pc.sum(table.column(TOMBSTONE_COLUMN.name)).as_py() or 0
            self.schema_versions[placement.schema_version] += table.num_rows
            if placement.hour < hour.start:
                late += table.num_rows
        # Over the timestamps that name a time: -1 ("none") or the year 10000 would make the report's range absurd.
        placed = kafka_timestamps(timestamps_ms).drop_null()
        low, high = (value.value for value in pc.min_max(placed).values()) if len(placed) else (None, None)
        self.counts += LandingCounts(
            records=batch.records, rows=rows, tombstones=batch.tombstones, late_events=late,
            dead_letters=sum(table.num_rows for table in batch.dead_letters.values()),
            routed_away=batch.routed_away, unrouted=sum(table.num_rows for table in batch.unrouted.values()),
            kept_tombstones=kept_tombstones, erased=erased,
            min_timestamp_ms=low, max_timestamp_ms=high,
        )
