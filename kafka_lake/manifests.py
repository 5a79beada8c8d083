"""Hour manifests: the commit record of a landed Kafka hour.

Per Kafka partition the offset range [start, end) read and its counts, plus every file written.
Files that no manifest names are not part of the table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Iterable

from kafka_lake import layout
from kafka_lake.hours import KafkaHour
from kafka_lake.storage import LakeStorage

MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class LandedFile:
    path: str  # relative to the lake root
    kind: str  # "data" or "dead_letter"
    partition: int
    first_offset: int
    rows: int
    bytes: int
    schema_version: int | None  # None for dead letters
    hour: str  # the placement hour's `date=…/hour=…`


@dataclass(frozen=True)
class PartitionLanding:
    """What one Kafka partition contributed to a landed hour."""

    partition: int
    start: int
    end: int
    records: int = 0
    rows: int = 0
    dead_letters: int = 0
    tombstones: int = 0
    late_events: int = 0
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None

    @property
    def offsets(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class HourManifest:
    database: str
    table: str
    topic: str
    hour: str  # the partition key, e.g. 2026-11-01-13:00
    partitions: tuple[PartitionLanding, ...]
    files: tuple[LandedFile, ...]
    landed_at: str
    run_id: str = ""
    boundaries: dict = field(default_factory=dict)  # partition → how start/end were decided
    schema_versions: dict = field(default_factory=dict)  # version → rows
    dead_letter_causes: dict = field(default_factory=dict)
    duration_s: float = 0.0
    # partition → [start, end) of offsets that expired unlanded before this hour's start, accepted by
    # an explicit, audited run option; the check on contiguity reports them instead of failing.
    accepted_losses: dict = field(default_factory=dict)
    new_partitions: tuple[int, ...] = ()  # absent from the landed hour before; landed from their first record
    # partition → [start, end) of offsets past this hour's end held by a transaction still open when it landed
    # (the hour ended at the last stable offset); committed later, they are the next hour's offsets.
    open_transactions: dict = field(default_factory=dict)

    @property
    def kafka_hour(self) -> KafkaHour:
        return KafkaHour.from_partition_key(self.hour)

    def partition(self, number: int) -> PartitionLanding | None:
        return next((p for p in self.partitions if p.partition == number), None)

    def accepted_loss(self, partition: int) -> tuple[int, int] | None:
        loss = self.accepted_losses.get(str(partition))
        return None if loss is None else (loss[0], loss[1])

    def totals(self) -> dict[str, int]:
        return {
            "offsets": sum(p.offsets for p in self.partitions),
            "records": sum(p.records for p in self.partitions),
            "rows": sum(p.rows for p in self.partitions),
            "dead_letters": sum(p.dead_letters for p in self.partitions),
            "tombstones": sum(p.tombstones for p in self.partitions),
            "late_events": sum(p.late_events for p in self.partitions),
            "files": len(self.files),
            "bytes": sum(f.bytes for f in self.files),
        }

    def to_json(self) -> bytes:
        document = asdict(self)
        document["format"] = MANIFEST_FORMAT
        return json.dumps(document, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str = "") -> "HourManifest":
        try:
            document = json.loads(data)
            if document.pop("format", None) != MANIFEST_FORMAT:
                raise ValueError(f"unsupported manifest format (expected {MANIFEST_FORMAT})")
            document["partitions"] = tuple(PartitionLanding(**p) for p in document["partitions"])
            document["files"] = tuple(LandedFile(**f) for f in document["files"])
            document["new_partitions"] = tuple(document.get("new_partitions", ()))
            return cls(**document)
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"manifest {where} cannot be read: {error}") from None


class ManifestStore:
    """The manifests of one table in the lake."""

    def __init__(self, storage: LakeStorage, database: str, table: str):
        self.storage = storage
        self.database = database
        self.table = table

    def path(self, hour: KafkaHour) -> str:
        return layout.manifest_path(self.database, self.table, hour)

    def read(self, hour: KafkaHour) -> HourManifest | None:
        path = self.path(hour)
        data = self.storage.read_bytes(path)
        return None if data is None else HourManifest.from_json(data, self.storage.uri(path))

    def write(self, manifest: HourManifest) -> str:
        path = self.path(manifest.kafka_hour)
        self.storage.write_bytes(path, manifest.to_json())
        return path

    def delete(self, hour: KafkaHour) -> bool:
        return self.storage.delete(self.path(hour))

    def landed_hours(self) -> list[KafkaHour]:
        prefix = layout.manifest_prefix(self.database, self.table)
        hours = (layout.hour_of_manifest_path(f.path) for f in self.storage.list_files(prefix))
        return sorted(h for h in hours if h is not None)

    def neighbours(self, hour: KafkaHour) -> tuple[HourManifest | None, HourManifest | None]:
        """The nearest landed hour before and after `hour`, whose boundaries bind it."""
        landed = self.landed_hours()
        before = max((h for h in landed if h < hour), default=None)
        after = min((h for h in landed if h > hour), default=None)
        return (self.read(before) if before else None, self.read(after) if after else None)

    def all(self) -> Iterable[HourManifest]:
        for hour in self.landed_hours():
            manifest = self.read(hour)
            if manifest is not None:
                yield manifest
