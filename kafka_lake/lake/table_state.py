"""The table as readers see it: its partitions (schema_version, date, hour) and where each one's current files live:
the raw folder, or the generation compaction last published.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka_lake.lake import layout
from kafka_lake.lake.compaction_manifest import read_compaction
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition, partition_of_path


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


def partition_location(storage: LakeStorage, database: str, table: str, partition: TablePartition) -> str:
    compaction = read_compaction(storage, database, table, partition)
    return compaction.location if compaction else partition.raw_directory(database, table)
