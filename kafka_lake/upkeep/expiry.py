"""Expiry: partitions whose hour ended more than `retention_days` ago leave the catalog, then storage; dead letters
go after `dead_letter_retention_days`, never later than the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pyarrow.parquet as pq

from kafka_lake.hours import ONE_HOUR
from kafka_lake.lake import layout
from kafka_lake.lake.landed_files import letter_prefixes
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.table_spec import TableSpec


def retention_cutoff(topic: TableSpec, now: datetime) -> datetime | None:
    """Hours that end at or before this moment are expired; None when the topic keeps data forever."""
    return None if topic.retention_days is None else now - timedelta(days=topic.retention_days)


def is_expired(hour: datetime, cutoff: datetime | None) -> bool:
    """Whether an hour (a partition's, or a dead letter's Kafka hour) has expired: it ended at or before the cutoff."""
    return cutoff is not None and hour + ONE_HOUR <= cutoff


def dead_letter_days(topic: TableSpec) -> int:
    """How long dead letters are kept: `dead_letter_retention_days`, never longer than the table's rows."""
    if topic.retention_days is None:
        return topic.dead_letter_retention_days
    return min(topic.dead_letter_retention_days, topic.retention_days)


def dead_letter_cutoff(topic: TableSpec, now: datetime) -> datetime:
    """Dead letters of Kafka hours that end at or before this moment are expired: they hold raw values, PII
    in clear unless encrypted, so they go sooner than rows, also for a topic that keeps its rows forever."""
    return now - timedelta(days=dead_letter_days(topic))


def expire(
    storage: LakeStorage, topic: TableSpec, now: datetime, unpublish: Callable[[list[TablePartition]], None],
) -> tuple[list[TablePartition], int, list[str]]:
    """Removes expired partitions from the catalog, then from storage, and expired dead letters; returns the
    partitions, their rows and the files deleted."""
    cutoff = retention_cutoff(topic, now)
    expired = expired_partitions(storage, topic, cutoff)
    if expired:
        unpublish(expired)  # readers first: a query never meets a partition whose files are gone
    rows, deleted = 0, []
    for partition in expired:
        for stored in storage.list_files(partition.raw_directory(topic.database, topic.table)):
            if stored.path.endswith(".parquet"):
                rows += pq.ParquetFile(storage.full_path(stored.path), filesystem=storage.filesystem).metadata.num_rows
            storage.delete(stored.path)
            deleted.append(stored.path)
        storage.delete(partition.compaction_manifest_path(topic.database, topic.table))
    return expired, rows, deleted + expire_dead_letters(storage, topic, now)


def expire_dead_letters(storage: LakeStorage, topic: TableSpec, now: datetime) -> list[str]:
    """Deletes the dead-letter files of Kafka hours past `dead_letter_cutoff`, the topic's unrouted ones too where
    this table is the routed table that lands them; returns their paths."""
    deleted = []
    dead_letters_until = dead_letter_cutoff(topic, now)
    for prefix in letter_prefixes(topic):
        for folder, _ in _expired_hour_folders(storage, prefix, dead_letters_until):
            for stored in storage.list_files(folder):
                storage.delete(stored.path)
                deleted.append(stored.path)
    return deleted


def expired_partitions(storage: LakeStorage, topic: TableSpec, cutoff: datetime | None) -> list[TablePartition]:
    """The partitions holding data whose hour expired at `cutoff`: found through each schema version's dates and
    the hours of the expired dates only, so a day's expiry lists what it removes, not the table."""
    expired = []
    for version in topic.version_numbers:
        partition_folder = f"{layout.table_prefix(topic.database, topic.table)}/schema_version={version}"
        for folder, hour in _expired_hour_folders(storage, partition_folder, cutoff):
            if any(stored.path.endswith(".parquet") for stored in storage.list_files(folder)):
                expired.append(TablePartition(version, hour))
    return expired


def _expired_hour_folders(storage: LakeStorage, directory: str, cutoff: datetime | None) -> list[tuple[str, datetime]]:
    """The `date=…/hour=…` folders below `directory` whose hour expired at `cutoff`, with their hours; the hours of a
    date are listed only when its first hour expired."""
    if cutoff is None:
        return []
    folders = []
    for date in storage.list_folders(directory, prefix="date="):
        first = layout.hour_of_path(f"{date}/hour=00/")
        if first is None or not is_expired(first, cutoff):
            continue
        for hour in storage.list_folders(f"{directory}/{date}", prefix="hour="):
            placed = layout.hour_of_path(f"{date}/{hour}/")
            if placed is not None and is_expired(placed, cutoff):
                folders.append((f"{directory}/{date}/{hour}", placed))
    return folders


def expiry_detail(topic: TableSpec, now: datetime) -> str:
    cutoff = retention_cutoff(topic, now)
    rows = "rows kept forever" if cutoff is None else (
        f"partitions older than {topic.retention_days} days (before {cutoff:%Y-%m-%d %H:%M}Z)"
    )
    return (f"{rows}; dead letters older than {dead_letter_days(topic)} days "
            f"(before {dead_letter_cutoff(topic, now):%Y-%m-%d %H:%M}Z)")
