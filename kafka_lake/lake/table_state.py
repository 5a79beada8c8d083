"""The table as readers see it: its partitions (schema_version, date, hour), where each one's current files live (the
raw folder, or the generation compaction last published) and those files; the rows a landed Kafka hour holds now.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_lake.lake import layout
from kafka_lake.lake.compaction_manifest import CompactionManifest, read_compaction
from kafka_lake.lake.manifests import HourManifest
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition, partition_of_data_file, partition_of_path

# Reads of an hour's placement that meet a file compaction deleted since are made again, from its new generation.
READ_ATTEMPTS = 3


def storage_partitions(storage: LakeStorage, database: str, table: str,
                       among: Iterable[TablePartition] | None = None) -> dict[TablePartition, str]:
    """Every partition holding data, or those of `among` that do (one listing of each one's folder, not the
    table's), with the location (relative to the lake root) readers must use."""
    if among is None:
        listed = storage.list_files(layout.table_prefix(database, table))
    else:
        listed = [stored for partition in among for stored in storage.list_files(partition.raw_directory(database, table))]
    found: set[TablePartition] = set()
    for stored in listed:
        partition = partition_of_path(stored.path)
        if partition is not None and stored.path.endswith(".parquet"):
            found.add(partition)
    return {partition: partition_location(storage, database, table, partition) for partition in sorted(found)}


def table_files(lake_root: str, database: str, table: str) -> list[str]:
    """The Parquet files a reader of the table reads, for readers of files (pyarrow, DuckDB) that cannot ask the table
    catalog: each partition's files where the catalog points it (`partition_location`: its current generation, or
    its raw folder), paths on a local lake and `s3://` URIs on S3. A plain scan of the table's folders is no such
    reader: it skips the generation folders (`_compacted_…`, hidden) and reads files they replaced until they go."""
    storage = LakeStorage(lake_root)
    return [storage.uri(f"{location}/{name}")
            for location in storage_partitions(storage, database, table).values()
            for name in storage.list_names(location) if name.endswith(".parquet") and not name.startswith(("_", "."))]


def partition_location(storage: LakeStorage, database: str, table: str, partition: TablePartition) -> str:
    compaction = read_compaction(storage, database, table, partition)
    return compaction.location if compaction else partition.raw_directory(database, table)


def landed_hour_rows(storage: LakeStorage, database: str, table: str, manifest: HourManifest) -> list[pa.Table]:
    """The rows of a landed Kafka hour as readers see them now, one table per placement hour it wrote into (late
    events spread an hour's records over several): its own files where they still lie, and its offsets' rows in the
    generation that compaction or an erasure rewrote the others into (erased rows gone)."""
    placements: dict[TablePartition, list[str]] = {}
    for landed in manifest.files:
        if landed.kind == "data":
            placements.setdefault(partition_of_data_file(landed.path), []).append(landed.path)
    rows = []
    for placement, paths in sorted(placements.items()):
        for attempt in range(1, READ_ATTEMPTS + 1):
            try:
                held = _placement_rows(storage, database, table, placement, paths, manifest)
                rows += [held] if held is not None else []
                break
            except FileNotFoundError:
                if attempt == READ_ATTEMPTS:
                    raise
    return rows


def _placement_rows(storage: LakeStorage, database: str, table: str, placement: TablePartition, paths: list[str],
                    manifest: HourManifest) -> pa.Table | None:
    compaction = read_compaction(storage, database, table, placement)
    consumed = _consumed(storage, compaction, paths)
    parts = [_read(storage, path) for path in paths if path not in consumed]
    if compaction is not None and any(path in consumed for path in paths):
        for generation_file in compaction.files:
            rows = _read(storage, generation_file.path)
            parts.append(rows.filter(_in_hour_offsets(rows, manifest)))
    return pa.concat_tables(parts, promote_options="permissive") if parts else None  # None: every row erased


def _consumed(storage: LakeStorage, compaction: CompactionManifest | None, paths: list[str]) -> set[str]:
    """Which of the hour's files the current generation holds the rows of: its lineage (every generation compaction or
    an erasure wrote since the hour landed); for a generation written before lineages were kept, its sources and the
    files gone since."""
    if compaction is None:
        return set()
    if compaction.landed_files is not None:
        return set(compaction.landed_files)
    return set(compaction.sources) | {path for path in paths if not storage.exists(path)}


def _read(storage: LakeStorage, path: str) -> pa.Table:
    return pq.read_table(storage.full_path(path), filesystem=storage.filesystem)


def _in_hour_offsets(rows: pa.Table, manifest: HourManifest) -> pa.ChunkedArray:
    """Whether each row's Kafka partition and offset fall in one of the hour's offset ranges."""
    partition, offset = rows.column("_kafka_partition"), rows.column("_kafka_offset")
    within = pa.chunked_array([pa.array([False] * rows.num_rows)])
    for landed in manifest.partitions:
        if landed.end > landed.start:
            here = pc.and_(pc.equal(partition, landed.partition),
                           pc.and_(pc.greater_equal(offset, landed.start), pc.less(offset, landed.end)))
            within = pc.or_(within, here)
    return within
