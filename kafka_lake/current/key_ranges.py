"""Copy-on-write by key range: each data file of a current-state table holds the rows of one range of keys, sorted;
changes rewrite only the files whose ranges hold their keys, in one snapshot.
"""

from __future__ import annotations

import logging
import time
import uuid
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    GreaterThanOrEqual,
    LessThanOrEqual,
    Or,
)
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from kafka_lake.current.changes import CHANGE, DELETES, SOURCE, TABLE_ROW, newest_per_key, with_source
from kafka_lake.current.state_table import FILE_BYTES, data_directory, key_names
from kafka_lake.lake.parquet_output import ParquetOutput, dictionary_columns, statistics_columns
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.iceberg.files import (
    REWRITE_ROW_GROUP_ROWS,
    commit_files,
    files_matching,
    read_rows,
    removed_unless_committed,
    rows_schema,
    unpartitioned_data_file,
)

log = logging.getLogger(__name__)

# A merge that met another commit of its key ranges is planned again on the new table, this many times at most.
MERGE_ATTEMPTS = 8


@dataclass(frozen=True)
class RangeFile:
    """A data file and its range of keys: the bounds of the first key column, as `ordering_values` gives them."""

    data_file: DataFile
    low: Any
    high: Any


@dataclass(frozen=True)
class RangeRewrite:
    """What a copy-on-write change did to the table."""

    snapshot_id: int | None  # None: no file needed a change
    inserts: int
    updates: int
    deletes: int
    files_removed: tuple[str, ...]
    files_added: tuple[str, ...]
    bytes_read: int  # of the files rewritten
    bytes_written: int
    rows: int  # the table's rows afterwards
    attempts: int
    duration_s: float


def range_files(table: Table, first_key: str) -> list[RangeFile]:
    """The current snapshot's data files ordered by their ranges; metadata only."""
    if table.current_snapshot() is None:
        return []
    field = table.schema().find_field(first_key)
    found = []
    for data_file in files_matching(table, AlwaysTrue()):
        try:
            low = from_bytes(field.field_type, data_file.lower_bounds[field.field_id])
            high = from_bytes(field.field_type, data_file.upper_bounds[field.field_id])
        except KeyError:
            raise ValueError(f"{table.name()}: data file {data_file.file_path} has no bounds of its key column "
                             f"{first_key}: it was not written by this platform") from None
        found.append(RangeFile(data_file, low, high))
    return sorted(found, key=lambda f: f.low)


def ordering_values(column: pa.ChunkedArray | pa.Array) -> list:
    """A key column's values as Iceberg's bounds hold them: dates as days, times and timestamps as microseconds."""
    kind = column.type
    if pa.types.is_date(kind):
        column = column.cast(pa.date32()).cast(pa.int32())
    elif pa.types.is_timestamp(kind):
        column = column.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64())
    elif pa.types.is_time(kind):
        column = column.cast(pa.time64("us")).cast(pa.int64())
    return column.to_pylist()


# Each data file of a current-state table holds the rows of one range of keys, sorted, its
# bounds the range (the key columns' bounds in the table's metadata). Changes are matched to the files whose ranges
# hold their keys; only those files are read and rewritten, in one snapshot that fails if another commit touched the
# same ranges meanwhile (then the work is planned again on the table as it is).
def merge_by_key_range(table: Table, storage: LakeStorage, topic: TableSpec, changes: pa.Table,
                       summary: dict[str, str]) -> RangeRewrite:
    """Applies `changes` (candidates of `SOURCE` `CHANGE` or `LATER_DELETION`, one per key) to the files holding their
    keys: a key's row becomes the newest of its row and its change, or goes when that deletes it."""
    return _with_retries(table, lambda current: _merge_once(current, storage, topic, changes, summary))


def rewrite_keeping(table: Table, storage: LakeStorage, topic: TableSpec, matching: BooleanExpression,
                    kept: BooleanExpression, summary: dict[str, str]) -> RangeRewrite:
    """Removes the rows `matching` (an erasure): the files that may hold one are rewritten with only their `kept`
    rows, the others stay."""
    return _with_retries(table, lambda current: _remove_once(current, storage, topic, matching, kept, summary))


def _with_retries(table: Table, attempt_on: Callable[[Table], RangeRewrite]) -> RangeRewrite:
    started = time.monotonic()
    for attempt in range(1, MERGE_ATTEMPTS + 1):
        try:
            done = attempt_on(table if attempt == 1 else table.refresh())
            return _finished(done, attempt, started)
        # A file gone or replaced, or one added in the ranges: another merge committed first.
        except (ValidationException, CommitFailedException, FileNotFoundError) as conflict:
            if attempt == MERGE_ATTEMPTS:
                raise
            log.warning("%s: the change met another commit of its key ranges (%s); planning it again", table.name(),
                        conflict)
    raise AssertionError("unreachable")


def _finished(done: RangeRewrite, attempts: int, started: float) -> RangeRewrite:
    return RangeRewrite(done.snapshot_id, done.inserts, done.updates, done.deletes, done.files_removed, done.files_added,
                        done.bytes_read, done.bytes_written, done.rows, attempts, round(time.monotonic() - started, 3))


def _merge_once(table: Table, storage: LakeStorage, topic: TableSpec, changes: pa.Table,
                summary: dict[str, str]) -> RangeRewrite:
    keys = key_names(topic)
    files = range_files(table, keys[0])
    lows = [f.low for f in files]
    by_file: dict[int, list[int]] = defaultdict(list)
    # A key below every range goes to the first file, one between two ranges to the lower one: ranges stay apart.
    for position, value in enumerate(ordering_values(changes.column(keys[0]))):
        by_file[max(bisect_right(lows, value) - 1, 0)].append(position)
    counts = np.zeros(3, dtype=np.int64)  # inserts, updates, deletes
    removed: list[DataFile] = []
    kept: list[pa.Table] = []
    absorbed: set[int] = set()
    for index in sorted(by_file):
        if index in absorbed:
            continue
        held = files[index] if files else None
        existing = read_rows(table, [held.data_file]) if held is not None else rows_schema(table).empty_table()
        # Permissive: a column added to the table since the changes were read is null in them.
        candidates = pa.concat_tables([with_source(existing, TABLE_ROW, False),
                                       changes.take(pa.array(by_file[index], pa.int64()))], promote_options="permissive")
        newest, present = newest_per_key(candidates, keys)
        source, deletes = newest.column(SOURCE).to_numpy(), newest.column(DELETES).to_numpy(zero_copy_only=False)
        changed = np.array([((source == CHANGE) & ~deletes & ~present[TABLE_ROW]).sum(),
                            ((source == CHANGE) & ~deletes & present[TABLE_ROW]).sum(),
                            (deletes & present[TABLE_ROW]).sum()])
        if not changed.any():
            continue  # every change older than its key's row, or already applied: the file stays as it is
        counts += changed
        rows = newest.filter(pa.array(~deletes)).drop_columns([SOURCE, DELETES])
        if held is not None:
            removed.append(held.data_file)
        # A file left small joins a small next file that no change touched: rewrites keep the files few.
        neighbour = index + 1
        if (neighbour < len(files) and neighbour not in by_file
                and max(rows.num_rows, files[neighbour].data_file.record_count) < _rows_per_file(rows) // 2):
            rows = pa.concat_tables([rows, read_rows(table, [files[neighbour].data_file])])
            removed.append(files[neighbour].data_file)
            absorbed.add(neighbour)
        kept.append(rows)
    if not removed and not kept:
        return _unchanged(table)
    added = [data_file for rows in kept for data_file in _write_range_files(table, storage, topic, rows)]
    inserts, updates, deletes_count = (int(n) for n in counts)
    return _commit(table, storage, topic, removed, added, summary, inserts, updates, deletes_count)


def _remove_once(table: Table, storage: LakeStorage, topic: TableSpec, matching: BooleanExpression,
                 kept: BooleanExpression, summary: dict[str, str]) -> RangeRewrite:
    if table.current_snapshot() is None:
        return _unchanged(table)
    removed, added, gone = [], [], 0
    for data_file in files_matching(table, matching):  # pruned by bounds: some may hold none
        remaining = read_rows(table, [data_file], kept)
        if remaining.num_rows == data_file.record_count:
            continue
        removed.append(data_file)
        gone += data_file.record_count - remaining.num_rows
        added += _write_range_files(table, storage, topic, remaining)
    if not removed:
        return _unchanged(table)
    return _commit(table, storage, topic, removed, added, summary, 0, 0, gone)


def _unchanged(table: Table) -> RangeRewrite:
    snapshot = table.current_snapshot()
    rows = int(snapshot.summary["total-records"]) if snapshot is not None and snapshot.summary else 0
    return RangeRewrite(None, 0, 0, 0, (), (), 0, 0, rows, 1, 0.0)


def _commit(table: Table, storage: LakeStorage, topic: TableSpec, removed: list[DataFile], added: list[DataFile],
            summary: dict[str, str], inserts: int, updates: int, deletes: int) -> RangeRewrite:
    first = key_names(topic)[0]
    field = table.schema().find_field(first)
    # The ranges of the files removed and added: a commit adding or removing files there since this one was planned
    # fails it, and pyiceberg's own retry of a commit that raced another re-checks them.
    conflicts: BooleanExpression = AlwaysFalse()
    for data_file in [*removed, *added]:
        low = from_bytes(field.field_type, data_file.lower_bounds[field.field_id])
        high = from_bytes(field.field_type, data_file.upper_bounds[field.field_id])
        conflicts = Or(conflicts, And(GreaterThanOrEqual(first, low), LessThanOrEqual(first, high)))
    with removed_unless_committed(storage, added):
        committed = commit_files(table, Operation.OVERWRITE if removed else Operation.APPEND, removed, added, summary,
                                 conflicts)
    snapshot = committed.current_snapshot()
    return RangeRewrite(
        snapshot_id=snapshot.snapshot_id,
        inserts=inserts, updates=updates, deletes=deletes,
        files_removed=tuple(f.file_path for f in removed), files_added=tuple(f.file_path for f in added),
        bytes_read=sum(f.file_size_in_bytes for f in removed), bytes_written=sum(f.file_size_in_bytes for f in added),
        rows=int(snapshot.summary["total-records"]) if snapshot.summary else 0, attempts=1, duration_s=0.0,
    )


def _rows_per_file(rows: pa.Table) -> int:
    return max(1, FILE_BYTES * rows.num_rows // max(rows.nbytes, 1)) if rows.num_rows else 1


def _write_range_files(table: Table, storage: LakeStorage, topic: TableSpec, rows: pa.Table) -> list[DataFile]:
    """`rows` (sorted by key) as files of about `FILE_BYTES` each; a run of keys sharing their first column stays in
    one file, so every range is its own."""
    if rows.num_rows == 0:
        return []
    keys = key_names(topic)
    cuts = _range_cuts(rows.column(keys[0]), _rows_per_file(rows))
    schema = rows_schema(table)
    statistics = [*statistics_columns(schema), *(name for name in keys if name not in statistics_columns(schema))]
    written = []
    for start, end in zip([0, *cuts], [*cuts, rows.num_rows]):
        chunk = rows.slice(start, end - start).cast(schema)
        path = f"{data_directory(topic)}/{uuid.uuid4().hex}.parquet"
        output = ParquetOutput(storage, path, schema, dictionary_columns(chunk), statistics)
        try:
            output.write(chunk, row_group_size=REWRITE_ROW_GROUP_ROWS)
        except BaseException:
            output.abort()
            raise
        output.close()
        written.append(unpartitioned_data_file(table, storage, path))
    return written


def _range_cuts(first_key: pa.ChunkedArray, rows_per_file: int) -> list[int]:
    """Where to cut sorted rows into files of about `rows_per_file`, never between two rows of one first key value."""
    cuts, count = [], len(first_key)
    cut = rows_per_file
    while cut < count:
        while cut < count and first_key[cut] == first_key[cut - 1]:
            cut += 1
        if cut < count:
            cuts.append(cut)
        cut += rows_per_file
    return cuts
