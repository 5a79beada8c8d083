"""Keeping an Iceberg table: compaction of a placement hour, expiry of old hours, erasure of subjects, expiry of
snapshots with the files only they held, and removal of files no snapshot holds (crashed attempts).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import reduce

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import And, BooleanExpression, EqualTo, In, IsNull, LessThan, LessThanOrEqual, Not, Or
from pyiceberg.manifest import DataFile, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot

from kafka_lake.hours import ONE_HOUR, floor_hour, to_millis
from kafka_lake.lake import layout
from kafka_lake.lake.landing_checks import CheckOutcome
from kafka_lake.lake.layout import PARTITION_COLUMNS
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.tables.iceberg.catalog import lake_relative_path
from kafka_lake.tables.iceberg.commits import ACTION
from kafka_lake.tables.iceberg.files import (
    commit_files,
    files_matching,
    placement_of,
    placements_filter,
    read_rows,
    removed_unless_committed,
    write_rows,
)
from kafka_lake.upkeep.compaction import KEY_COLUMNS, offsets_checksum
from kafka_lake.upkeep.subjects import ErasedSubjects

PLACEMENT = "kafka-lake.placement"
OFFSETS_CHECKSUM = "kafka-lake.offsets-checksum"
CUTOFF = "kafka-lake.cutoff"
SUBJECT_FIELD = "kafka-lake.subject-field"


@dataclass(frozen=True)
class PlacementCompaction:
    partition: TablePartition
    snapshot_id: int | None  # None: the placement hour already was one file (or none)
    files_removed: tuple[str, ...]
    files_added: tuple[str, ...]
    rows: int
    offsets_checksum: str  # over the (partition, offset) set before the rewrite; the rewrite reads back equal


@dataclass(frozen=True)
class TableChange:
    """An expiry or an erasure: what an audit entry records."""

    snapshot_ids: tuple[int, ...]
    partitions: tuple[TablePartition, ...]
    rows: int
    files_removed: tuple[str, ...]
    files_added: tuple[str, ...]


@dataclass(frozen=True)
class SnapshotExpiry:
    snapshot_ids: tuple[int, ...]
    files_deleted: tuple[str, ...]  # data files, manifests and manifest lists no kept snapshot reaches


def compact_placement_hour(table: Table, storage: LakeStorage, partition: TablePartition) -> PlacementCompaction:
    """Rewrites the placement hour's data files into files of the table's target size, in one replace snapshot.
    The row set is unchanged: the offsets checksum of the new files equals that of the old ones, or nothing commits."""
    scope = placements_filter([partition])
    files = files_matching(table, scope)
    rows = read_rows(table, files)
    checksum = offsets_checksum(rows.select(KEY_COLUMNS))
    if len(files) <= 1:
        return PlacementCompaction(partition, None, (), (), rows.num_rows, checksum)
    written = write_rows(table, storage, rows)
    with removed_unless_committed(storage, written):
        rewritten = offsets_checksum(pa.concat_tables(
            pq.read_table(table.io.new_input(f.file_path).open(), columns=KEY_COLUMNS) for f in written))
        if rewritten != checksum:
            raise RuntimeError(f"{table.name()} {partition}: the rewritten files hold offsets {rewritten}, the placement "
                               f"hour {checksum}; nothing was committed")
        committed = commit_files(table, Operation.REPLACE, files, written,
                                 {ACTION: "compact", PLACEMENT: str(partition), OFFSETS_CHECKSUM: checksum}, conflicts=scope)
    return PlacementCompaction(partition, committed.current_snapshot().snapshot_id, tuple(f.file_path for f in files),
                               tuple(f.file_path for f in written), rows.num_rows, checksum)


def compaction_kept_rows(table: Table, snapshot_id: int) -> CheckOutcome:
    """`row_set_unchanged` for a compaction of an Iceberg table: the files its replace snapshot added hold exactly
    the offsets it recorded from the files it removed (recomputed from the added files), and as many rows."""
    snapshot = table.snapshot_by_id(snapshot_id)
    properties = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    if properties.get(ACTION) != "compact":
        return CheckOutcome(False, f"snapshot {snapshot_id} of {table.name()} is no compaction of this platform")
    added = _entries(table, snapshot, ManifestEntryStatus.ADDED)
    keys = [pq.read_table(table.io.new_input(f.file_path).open(), columns=KEY_COLUMNS) for f in added]
    found = offsets_checksum(pa.concat_tables(keys)) if keys else "0:"
    counts = int(properties.get("deleted-records", -1)), int(properties.get("added-records", -2))
    metadata = {"snapshot_id": snapshot_id, "placement": properties.get(PLACEMENT), "rows": counts[1]}
    if found != properties.get(OFFSETS_CHECKSUM) or counts[0] != counts[1]:
        return CheckOutcome(False, f"compaction snapshot {snapshot_id} of {properties.get(PLACEMENT)}: removed "
                                   f"{counts[0]} row(s), added {counts[1]}; offsets {found} recomputed, "
                                   f"{properties.get(OFFSETS_CHECKSUM)} recorded", metadata)
    return CheckOutcome(True, f"compaction of {properties.get(PLACEMENT)} kept its {counts[1]} row(s)", metadata)


def expire_placement_hours(table: Table, cutoff: datetime) -> TableChange:
    """Removes every placement hour that ended at or before `cutoff` (`retention.retention_cutoff`) in one delete
    snapshot, from metadata alone; its files leave storage when the snapshots holding them expire."""
    expired = expired_placements_filter(cutoff)
    files = files_matching(table, expired) if table.current_snapshot() is not None else []
    if not files:
        return TableChange((), (), 0, (), ())
    committed = commit_files(table, Operation.DELETE, files, [], {ACTION: "expire", CUTOFF: cutoff.isoformat()},
                             conflicts=expired)
    return TableChange((committed.current_snapshot().snapshot_id,), tuple(sorted({placement_of(f) for f in files})),
                       sum(f.record_count for f in files), tuple(f.file_path for f in files), ())


def expired_placements_filter(cutoff: datetime) -> BooleanExpression:
    """Rows of the placement hours that ended at or before `cutoff` (`expiry.is_expired`)."""
    last = floor_hour(cutoff - ONE_HOUR)  # the newest expired hour
    date, hour = layout.date_text(last), f"{last:%H}"
    return Or(LessThan(PARTITION_COLUMNS[1], date), And(EqualTo(PARTITION_COLUMNS[1], date),
                                                        LessThanOrEqual(PARTITION_COLUMNS[2], hour)))


def erase_subjects(table: Table, storage: LakeStorage, erased: ErasedSubjects) -> TableChange:
    """Deletes the rows of the subjects (a row any of whose subject paths holds one), copy-on-write, in one overwrite
    snapshot: files holding none stay, files holding only such rows are dropped, the others rewritten without them
    by the platform's writer (`iceberg_files.write_rows`)."""
    if table.current_snapshot() is None or not erased:
        return TableChange((), (), 0, (), ())
    subjects, kept_rows = erased_rows_filter(erased)
    removed, added, rows = [], [], 0
    for data_file in files_matching(table, subjects):  # pruned by the columns' bounds: some may hold none
        kept = read_rows(table, [data_file], kept_rows)
        if kept.num_rows == data_file.record_count:
            continue
        removed.append(data_file)
        added += write_rows(table, storage, kept)
        rows += data_file.record_count - kept.num_rows
    if not removed:
        return TableChange((), (), 0, (), ())
    with removed_unless_committed(storage, added):
        paths = ", ".join(".".join(path) for path, _ in erased.by_column)
        committed = commit_files(table, Operation.OVERWRITE, removed, added, {ACTION: "erase", SUBJECT_FIELD: paths},
                                 conflicts=subjects)
    return TableChange((committed.current_snapshot().snapshot_id,), tuple(sorted({placement_of(f) for f in removed})),
                       rows, tuple(f.file_path for f in removed), tuple(f.file_path for f in added))


def erased_rows_filter(erased: ErasedSubjects) -> tuple[BooleanExpression, BooleanExpression]:
    """(the subjects' rows, the rows kept) as Iceberg filters: a row is a subject's if any path holds one of its values;
    a row without a subject (null there) is nobody's to erase."""
    held = [(".".join(path), sorted(values)) for path, values in erased.by_column if values]
    subjects = reduce(Or, [In(path, values) for path, values in held])
    kept = reduce(And, [Or(Not(In(path, values)), IsNull(path)) for path, values in held])
    return subjects, kept


def expire_snapshots(table: Table, storage: LakeStorage, older_than: datetime) -> SnapshotExpiry:
    """Expires the snapshots older than `older_than` (never the current one) and deletes the files only they
    reached: until then they stay for time travel, rows expired or erased included."""
    current = table.current_snapshot()
    expiring = [s.snapshot_id for s in table.snapshots()
                if s.timestamp_ms < to_millis(older_than) and (current is None or s.snapshot_id != current.snapshot_id)]
    if not expiring:
        return SnapshotExpiry((), ())
    before = _reachable(table, table.snapshots())
    table.maintenance.expire_snapshots().by_ids(expiring).commit()
    table = table.refresh()
    unreachable = sorted(before - _reachable(table, table.snapshots()))
    deleted = []
    for uri in unreachable:
        relative = lake_relative_path(storage, uri)
        if relative is not None and storage.delete(relative):  # never a file outside the lake
            deleted.append(relative)
    return SnapshotExpiry(tuple(expiring), tuple(deleted))


def remove_orphan_files(table: Table, storage: LakeStorage, partitions: Iterable[TablePartition],
                        older_than: datetime) -> list[str]:
    """Deletes the Parquet files in these placement hours' folders that no snapshot of the table holds and that
    were written before `older_than`: files of attempts that crashed before their commit. Files younger than that
    may belong to a landing still running, so `older_than` must lie before the start of any such landing."""
    database, name = table.name()[-2:]
    return remove_unheld_files_in(table, storage, [p.raw_directory(database, name) for p in sorted(set(partitions))],
                                  older_than)


def remove_unheld_files_in(table: Table, storage: LakeStorage, folders: Iterable[str], older_than: datetime) -> list[str]:
    """Deletes the Parquet files in `folders` that no snapshot of the table holds and that were written before
    `older_than` (see `remove_orphan_files`)."""
    old = [stored.path for folder in folders for stored in storage.list_files(folder)
           if stored.path.endswith(".parquet") and stored.modified is not None and stored.modified < older_than]
    return remove_unheld_files(table, storage, old)


def remove_unheld_files(table: Table, storage: LakeStorage, paths: Iterable[str]) -> list[str]:
    """Deletes those of these lake files that no snapshot of the table holds: files of attempts that finished
    writing (a manifest names them) but whose landing never became, or no longer is, the table's."""
    paths = sorted(set(paths))
    if not paths:
        return []
    held = held_files(table, storage)
    return [path for path in paths if path not in held and storage.delete(path)]


def held_files(table: Table, storage: LakeStorage) -> set[str]:
    """The lake paths of every file a snapshot of the table reaches: data files, manifests, manifest lists."""
    return {path for uri in _reachable(table, table.snapshots()) if (path := lake_relative_path(storage, uri)) is not None}


def _reachable(table: Table, snapshots: Iterable[Snapshot]) -> set[str]:
    """Every file these snapshots reach: manifest lists, manifests and the data files live in them."""
    reached: set[str] = set()
    manifests = {}
    for snapshot in snapshots:
        reached.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            manifests[manifest.manifest_path] = manifest
    for path, manifest in manifests.items():
        reached.add(path)
        reached.update(entry.data_file.file_path for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    return reached


def _entries(table: Table, snapshot: Snapshot, status: ManifestEntryStatus) -> list[DataFile]:
    return [entry.data_file
            for manifest in snapshot.manifests(table.io) if manifest.added_snapshot_id == snapshot.snapshot_id
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False)
            if entry.status == status and entry.snapshot_id == snapshot.snapshot_id]
