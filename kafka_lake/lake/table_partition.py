"""A partition of a topic's table: a schema version and an hour of the topic's placement time, and where its files
live in the lake.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kafka_lake.lake import layout


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
        return layout.partition_values(self.schema_version, self.hour)

    def raw_directory(self, database: str, table: str) -> str:
        return layout.data_directory(database, table, self.schema_version, self.hour)

    def compacted_directory(self, database: str, table: str, generation: int) -> str:
        return layout.compacted_directory(database, table, self.schema_version, self.hour, generation)

    def compaction_manifest_path(self, database: str, table: str) -> str:
        return layout.compaction_manifest_path(database, table, self.schema_version, self.hour)

    def __str__(self) -> str:
        return layout.partition_directory(self.schema_version, self.hour)


def partition_of_data_file(path: str) -> TablePartition:
    """The table partition of a landed or compacted data file's path, which always names one."""
    partition = partition_of_path(path)
    if partition is None:
        raise ValueError(f"{path} is not in a schema_version=/date=/hour= folder")
    return partition


def partition_of_path(path: str) -> TablePartition | None:
    schema_version, hour = layout.schema_version_of_path(path), layout.hour_of_path(path)
    if schema_version is None or hour is None:
        return None
    return TablePartition(schema_version, hour)
