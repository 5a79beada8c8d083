"""Data files of an Iceberg table: a landed Parquet file described as one, rows written as new ones, the
files a snapshot holds, and the single-snapshot commits every change of the platform makes.

A landed file joins the table as it lies: its statistics are read from its footer, its partition tuple from its
`schema_version=/date=/hour=` folders, which are also recorded as the bounds of those columns (every row of the
file holds them), so metrics-based pruning and deletes work on the placement columns as on any other.
"""

from __future__ import annotations

import itertools
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, And, BooleanExpression, EqualTo, GreaterThanOrEqual, LessThan, Or
from pyiceberg.io.pyarrow import (
    ArrowScan,
    MetricModeTypes,
    MetricsMode,
    StatisticsCollector,
    _dataframe_to_data_files,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import FileScanTask, Table, Transaction
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _MergeAppendFiles, _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT, Record

from kafka_lake.iceberg_catalog import lake_file_uri, lake_relative_path
from kafka_lake.layout import PARTITION_COLUMNS
from kafka_lake.manifests import LandedFile
from kafka_lake.storage import LakeStorage
from kafka_lake.table_state import TablePartition, partition_of_path

FOOTER_READERS = 8  # footers read at once: on S3 each is a round trip or two


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
    partition = partition_of_path(landed.path)
    if partition is None or landed.kind != "data":
        raise ValueError(f"{storage.uri(landed.path)} is no data file in a schema_version=/date=/hour= folder")
    metadata = pq.read_metadata(storage.full_path(landed.path), filesystem=storage.filesystem)
    schema = table.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        metadata, _statistics_plan(table, metadata), parquet_path_to_id_mapping(schema)
    ).to_serialized_dict()
    values = placement_values(partition)
    for name, value in values.items():
        field = schema.find_field(name)
        statistics["lower_bounds"][field.field_id] = statistics["upper_bounds"][field.field_id] = to_bytes(field.field_type, value)
        statistics["value_counts"][field.field_id] = metadata.num_rows
        statistics["null_value_counts"][field.field_id] = 0
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=lake_file_uri(storage, landed.path),
        file_format=FileFormat.PARQUET,
        partition=Record(*values.values()),
        file_size_in_bytes=storage.filesystem.get_file_info(storage.full_path(landed.path)).size,
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
    placement = partition_of_path(f"schema_version={schema_version}/date={date}/hour={hour}/")
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
    only `columns` when they are given, and only `columns`."""
    schema = table.schema().select(*columns) if columns else table.schema()
    arrow = ArrowScan(table.metadata, table.io, schema, row_filter if row_filter is not None else AlwaysTrue(),
                      case_sensitive=True)
    return arrow.to_table([FileScanTask(data_file) for data_file in data_files])


def write_rows(table: Table, rows: pa.Table) -> list[DataFile]:
    """New data files holding `rows`, in their placement folders, at most the table's target size each."""
    if rows.num_rows == 0:
        return []
    return list(_dataframe_to_data_files(table.metadata, rows, table.io, write_uuid=uuid.uuid4(),
                                         counter=itertools.count(0)))


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
