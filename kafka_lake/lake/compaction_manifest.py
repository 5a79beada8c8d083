"""The compaction manifest: the commit of one compaction of a table partition, naming the generation readers must use
from then on, its files, and the raw files whose rows it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_lake.hours import hour_of_key
from kafka_lake.lake.documents import DocumentCodec
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition


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
    hour: str  # the placement hour, in the one string form of an hour (`hours.hour_key`)
    generation: int
    location: str  # relative directory holding exactly this generation's files
    files: tuple[CompactedFile, ...]
    sources: tuple[str, ...]  # files whose rows this generation holds; deleted after the commit
    rows: int
    offsets_checksum: str  # over the (partition, offset) set, to prove the row set unchanged
    compacted_at: str
    # The landed files whose rows it holds, those the generations before it held included: an hour's manifest names its
    # files, and a file consumed two generations ago is in none of this one's sources. None: written before it was kept.
    landed_files: tuple[str, ...] | None = None

    @property
    def partition(self) -> TablePartition:
        return TablePartition(self.schema_version, hour_of_key(self.hour))

    def to_json(self) -> bytes:
        return COMPACTION_MANIFEST.to_json(self)

    @classmethod
    def from_json(cls, data: bytes, where: str = "") -> CompactionManifest:
        return COMPACTION_MANIFEST.from_json(data, where)


def _hour_as_its_key(document: dict) -> dict:
    """Format 1 (written without a number) named the hour `YYYY-MM-DD-HH`; format 2 in the one form of an hour."""
    return {**document, "hour": f"{document['hour']}:00"}


def _lineage_unknown(document: dict) -> dict:
    """Format 3 keeps `landed_files`; before, only the sources, which a second generation's are the first's files."""
    return {**document, "landed_files": None}


COMPACTION_MANIFEST = DocumentCodec(CompactionManifest, "compaction manifest", version=3, unnumbered=1,
                                    upgrades={1: _hour_as_its_key, 2: _lineage_unknown})


def read_compaction(storage: LakeStorage, database: str, table: str, partition: TablePartition) -> CompactionManifest | None:
    path = partition.compaction_manifest_path(database, table)
    data = storage.read_bytes(path)
    return None if data is None else CompactionManifest.from_json(data, storage.uri(path))
