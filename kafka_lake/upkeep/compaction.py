"""Compaction: rewrite a placement hour's many small files into few large ones, row set unchanged.
"""


from __future__ import annotations

import hashlib
import logging
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_lake.hours import FIRST_HOUR, LAST_HOUR, ONE_HOUR, KafkaHour, hour_key
from kafka_lake.lake import layout
from kafka_lake.lake.compaction_manifest import CompactedFile, CompactionManifest, read_compaction
from kafka_lake.lake.landing_checks import CheckOutcome
from kafka_lake.lake.manifests import ManifestStore, PlacementIndex
from kafka_lake.lake.parquet_output import ParquetOutput
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition, partition_of_path
from kafka_lake.schemas.landed_schema import LandedSchema
from kafka_lake.table_spec import TableSpec
from kafka_lake.upkeep.expiry import is_expired, retention_cutoff
from kafka_lake.upkeep.subjects import ErasedSubjects, accepted_erasures

log = logging.getLogger(__name__)

KEY_COLUMNS = ["_kafka_partition", "_kafka_offset"]


class CompactionNotDue(RuntimeError):
    """Raw hours that can still add rows to the hour have not landed yet."""


@dataclass(frozen=True)
class CompactionTask:
    """One partition (schema version) of a placement hour to rewrite; pickled to a Spark task."""

    topic: TableSpec
    partition: TablePartition
    generation: int
    sources: tuple[str, ...]  # committed raw files and the previous generation's files
    lake_root: str
    target_bytes: int
    # The subjects of accepted erasure requests: their rows are left out (by compaction too, once a request is accepted).
    erased: ErasedSubjects = ErasedSubjects()
    # The landed files whose rows the generation holds, those of the generations before it included (`landed_lineage`).
    lineage: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompactionReport:
    task: CompactionTask
    files: tuple[CompactedFile, ...]
    rows: int
    rows_read: int  # before removing rows a re-landing wrote twice, and erased rows
    rows_erased: int
    source_bytes: int
    offsets_checksum: str
    duration_s: float


@dataclass(frozen=True)
class CompactionResult:
    hour: datetime
    manifests: tuple[CompactionManifest, ...]  # the generations this run wrote and committed
    reports: tuple[CompactionReport, ...]
    deleted_sources: tuple[str, ...]
    up_to_date: tuple[TablePartition, ...]
    # Generations a run that died between their commit and the switch had committed: this run switched readers to them.
    switched: tuple[CompactionManifest, ...] = ()
    kept: tuple[CompactionManifest, ...] = ()  # the generations of partitions already compact, left as they were
    refused: tuple[str, ...] = ()  # generations written that did not hold their sources' rows: not committed, sources kept

    @property
    def generations(self) -> tuple[CompactionManifest, ...]:
        """Every generation readers of the hour are switched to once the run is done."""
        return self.manifests + self.switched + self.kept


def raw_hours_that_feed(topic: TableSpec, hour: datetime) -> list[KafkaHour]:
    """The Kafka hours whose landing can place rows in `hour` within the allowed lateness; none past the last hour
    of the year 9999, where an event time a producer meant as "never" lands."""
    return [KafkaHour(hour + n * ONE_HOUR) for n in range(topic.allowed_lateness_hours + 1)
            if n * ONE_HOUR <= LAST_HOUR - hour]


def missing_raw_hours(topic: TableSpec, hour: datetime, landed: Iterable[KafkaHour]) -> list[KafkaHour]:
    landed = set(landed)
    return [h for h in raw_hours_that_feed(topic, hour) if h not in landed]


def check_due(topic: TableSpec, hour: datetime, manifests: ManifestStore) -> None:
    """Raises `CompactionNotDue` naming the raw hours that can still add rows to placement hour `hour` (one listing of
    the manifests of the hours that feed it, not of the table's)."""
    feeding = raw_hours_that_feed(topic, hour)
    landed = manifests.landed_in(feeding[0], feeding[-1])
    if topic.open_hour_minutes is not None:  # an hour landed in increments so far is still open: it can add rows
        landed = [h for h in landed if (manifest := manifests.read(h)) is not None and manifest.final]
    missing = missing_raw_hours(topic, hour, landed)
    if missing:
        raise CompactionNotDue(
            f"{topic.topic} hour {hour:%Y-%m-%d %H:00}: raw hours {', '.join(map(str, missing))} can still add "
            f"rows (allowed lateness {topic.allowed_lateness_hours} h) and have not landed yet, or not all of them "
            f"(an open hour landed in increments so far)"
        )


def offsets_checksum(keys: pa.Table) -> str:
    """SHA-256 over the sorted (partition, offset) set: equal iff the row sets are equal."""
    ordered = keys.sort_by([(c, "ascending") for c in KEY_COLUMNS])
    digest = hashlib.sha256()
    for column in KEY_COLUMNS:
        values = ordered.column(column).cast(pa.int64()).to_pylist()
        digest.update(struct.pack(f"<{len(values)}q", *values))
    return f"{keys.num_rows}:{digest.hexdigest()}"


def plan_compaction(
    topic: TableSpec, hour: datetime, storage: LakeStorage, target_bytes: int | None = None,
    pii_key: bytes | None = None,
) -> tuple[list[CompactionTask], list[TablePartition]]:
    """Tasks for every partition of `hour` whose committed raw files are not yet in its current generation; each
    leaves out the subjects of every accepted erasure request (`pii_key`: to find pseudonymized ones)."""
    manifests = ManifestStore(storage, topic.database, topic.table)
    check_due(topic, hour, manifests)
    erased = accepted_erasures(storage, topic, pii_key)
    committed = committed_raw_files(storage, topic, manifests, hour)
    tasks, up_to_date = [], []
    for partition in sorted({p for p in (partition_of_path(path) for path in committed) if p is not None}
                            | _compacted_partitions(storage, topic, hour)):
        current = read_compaction(storage, topic.database, topic.table, partition)
        consumed = set(current.sources) if current else set()
        raw = sorted(path for path in committed if partition_of_path(path) == partition)
        fresh = [path for path in raw if path not in consumed]
        if not fresh:
            up_to_date.append(partition)
            continue
        previous = [f.path for f in current.files] if current else []
        tasks.append(CompactionTask(
            topic, partition, (current.generation if current else 0) + 1, tuple(previous + raw),
            storage.root, target_bytes or topic.target_file_mb * 1024 * 1024, erased, landed_lineage(current, raw),
        ))
    return tasks, up_to_date


def landed_lineage(current: CompactionManifest | None, sources: Iterable[str]) -> tuple[str, ...]:
    """The landed files whose rows a new generation holds: those among its sources and those the generation before it
    held (a file compaction or an erasure consumed is gone, and the hour that landed it still names it)."""
    before = set(current.landed_files if current.landed_files is not None else current.sources) if current else set()
    return tuple(sorted({path for path in (*before, *sources) if layout.is_landed_file(path)}))

def committed_raw_files(storage: LakeStorage, topic: TableSpec, manifests: ManifestStore, hour: datetime) -> set[str]:
    """The raw files in `hour`'s folders that a landed manifest owns; in-flight and crashed attempts are not
    committed. Read are the manifests of the raw hours around H and of those the placement index names for H's
    folders (late and early events); all of them only for files neither explains (landed before the index was kept,
    or of an attempt not committed)."""
    folders = [layout.data_directory(topic.database, topic.table, version, hour) for version in topic.version_numbers]
    on_disk = {
        f"{folder}/{name}" for folder in folders for name in storage.list_names(folder)
        if layout.parse_data_file_name(name) is not None
    }
    writers = _writers(storage, topic, hour, folders if on_disk else [])
    committed: set[str] = set()
    for kafka_hour in sorted(writers, key=lambda h: abs(h.start - hour)):
        if committed == on_disk:
            return committed
        manifest = manifests.read(kafka_hour)
        committed.update(f.path for f in (manifest.files if manifest else ()) if f.path in on_disk)
    if committed != on_disk:
        log.warning("%s hour %s: %d file(s) no manifest of the hours around it or in the placement index owns; "
                    "reading every manifest of the table", topic.topic, hour_key(hour), len(on_disk - committed))
        for manifest in manifests.all():
            committed.update(f.path for f in manifest.files if f.path in on_disk)
    return committed


def _writers(storage: LakeStorage, topic: TableSpec, hour: datetime, folders: list[str]) -> set[KafkaHour]:
    """The Kafka hours whose landings can have placed rows in `hour`: those around it within the allowed lateness,
    and those the placement index names for `folders` (late and early events)."""
    index = PlacementIndex(storage, topic.database, topic.table)
    window = set(raw_hours_that_feed(topic, hour)) | ({KafkaHour(hour - ONE_HOUR)} if hour > FIRST_HOUR else set())
    return window | {kafka_hour for folder in folders for kafka_hour in index.writers(folder)}


def rows_placed_in(storage: LakeStorage, topic: TableSpec, hour: datetime) -> tuple[int, list[KafkaHour]]:
    """(rows, the landed hours read): the rows the landed manifests place in placement hour `hour`, as they recorded
    them, whatever storage holds: what an hour without files to compact is checked against."""
    folders = [layout.data_directory(topic.database, topic.table, version, hour) for version in topic.version_numbers]
    manifests = ManifestStore(storage, topic.database, topic.table)
    rows, landed = 0, []
    for kafka_hour in sorted(_writers(storage, topic, hour, folders)):
        manifest = manifests.read(kafka_hour)
        if manifest is not None:
            landed.append(kafka_hour)
            rows += sum(f.rows for f in manifest.files if f.kind == "data" and f.placement_hour == hour)
    return rows, landed


def nothing_to_compact(storage: LakeStorage, topic: TableSpec, hour: datetime, metadata: dict,
                       severity_if_rows: str = "error") -> CheckOutcome:
    """`row_set_unchanged` of a compaction that found no rows to rewrite: it passes when the landed manifests place no
    row in the hour either (a quiet hour, a table of a shared topic whose rows are elsewhere: empty stays empty) or the
    hour has expired, and fails naming the rows they place there otherwise."""
    rows, landed = rows_placed_in(storage, topic, hour)
    read = ", ".join(map(str, landed)) or "none landed"
    if rows and is_expired(hour, retention_cutoff(topic, datetime.now(timezone.utc))):
        return CheckOutcome(True, f"placement hour {hour_key(hour)} of {topic.topic} has expired (retention_days "
                                  f"{topic.retention_days}): retention removed the {rows} row(s) the landed hours "
                                  f"({read}) placed in it", metadata)
    if rows == 0:
        return CheckOutcome(True, f"placement hour {hour_key(hour)} of {topic.topic} holds no row, and the landed hours "
                                  f"that can place rows in it ({read}) place none: nothing to compact, the row set "
                                  "(empty) is unchanged", metadata)
    return CheckOutcome(False, f"examined nothing: placement hour {hour_key(hour)} of {topic.topic} has no generation "
                               f"and no committed file to compact, but the manifests of landed hours {read} place "
                               f"{rows} row(s) in it", metadata, severity=severity_if_rows)


def _compacted_partitions(storage: LakeStorage, topic: TableSpec, hour: datetime) -> set[TablePartition]:
    found = set()
    for version in topic.version_numbers:
        partition = TablePartition(version, hour)
        if storage.exists(partition.compaction_manifest_path(topic.database, topic.table)):
            found.add(partition)
    return found


def compact_partition(task: CompactionTask) -> CompactionReport:
    """Writes the new generation of one partition; the Spark task body. Commits nothing."""
    started = time.monotonic()
    storage = LakeStorage(task.lake_root)
    directory = task.partition.compacted_directory(task.topic.database, task.topic.table, task.generation)
    for leftover in storage.list_files(directory):  # a crashed attempt at this same generation
        storage.delete(leftover.path)
    landed = _LandedAs(task.topic, task.partition.schema_version)
    schema = _sources_schema(storage, task.sources, landed)
    writer = _RollingParquet(storage, directory, task.target_bytes, schema)
    seen_keys: set[int] = set()
    key_tables, rows_read, rows_erased, source_bytes = [], 0, 0, 0
    try:
        for path in task.sources:
            table = _conformed(landed.rows(pq.read_table(storage.full_path(path), filesystem=storage.filesystem)), schema)
            source_bytes += storage.filesystem.get_file_info(storage.full_path(path)).size
            rows_read += table.num_rows
            table, erased = task.erased.without(_without_seen(table, seen_keys))
            rows_erased += erased
            key_tables.append(table.select(KEY_COLUMNS))
            writer.write(table)
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    keys = _concat_keys(key_tables)
    return CompactionReport(task, tuple(files), keys.num_rows, rows_read, rows_erased, source_bytes,
                            offsets_checksum(keys), time.monotonic() - started)


def _without_seen(table: pa.Table, seen: set[int]) -> pa.Table:
    """Drops rows whose (partition, offset) an earlier source already held (a raw hour landed again)."""
    keys = pc.add(
        pc.multiply(table.column("_kafka_partition").cast(pa.int64()), pa.scalar(1 << 40, pa.int64())),
        table.column("_kafka_offset"),
    ).to_pylist()
    fresh = [key not in seen for key in keys]
    seen.update(keys)
    return table if all(fresh) else table.filter(pa.array(fresh))


class _LandedAs:
    """What one schema version's rows land as now (`landed_schema`): files written before the table's columns
    changed, in the version's own columns, are brought to them; files written in the table's columns of an earlier
    catalog take its new columns when the sources' schemas unify."""

    def __init__(self, topic: TableSpec, version: int):
        self._landed = LandedSchema(topic) if topic.schema_versions else None
        self._version = version

    @property
    def columns(self) -> list[pa.Schema]:
        """The table's columns now, which every rewritten file holds: none for a raw table."""
        return [] if self._landed is None else [self._landed.schema_for(self._version)]

    def schema(self, written: pa.Schema) -> pa.Schema:
        """The schema of a file's rows once brought to the table's columns."""
        return self.columns[0] if self._in_own_columns(written) else written

    def rows(self, table: pa.Table) -> pa.Table:
        if self._landed is None or not self._in_own_columns(table.schema):
            return table
        return self._landed.conform(self._version, table)

    def _in_own_columns(self, written: pa.Schema) -> bool:
        if self._landed is None:
            return False
        own = self._landed.own_schema(self._version)
        return written.equals(own) and not written.equals(self._landed.schema_for(self._version))


def _sources_schema(storage: LakeStorage, sources: Iterable[str], landed: _LandedAs) -> pa.Schema | None:
    """One schema holding every source file's rows, led by the table's columns now: files landed by an older release
    may lack a column (the Kafka headers) or declare fields non-nullable, or hold a version's own columns, or the
    table's of an earlier catalog; a column any file has is kept, in the widest type, nullable where any file's is.
    A time of day where the table's column is now a count (Debezium's times, landed as times of day before) is read
    as that count."""
    schemas = [landed.schema(pq.read_schema(storage.full_path(path), filesystem=storage.filesystem)) for path in sources]
    if not schemas:
        return None
    if landed.columns:
        now = landed.columns[0]
        schemas = [pa.schema([f.with_type(_times_as_counts(f.type, now.field(f.name).type)) if f.name in now.names else f
                              for f in schema], metadata=schema.metadata) for schema in schemas]
    return pa.unify_schemas([*landed.columns, *schemas], promote_options="permissive").with_metadata(schemas[0].metadata)


def _times_as_counts(written: pa.DataType, now: pa.DataType) -> pa.DataType:
    """`written`, with each time of day that is an integer in `now` (at the same place) as that integer."""
    if pa.types.is_time(written) and pa.types.is_integer(now):
        return now
    if pa.types.is_struct(written) and pa.types.is_struct(now):
        names = {now.field(i).name: now.field(i).type for i in range(now.num_fields)}
        return pa.struct([field.with_type(_times_as_counts(field.type, names[field.name])) if field.name in names
                          else field for field in written])
    if pa.types.is_list(written) and pa.types.is_list(now):
        return pa.list_(written.value_field.with_type(_times_as_counts(written.value_type, now.value_type)))
    if pa.types.is_map(written) and pa.types.is_map(now):
        return pa.map_(written.key_field, written.item_field.with_type(_times_as_counts(written.item_type, now.item_type)))
    return written


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` in `schema`: its columns cast, the columns it lacks null."""
    if table.schema == schema:
        return table.replace_schema_metadata(schema.metadata)
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


class _RollingParquet:
    """Parquet files of about `target_bytes` each, named part-00000.parquet, part-00001…"""

    def __init__(self, storage: LakeStorage, directory: str, target_bytes: int, schema: pa.Schema | None):
        self.storage, self.directory, self.target_bytes, self.schema = storage, directory, target_bytes, schema
        self.files: list[CompactedFile] = []
        self._current: ParquetOutput | None = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self._current is None:
            path = f"{self.directory}/part-{len(self.files):05d}.parquet"
            self._current = ParquetOutput(self.storage, path, self.schema)
        self._current.write(table, row_group_size=256 * 1024)
        if self._current.bytes_written >= self.target_bytes:
            self._finish()

    def _finish(self) -> None:
        current, self._current = self._current, None
        if current is not None:
            size = current.close()
            self.files.append(CompactedFile(current.path, current.rows, size))

    def close(self) -> list[CompactedFile]:
        self._finish()
        return self.files

    def abort(self) -> None:
        if self._current is not None:
            self._current.abort()


def commit_compaction(storage: LakeStorage, report: CompactionReport) -> CompactionManifest:
    task = report.task
    manifest = CompactionManifest(
        database=task.topic.database,
        table=task.topic.table,
        schema_version=task.partition.schema_version,
        hour=hour_key(task.partition.hour),
        generation=task.generation,
        location=task.partition.compacted_directory(task.topic.database, task.topic.table, task.generation),
        files=report.files,
        sources=task.sources,
        landed_files=task.lineage,
        rows=report.rows,
        offsets_checksum=report.offsets_checksum,
        compacted_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    storage.write_bytes(task.partition.compaction_manifest_path(task.topic.database, task.topic.table), manifest.to_json())
    return manifest


def delete_sources(storage: LakeStorage, manifest: CompactionManifest) -> list[str]:
    """Deletes what the committed generation replaced; safe once readers use its location."""
    return [path for path in replaced_sources(manifest) if storage.delete(path)]


def replaced_sources(manifest: CompactionManifest) -> list[str]:
    """The sources outside the generation's own folder: what it replaced."""
    return [path for path in manifest.sources if not path.startswith(manifest.location + "/")]


Publish = Callable[[list[CompactionManifest]], None]


def compact_hour(
    topic: TableSpec,
    hour: datetime,
    storage: LakeStorage,
    run_tasks: Callable[[list[CompactionTask]], list[CompactionReport]],
    publish: Publish,
    target_bytes: int | None = None,
    pii_key: bytes | None = None,
) -> CompactionResult:
    """Plans, rewrites, commits, publishes (switches readers) and deletes the sources, in that order."""
    unfinished, finished_deletions = _finish_interrupted_swaps(topic, hour, storage, publish)
    tasks, up_to_date = plan_compaction(topic, hour, storage, target_bytes=target_bytes, pii_key=pii_key)
    rewritten = rewrite_generations(storage, tasks, run_tasks, publish)
    written = {m.partition for m in rewritten.manifests}
    switched = tuple(m for m in unfinished if m.partition not in written)
    kept = tuple(m for m in (read_compaction(storage, topic.database, topic.table, p) for p in up_to_date
                             if p not in {s.partition for s in switched}) if m is not None)
    return CompactionResult(hour, tuple(rewritten.manifests), tuple(rewritten.reports),
                            tuple(finished_deletions + rewritten.deleted), tuple(up_to_date), switched, kept,
                            tuple(rewritten.refused))


@dataclass(frozen=True)
class Rewritten:
    """What `rewrite_generations` did: the generations it committed and switched to (with their reports), the sources
    it deleted, and the generations it refused (why, for each), whose sources stay where readers read them."""

    reports: list[CompactionReport]
    manifests: list[CompactionManifest]
    deleted: list[str]
    refused: list[str]


def rewrite_generations(
    storage: LakeStorage,
    tasks: list[CompactionTask],
    run_tasks: Callable[[list[CompactionTask]], list[CompactionReport]],
    publish: Publish,
) -> Rewritten:
    """Writes the new generations, verifies them, commits them, switches readers to them, then deletes what they
    replaced.

    A new generation is written to a hidden folder, verified (its files, read back, hold exactly the offsets its task
    read from the sources, less duplicates and erased rows), committed by its manifest, published by switching the
    catalog partition to it, and only then are its sources deleted: at every moment a catalog reader sees each row
    exactly once, and a crash leaves old or new files. A generation that does not hold them is neither committed nor
    switched to: its files are deleted and its sources stay."""
    reports = run_tasks(tasks) if tasks else []
    held, refused = [], []
    for report in reports:
        found = files_checksum(storage, report.files)
        if found == report.offsets_checksum:
            held.append(report)
            continue
        task = report.task
        refused.append(f"{task.partition} generation {task.generation}: files hold {found}, sources held "
                       f"{report.offsets_checksum}; not switched to, its sources kept")
        log.error("%s %s: the new generation %d does not hold its sources' rows (files hold %s, sources held %s): not "
                  "committed, the sources stay", task.topic.topic, task.partition, task.generation, found,
                  report.offsets_checksum)
        for written in report.files:
            storage.delete(written.path)
    manifests = [commit_compaction(storage, report) for report in held]
    if manifests:
        publish(manifests)
    deleted = [path for manifest in manifests for path in delete_sources(storage, manifest)]
    return Rewritten(held, manifests, deleted, refused)


def _finish_interrupted_swaps(topic: TableSpec, hour: datetime, storage: LakeStorage,
                              publish: Publish) -> tuple[list[CompactionManifest], list[str]]:
    """A crash after the commit left sources behind: publish the committed generation, then delete them. Returns the
    generations switched to and the sources deleted."""
    pending = []
    for partition in _compacted_partitions(storage, topic, hour):
        manifest = read_compaction(storage, topic.database, topic.table, partition)
        if manifest is not None and any(storage.exists(path) for path in replaced_sources(manifest)):
            pending.append(manifest)
    if not pending:
        return [], []
    publish(pending)
    return pending, [path for manifest in pending for path in delete_sources(storage, manifest)]


def generations_hold_their_sources(storage: LakeStorage, topic: TableSpec, result: CompactionResult) -> CheckOutcome:
    """`row_set_unchanged` of a compaction run: every generation the hour's readers are switched to holds exactly the
    offsets recorded from its sources, recomputed from its files: those the run wrote, those it switched to after a
    run that died between their commit and the switch, and those already current; and the run wrote none it had to
    refuse (verified before its switch, its sources kept). A run that found no generation to examine checks the landed
    manifests instead (`nothing_to_compact`)."""
    kinds = ((result.manifests, "written now"), (result.switched, "switched to now (committed by an interrupted run)"),
             (result.kept, "already current"))
    problems = list(result.refused)
    for manifest in result.generations:
        found = generation_checksum(storage, manifest)
        if found != manifest.offsets_checksum:
            problems.append(f"{manifest.partition} generation {manifest.generation}: files hold {found}, "
                            f"sources held {manifest.offsets_checksum}")
    metadata = {"generations": len(result.generations), "written": len(result.manifests),
                "switched": len(result.switched), "already_current": len(result.kept), "refused": len(result.refused)}
    if problems:
        return CheckOutcome(False, "; ".join(problems), metadata)
    if not result.generations:
        return nothing_to_compact(storage, topic, result.hour, metadata)
    counted = ", ".join(f"{len(manifests)} {what}" for manifests, what in kinds if manifests)
    return CheckOutcome(True, f"{len(result.generations)} generation(s) hold exactly their sources' offsets: {counted}",
                        metadata)


def generation_checksum(storage: LakeStorage, manifest: CompactionManifest) -> str:
    """Recomputes the offsets checksum from the generation's files, for the asset check."""
    return files_checksum(storage, manifest.files)


def files_checksum(storage: LakeStorage, files: Iterable[CompactedFile]) -> str:
    """The offsets checksum of what `files` hold, read back from storage."""
    tables = [pq.read_table(storage.full_path(f.path), filesystem=storage.filesystem, columns=KEY_COLUMNS)
              for f in files]
    return offsets_checksum(_concat_keys(tables))


def _concat_keys(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if tables else pa.table({c: pa.array([], pa.int64()) for c in KEY_COLUMNS})
