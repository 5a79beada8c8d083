"""Expiry: partitions whose hour ended more than `retention_days` ago leave the catalog, then storage; dead letters
go after `dead_letter_retention_days`, never later than the rows.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable

import pyarrow.parquet as pq

from kafka_lake import layout
from kafka_lake.catalog import TopicSpec
from kafka_lake.hours import ONE_HOUR
from kafka_lake.storage import LakeStorage
from kafka_lake.table_partition import TablePartition
from kafka_lake.table_state import storage_partitions


def retention_cutoff(topic: TopicSpec, now: datetime) -> datetime | None:
    """Hours that end at or before this moment are expired; None when the topic keeps data forever."""
    return None if topic.retention_days is None else now - timedelta(days=topic.retention_days)


def is_expired(hour: datetime, cutoff: datetime | None) -> bool:
    """Whether an hour (a partition's, or a dead letter's Kafka hour) has expired: it ended at or before the cutoff."""
    return cutoff is not None and hour + ONE_HOUR <= cutoff


def dead_letter_days(topic: TopicSpec) -> int:
    """How long dead letters are kept: `dead_letter_retention_days`, never longer than the table's rows."""
    if topic.retention_days is None:
        return topic.dead_letter_retention_days
    return min(topic.dead_letter_retention_days, topic.retention_days)


def dead_letter_cutoff(topic: TopicSpec, now: datetime) -> datetime:
    """Dead letters of Kafka hours that end at or before this moment are expired: they hold raw values, PII
    in clear unless encrypted, so they go sooner than rows, also for a topic that keeps its rows forever."""
    return now - timedelta(days=dead_letter_days(topic))


def expire(
    storage: LakeStorage, topic: TopicSpec, now: datetime, unpublish: Callable[[list[TablePartition]], None],
) -> tuple[list[TablePartition], int, list[str]]:
    """Removes expired partitions from the catalog, then from storage, and expired dead letters; returns the
    partitions, their rows and the files deleted."""
    cutoff = retention_cutoff(topic, now)
    expired = [p for p in storage_partitions(storage, topic.database, topic.table) if is_expired(p.hour, cutoff)]
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
    dead_letters_until = dead_letter_cutoff(topic, now)
    for stored in storage.list_files(layout.dead_letter_prefix(topic.database, topic.table)):
        hour = layout.hour_of_path(stored.path)
        if hour is not None and is_expired(hour, dead_letters_until):
            storage.delete(stored.path)
            deleted.append(stored.path)
    return expired, rows, deleted


def expiry_detail(topic: TopicSpec, now: datetime) -> str:
    cutoff = retention_cutoff(topic, now)
    rows = "rows kept forever" if cutoff is None else (
        f"partitions older than {topic.retention_days} days (before {cutoff:%Y-%m-%d %H:%M}Z)"
    )
    return (f"{rows}; dead letters older than {dead_letter_days(topic)} days "
            f"(before {dead_letter_cutoff(topic, now):%Y-%m-%d %H:%M}Z)")
