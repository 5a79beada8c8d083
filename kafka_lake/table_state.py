"""The table as readers see it: its partitions (schema_version, date, hour) and where each one's
current files live — the raw folder, or the generation compaction last published.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from kafka_lake import layout
from kafka_lake.storage import LakeStorage

_SCHEMA_VERSION_IN_PATH = re.compile(r"schema_version=(\d+)/date=")


@dataclass(frozen=True, order=True)
class TablePartition:
    """One partition of a table: a schema version and an hour of the topic's placement time."""

    schema_version: int
    hour: datetime

    @property
    def date(self) -> str:
        return layout.date_text(self.hour)

    @property
    def hour_of_day(self) -> str:
        return f"{self.hour:%H}"

    def values(self) -> dict[str, str]:
        """Partition column values, in the table's partition-key order."""
        return {"schema_version": str(self.schema_version), "date": self.date, "hour": self.hour_of_day}

    def raw_directory(self, database: str, table: str) -> str:
        return layout.data_directory(database, table, self.schema_version, self.hour)

    def __str__(self) -> str:
        return f"schema_version={self.schema_version}/{layout.hour_directory(self.hour)}"


def partition_of_path(path: str) -> TablePartition | None:
    match = _SCHEMA_VERSION_IN_PATH.search(path)
    hour = layout.hour_of_path(path)
    if not match or hour is None:
        return None
    return TablePartition(int(match[1]), hour)


@dataclass(frozen=True)
class CompactedFile:
    path: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class CompactionManifest:
    """The commit of one compaction of a partition: the generation readers must use from now on."""

    database: str
    table: str
    schema_version: int
    hour: str  # YYYY-MM-DD-HH of the placement hour
    generation: int
    location: str  # relative directory holding exactly this generation's files
    files: tuple[CompactedFile, ...]
    sources: tuple[str, ...]  # files whose rows this generation holds; deleted after the commit
    rows: int
    offsets_checksum: str  # over the (partition, offset) set, to prove the row set unchanged
    compacted_at: str

    @property
    def partition(self) -> TablePartition:
        hour = datetime.strptime(self.hour, "%Y-%m-%d-%H").replace(tzinfo=timezone.utc)
        return TablePartition(self.schema_version, hour)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "CompactionManifest":
        document = json.loads(data)
        document["files"] = tuple(CompactedFile(**f) for f in document["files"])
        document["sources"] = tuple(document["sources"])
        return cls(**document)


def compaction_manifest_path(database: str, table: str, partition: TablePartition) -> str:
    return (
        f"{layout.manifest_prefix(database, table)}/_compaction/schema_version={partition.schema_version}/"
        f"hour={layout.date_text(partition.hour)}-{partition.hour:%H}.json"
    )


def read_compaction(storage: LakeStorage, database: str, table: str, partition: TablePartition) -> CompactionManifest | None:
    data = storage.read_bytes(compaction_manifest_path(database, table, partition))
    return None if data is None else CompactionManifest.from_json(data)


def compacted_directory(database: str, table: str, partition: TablePartition, generation: int) -> str:
    """A hidden folder inside the partition: readers of the raw folder never see it, and the
    catalog switches a partition to it in one metastore update."""
    return f"{partition.raw_directory(database, table)}/_compacted_{generation:06d}"


def storage_partitions(storage: LakeStorage, database: str, table: str) -> dict[TablePartition, str]:
    """Every partition holding data, with the location (relative to the lake root) readers must use."""
    found: set[TablePartition] = set()
    for stored in storage.list_files(layout.table_prefix(database, table)):
        partition = partition_of_path(stored.path)
        if partition is not None and stored.path.endswith(".parquet"):
            found.add(partition)
    return {partition: partition_location(storage, database, table, partition) for partition in sorted(found)}


def partition_location(storage: LakeStorage, database: str, table: str, partition: TablePartition) -> str:
    compaction = read_compaction(storage, database, table, partition)
    return compaction.location if compaction else partition.raw_directory(database, table)
