"""Data files of an Iceberg table: a landed Parquet file described as one, rows written as new ones, the
files a snapshot holds, and the single-snapshot commits every change of the platform makes.
"""


from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.expressions import AlwaysFalse, And, BooleanExpression, EqualTo, GreaterThanOrEqual, LessThan, Or
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import (
    MetricModeTypes,
    MetricsMode,
    StatisticsCollector,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    expression_to_pyarrow,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _MergeAppendFiles, _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT, Record

from kafka_lake.lake import layout
from kafka_lake.lake.layout import PARTITION_COLUMNS
from kafka_lake.lake.manifests import LandedFile
from kafka_lake.lake.parquet_output import ParquetOutput, dictionary_columns, statistics_columns
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition, partition_of_path
from kafka_lake.tables.iceberg.catalog import lake_file_uri, lake_relative_path

FOOTER_READERS = 8  # footers read at once: on S3 each is a round trip or two
REWRITE_ROW_GROUP_ROWS = 128 * 1024  # as a landing file's row groups


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one Kafka partition: the rows a Kafka hour's landing owns."""

    partition: int
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.partition}:[{self.start},{self.end})"


def landed_data_files(table: Table, storage: LakeStorage, landed: Sequence[LandedFile]) -> list[DataFile]:
    """The Iceberg description of landed data files, their footers read a few at a time."""
    with ThreadPoolExecutor(max_workers=FOOTER_READERS) as pool:
        return list(pool.map(lambda file: landed_data_file(table, storage, file), landed))


def landed_data_file(table: Table, storage: LakeStorage, landed: LandedFile) -> DataFile:
    if landed.kind != "data":
        raise ValueError(f"{storage.uri(landed.path)} is a dead letter file, no data file")
    return data_file_of(table, storage, landed.path)


def data_file_of(table: Table, storage: LakeStorage, path: str) -> DataFile:
    """The Iceberg description of a Parquet file the platform wrote into a placement folder (lake-relative `path`).

    A landed file joins the table as it lies: its statistics are read from its footer, its partition tuple from its
    `schema_version=/date=/hour=` folders, which are also recorded as the bounds of those columns (every row of the
    file holds them), so metrics-based pruning and deletes work on the placement columns as on any other."""
    partition = partition_of_path(path)
    if partition is None:
        raise ValueError(f"{storage.uri(path)} is no data file in a schema_version=/date=/hour= folder")
    return _described(table, storage, path, placement_values(partition))


def unpartitioned_data_file(table: Table, storage: LakeStorage, path: str) -> DataFile:
    """The Iceberg description of a Parquet file the platform wrote for an unpartitioned table (a current-state
    table's)."""
    return _described(table, storage, path, {})


def _described(table: Table, storage: LakeStorage, path: str, values: dict[str, object]) -> DataFile:
    """A data file from its footer's statistics; `values`: its identity partition tuple, also recorded as those
    columns' bounds."""
    metadata = pq.read_metadata(storage.full_path(path), filesystem=storage.filesystem)
    schema = table.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        metadata, _statistics_plan(table, metadata), parquet_path_to_id_mapping(schema)
    ).to_serialized_dict()
    for name, value in values.items():
        field = schema.find_field(name)
        statistics["lower_bounds"][field.field_id] = statistics["upper_bounds"][field.field_id] = to_bytes(field.field_type, value)
        statistics["value_counts"][field.field_id] = metadata.num_rows
        statistics["null_value_counts"][field.field_id] = 0
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=lake_file_uri(storage, path),
        file_format=FileFormat.PARQUET,
        partition=Record(*values.values()),
        file_size_in_bytes=storage.filesystem.get_file_info(storage.full_path(path)).size,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **statistics,
    )
    data_file.spec_id = table.metadata.default_spec_id  # not a field of the file's entry: from_args drops it
    return data_file


def _statistics_plan(table: Table, metadata: pq.FileMetaData) -> dict[int, StatisticsCollector]:
    """The table's metrics plan, without bounds for the columns the landing writes no statistics for (strings and
    bytes: they prune nothing there, `parquet_output.statistics_columns`)."""
    plan = compute_statistics_plan(table.schema(), table.metadata.properties)
    mapping = parquet_path_to_id_mapping(table.schema())
    if metadata.num_row_groups:
        first = metadata.row_group(0)
        for position in range(metadata.num_columns):
            column = first.column(position)
            if not column.is_stats_set:
                field_id = mapping[column.path_in_schema]
                kept = plan[field_id]
                plan[field_id] = StatisticsCollector(field_id, kept.iceberg_type, MetricsMode(MetricModeTypes.NONE),
                                                     kept.column_name)
    return plan


def placement_values(partition: TablePartition) -> dict[str, object]:
    """The partition tuple of a placement, in the spec's order."""
    values = partition.values()
    return {name: int(values[name]) if name == "schema_version" else values[name] for name in PARTITION_COLUMNS}


def placement_of(data_file: DataFile) -> TablePartition:
    schema_version, date, hour = (data_file.partition[i] for i in range(len(PARTITION_COLUMNS)))
    placement = partition_of_path(layout.partition_directory_of_values(
        {"schema_version": schema_version, "date": date, "hour": hour}) + "/")
    if placement is None:
        raise ValueError(f"{data_file.file_path}: partition ({schema_version}, {date}, {hour}) is no placement hour")
    return placement


def placements_filter(placements: Iterable[TablePartition]) -> BooleanExpression:
    """Rows in any of these placement hours: a filter on the identity partition columns, which prunes manifests."""
    expression: BooleanExpression = AlwaysFalse()
    for placement in sorted(set(placements)):
        values = placement_values(placement)
        expression = Or(expression, And(*(EqualTo(name, value) for name, value in values.items())))
    return expression


def offsets_filter(ranges: Iterable[OffsetRange]) -> BooleanExpression:
    """Rows whose Kafka partition and offset fall in one of these ranges."""
    expression: BooleanExpression = AlwaysFalse()
    for offsets in ranges:
        if offsets.end > offsets.start:
            expression = Or(expression, And(EqualTo("_kafka_partition", offsets.partition),
                                            GreaterThanOrEqual("_kafka_offset", offsets.start),
                                            LessThan("_kafka_offset", offsets.end)))
    return expression


def all_rows_within(table: Table, data_file: DataFile, ranges: Sequence[OffsetRange]) -> bool:
    """Whether the file's bounds put every row in one of the ranges (a landed file of one slice does)."""
    schema = table.schema()
    partition_id = schema.find_field("_kafka_partition").field_id
    offset_id = schema.find_field("_kafka_offset").field_id
    try:
        low_partition, high_partition = (from_bytes(schema.find_type(partition_id), b[partition_id])
                                         for b in (data_file.lower_bounds, data_file.upper_bounds))
        low, high = (from_bytes(schema.find_type(offset_id), b[offset_id])
                     for b in (data_file.lower_bounds, data_file.upper_bounds))
    except (KeyError, TypeError):
        return False
    return low_partition == high_partition and any(
        r.partition == low_partition and r.start <= low and high < r.end for r in ranges
    )


def files_matching(table: Table, row_filter: BooleanExpression, snapshot_id: int | None = None) -> list[DataFile]:
    """The data files of a snapshot (default: the current one) that may hold rows matching the filter, pruned by
    partitions and metrics; metadata only."""
    scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id)
    tasks = scan.plan_files()
    with_deletes = [task.file.file_path for task in tasks if task.delete_files]
    if with_deletes:
        # The platform writes copy-on-write only; a delete file comes from another engine's merge-on-read.
        raise ValueError(f"{table.name()}: data files with row-level delete files ({with_deletes[:3]}): rewrite the "
                         f"table's delete files (compact it with the engine that wrote them) before this platform writes")
    return [task.file for task in tasks]


def read_rows(table: Table, data_files: Sequence[DataFile], row_filter: BooleanExpression | None = None,
              columns: Sequence[str] = ()) -> pa.Table:
    """The rows of these data files (of the current snapshot, without delete files: `files_matching`) as readers see
    them, current schema and placement columns filled; optionally only those matching `row_filter`, which must name
    only `columns` when they are given, and only `columns`.

    Read from the files with pyarrow, by column name as the table's name mapping says, not with pyiceberg's reader:
    pyiceberg 0.12 reads a null list of structs as an empty list (apache/iceberg-python#3833), and a rewrite would
    write that loss (`_kafka_headers` of records without headers)."""
    schema = table.schema().select(*columns) if columns else table.schema()
    target = rows_schema(table, columns)
    predicate = None if row_filter is None else expression_to_pyarrow(bind(schema, row_filter, case_sensitive=True))
    parts = [_rows_of(table, data_file, target, predicate) for data_file in data_files]
    return pa.concat_tables(parts) if parts else target.empty_table()


def rows_schema(table: Table, columns: Sequence[str] = ()) -> pa.Schema:
    """The Arrow schema of the rows `read_rows` gives: the table's current schema (or its `columns`) in the types
    landing writes."""
    schema = table.schema().select(*columns) if columns else table.schema()
    return _as_landed(schema_to_pyarrow(schema, include_field_ids=False))


def _as_landed(schema: pa.Schema) -> pa.Schema:
    """`schema` with the Arrow types landing writes: pyiceberg gives large strings, binaries and lists."""
    def landed(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(kind):
            return pa.string()
        if pa.types.is_large_binary(kind):
            return pa.binary()
        if pa.types.is_large_list(kind) or pa.types.is_list(kind):
            return pa.list_(kind.value_field.with_type(landed(kind.value_type)))
        if pa.types.is_map(kind):
            return pa.map_(kind.key_field.with_type(landed(kind.key_type)), kind.item_field.with_type(landed(kind.item_type)))
        if pa.types.is_struct(kind):
            return pa.struct([field.with_type(landed(field.type)) for field in kind])
        return kind

    return pa.schema([field.with_type(landed(field.type)) for field in schema])


def _rows_of(table: Table, data_file: DataFile, target: pa.Schema, predicate) -> pa.Table:
    with table.io.new_input(data_file.file_path).open() as stream:
        found = pq.read_table(stream)
    placement = placement_values(placement_of(data_file)) if not table.spec().is_unpartitioned() else {}
    columns = []
    for field in target:
        if field.name in placement:  # identity partition columns live in the folders, not in the file
            columns.append(pa.array([placement[field.name]] * found.num_rows, field.type))
        elif field.name in found.column_names:
            columns.append(found.column(field.name).cast(field.type))  # older versions: absent nested fields null
        else:
            columns.append(pa.nulls(found.num_rows, field.type))  # a field added after the file was written
    rows = pa.Table.from_arrays(columns, schema=target)
    return rows if predicate is None else rows.filter(predicate)


def write_rows(table: Table, storage: LakeStorage, rows: pa.Table) -> list[DataFile]:
    """New data files holding `rows` (as `read_rows` gives them), in their placement folders, near the table's target
    file size each; written by the platform's own Parquet writer, as landing writes (pyiceberg's writer turns a null
    list of structs into an empty list: apache/iceberg-python#3833). The placement columns stay in the folders."""
    if rows.num_rows == 0:
        return []
    target_bytes = int(table.metadata.properties.get("write.target-file-size-bytes", 512 * 1024 * 1024))
    written = []
    keys = rows.select(list(PARTITION_COLUMNS)).group_by(list(PARTITION_COLUMNS)).aggregate([]).to_pylist()
    for key in keys:
        mask = pc.and_(pc.and_(pc.equal(rows[PARTITION_COLUMNS[0]], key[PARTITION_COLUMNS[0]]),
                               pc.equal(rows[PARTITION_COLUMNS[1]], key[PARTITION_COLUMNS[1]])),
                       pc.equal(rows[PARTITION_COLUMNS[2]], key[PARTITION_COLUMNS[2]]))
        placed = rows.filter(mask).drop_columns(list(PARTITION_COLUMNS))
        placement = partition_of_path(layout.partition_directory_of_values(key) + "/")
        directory = f"{lake_relative_path(storage, table.location())}/{placement}"
        rows_per_file = max(1, target_bytes * placed.num_rows // max(placed.nbytes, 1))
        for start in range(0, placed.num_rows, rows_per_file):
            path = f"{directory}/rewritten-{uuid.uuid4().hex}.parquet"
            chunk = placed.slice(start, rows_per_file)
            output = ParquetOutput(storage, path, chunk.schema, dictionary_columns(chunk), statistics_columns(chunk.schema))
            output.write(chunk, row_group_size=REWRITE_ROW_GROUP_ROWS)
            output.close()
            written.append(data_file_of(table, storage, path))
    return written


def commit_files(table: Table, operation: Operation, removed: Iterable[DataFile], added: Iterable[DataFile],
                 summary: dict[str, str], conflicts: BooleanExpression) -> Table:
    """One snapshot that removes and adds these files atomically, with `summary` in its summary.

    `conflicts` scopes the check at commit: the commit fails (`ValidationException`) if since the snapshot it was
    planned on another commit added or removed files that may hold rows matching it, and pyiceberg's retry of a
    commit that raced another one re-checks it. pyiceberg offers no public producer for an append that validates,
    nor for a replace: its own producers serve, with the validation of its overwrite.
    """
    transaction = Transaction(table)
    removed = list(removed)
    producer_type = {Operation.REPLACE: _ReplaceFiles, Operation.APPEND: _ValidatedAppend}.get(operation, _OverwriteFiles)
    if removed and producer_type is _ValidatedAppend:
        raise ValueError("an append removes no files")
    producer = producer_type(operation=operation, transaction=transaction, io=table.io, snapshot_properties=summary)
    producer.delete_by_predicate(conflicts)
    for data_file in removed:
        producer.delete_data_file(data_file)
    for data_file in added:
        producer.append_data_file(data_file)
    producer.commit()
    return transaction.commit_transaction()


@contextmanager
def removed_unless_committed(storage: LakeStorage, written: Sequence[DataFile]) -> Iterator[None]:
    """Files the platform wrote for a commit (`write_rows`) are deleted if the commit fails: no snapshot holds them."""
    try:
        yield
    except BaseException:
        for data_file in written:
            relative = lake_relative_path(storage, data_file.file_path)
            if relative is not None:
                storage.delete(relative)
        raise


class _ValidatedAppend(_MergeAppendFiles):
    """An append that merges small manifests (one landed hour writes one) and, unlike pyiceberg's appends, checks for
    conflicting commits: two runs of one hour appending at once must not both land."""

    _validate_concurrency = _OverwriteFiles._validate_concurrency


class _ReplaceFiles(_OverwriteFiles):
    """A replace snapshot (compaction: the same rows in other files), which incremental readers skip, where an
    overwrite stops a streaming read. pyiceberg computes no summary for it (`update_snapshot_summaries` refuses the
    operation), though its totals are an overwrite's: they are computed as one, and the operation named replace."""

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        self._operation = Operation.OVERWRITE
        try:
            computed = super()._summary(snapshot_properties)
        finally:
            self._operation = Operation.REPLACE
        return Summary(Operation.REPLACE, **computed.additional_properties)


def live_files_by_path(table: Table, storage: LakeStorage, data_files: Iterable[DataFile]) -> dict[str, DataFile]:
    """Data files by their lake path (None-keyed files outside the lake are kept under their URI)."""
    return {lake_relative_path(storage, f.file_path) or f.file_path: f for f in data_files}
