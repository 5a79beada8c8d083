"""What a current-state table remembers beside its Iceberg table, in the lake: the Kafka hours applied (which landing,
what it did), and the keys each hour deleted with the offsets of the deleting change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_lake.hours import ONE_HOUR, KafkaHour
from kafka_lake.lake import layout
from kafka_lake.lake.documents import DocumentCodec
from kafka_lake.lake.manifests import HourManifest
from kafka_lake.lake.parquet_output import ParquetOutput
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.table_spec import TableSpec


class HourNotLanded(RuntimeError):
    """The raw hour an application asks for has no manifest: nothing landed to apply."""


@dataclass(frozen=True)
class AppliedHour:
    """A Kafka hour applied to a current-state table: the landing applied (its manifest's `landed_at` and `run_id`),
    its offsets, and what it did."""

    database: str
    table: str
    current_table: str  # `<database>.<current table>`
    hour: str
    landed_at: str
    run_id: str
    offsets: dict  # Kafka partition → [start, end)
    rows_read: int  # rows of the hour in the raw table
    keyless: int  # of them without a key: no row to set
    changes: int  # keys the hour changed (its newest change of each)
    inserts: int
    updates: int
    deletes: int
    snapshot_id: int | None  # None: the table needed no change (its rows newer, or the hour applied before)
    rows: int  # the table's rows afterwards
    files_rewritten: int
    files_written: int
    bytes_read: int
    bytes_written: int
    attempts: int
    applied_at: str
    duration_s: float
    applied_by: str = ""  # the run
    notes: dict = field(default_factory=dict)

    @property
    def kafka_hour(self) -> KafkaHour:
        return KafkaHour.from_partition_key(self.hour)

    @property
    def unchanged(self) -> int:
        """Changes that left the table as it was: older than their key's row or deletion, or applied before."""
        return max(self.changes - self.inserts - self.updates - self.deletes, 0)

    def applies(self, manifest: HourManifest) -> bool:
        """Whether this is the application of the hour's landing that `manifest` records."""
        return (self.landed_at, self.run_id) == (manifest.landed_at, manifest.run_id)

    def to_json(self) -> bytes:
        return APPLIED_HOUR.to_json(self)


APPLIED_HOUR = DocumentCodec(AppliedHour, "current-state applied hour", version=1)


# A table row holds the change that set it; a deleted key has no row to hold its deletion, so the deletion is kept
# here, written before the table changes: an earlier hour applied again (re-landed, backfilled) must not bring the key
# back.
class CurrentStateLedger:
    """The applied hours and the deletions of one topic's current-state table."""

    def __init__(self, storage: LakeStorage, topic: TableSpec):
        self.storage = storage
        self.applied_directory = layout.applied_hour_directory(topic.database, topic.table)
        self.deletions_directory = layout.deletions_directory(topic.database, topic.table)

    # --- applied hours --------------------------------------------------------------------------------------

    def record(self, applied: AppliedHour) -> None:
        self.storage.write_bytes(f"{self.applied_directory}/{layout.manifest_name(applied.kafka_hour)}", applied.to_json())

    def applied(self, hour: KafkaHour) -> AppliedHour | None:
        path = f"{self.applied_directory}/{layout.manifest_name(hour)}"
        data = self.storage.read_bytes(path)
        return None if data is None else APPLIED_HOUR.from_json(data, self.storage.uri(path))

    def applied_in(self, first: KafkaHour, last: KafkaHour) -> list[KafkaHour]:
        """The hours from `first` to `last` applied: one listing of their names, however long the table's history."""
        hours = int((last.start - first.start) / ONE_HOUR) + 1
        names = self.storage.list_names(self.applied_directory, prefix=layout.MANIFEST_NAME_PREFIX,
                                        start_after=layout.hour_name(first), limit=hours)
        return [h for h in map(layout.hour_of_manifest_path, names) if h is not None and first <= h <= last]

    # --- deletions ------------------------------------------------------------------------------------------

    def record_deletions(self, hour: KafkaHour, deletions: pa.Table) -> None:
        """The keys the hour's changes delete; an hour deleting none keeps no file (a re-landing may delete fewer)."""
        path = self._deletions_path(hour)
        if deletions.num_rows == 0:
            self.storage.delete(path)
            return
        output = ParquetOutput(self.storage, path, deletions.schema)
        try:
            output.write(deletions)
        except BaseException:
            output.abort()
            raise
        output.close()

    def deletions_after(self, hour: KafkaHour) -> list[pa.Table]:
        """The deletions of the hours after `hour`: only those can be newer than its changes in a key's partition
        (consecutive hours' offsets follow each other)."""
        names = self.storage.list_names(self.deletions_directory, prefix=layout.MANIFEST_NAME_PREFIX,
                                        start_after=self._deletions_name(hour))
        return [pq.read_table(self.storage.full_path(f"{self.deletions_directory}/{name}"),
                              filesystem=self.storage.filesystem) for name in names]

    def _deletions_path(self, hour: KafkaHour) -> str:
        return f"{self.deletions_directory}/{self._deletions_name(hour)}"

    @staticmethod
    def _deletions_name(hour: KafkaHour) -> str:
        return f"{layout.hour_name(hour)}.parquet"
