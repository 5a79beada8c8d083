"""Retention of a current-state table, run with its topic's: erasure requests, snapshot expiry and the files of dead
applications, every deletion audited.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pyiceberg.catalog import Catalog

from kafka_lake.current.key_ranges import rewrite_keeping
from kafka_lake.current.state_table import current_state_of, current_table_name, data_directory, ensure_current_table
from kafka_lake.lake.audit import AuditEntry, write_audit
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.iceberg.catalog import lake_relative_path
from kafka_lake.tables.iceberg.commits import ACTION
from kafka_lake.tables.iceberg.maintenance import (
    SUBJECT_FIELD,
    erased_rows_filter,
    expire_snapshots,
    remove_unheld_files_in,
)
from kafka_lake.upkeep.subjects import ErasedSubjects, erased_subjects, read_erasure_requests

# Files no snapshot holds are deleted once older than this: younger ones may be an application's still being written.
ORPHAN_MIN_AGE = timedelta(days=1)


@dataclass(frozen=True)
class CurrentStateRetention:
    erased_rows: int
    erase_snapshot_id: int | None
    snapshots_expired: int
    files_deleted_with_snapshots: int
    orphan_files_removed: int
    audit_paths: tuple[str, ...]

    def metadata(self) -> dict:
        """As the retention asset shows it, beside the topic's own table's."""
        return {"current_state_erased_rows": self.erased_rows,
                "current_state_snapshots_expired": self.snapshots_expired,
                "current_state_files_deleted": self.files_deleted_with_snapshots + self.orphan_files_removed}


def erased_in_current_state(topic: TableSpec, erased: ErasedSubjects) -> ErasedSubjects:
    """The subjects as the current-state table holds them: the paths of `subject_field` inside the row, relative to it
    (the loader requires one there; a path outside it, a delete event's `before.id`, matches in the raw table only)."""
    row = current_state_of(topic).row
    return erased if row is None else erased.relative_to(topic.column_path(row))


# Retention of a current-state table, run with its topic's: erasure requests remove their subjects' rows, snapshots
# older than `snapshot_retention_days` expire with the files only they held, and files of applications that died
# before their commit (no snapshot holds them) are deleted once a day old; every deletion audited. Rows are not
# expired by `retention_days`: a current-state table is the source table as it is now, however old the change that set
# a row.
def retain_current_state(topic: TableSpec, storage: LakeStorage, catalog: Catalog, now: datetime,
                         pii_key: bytes | None) -> CurrentStateRetention:
    table = ensure_current_table(catalog, storage, topic)
    stamp = now.isoformat(timespec="seconds")
    audits: list[str] = []
    requests = read_erasure_requests(storage) if topic.subject_fields else []
    erased_rows, erase_snapshot = 0, None
    erased = erased_in_current_state(topic, erased_subjects(topic, requests, pii_key)) if requests else ErasedSubjects()
    if erased:
        subjects, kept = erased_rows_filter(erased)
        done = rewrite_keeping(table, storage, topic, subjects, kept,
                               {ACTION: "erase", SUBJECT_FIELD: topic.subject_field_text})
        if done.snapshot_id is not None:
            erased_rows, erase_snapshot = done.deletes, done.snapshot_id
            audits.append(write_audit(storage, topic, AuditEntry(
                "erase", topic.topic, stamp, done.deletes, (current_table_name(topic),),
                _lake_paths(storage, done.files_removed), _lake_paths(storage, done.files_added),
                tuple(r.request_id for r in requests),
                detail=f"rows of the current-state table {current_table_name(topic)} whose {topic.subject_field_text} "
                       f"matched; overwrite snapshot {done.snapshot_id}; the rows stay readable by time travel until "
                       f"that snapshot's parents expire ({topic.snapshot_retention_days} days)")))
    kept_from = now - timedelta(days=topic.snapshot_retention_days)
    swept = expire_snapshots(table.refresh(), storage, kept_from)
    if swept.files_deleted:
        audits.append(write_audit(storage, topic, AuditEntry(
            "expire_snapshots", topic.topic, stamp, 0, (current_table_name(topic),), tuple(swept.files_deleted),
            detail=f"snapshots of the current-state table {current_table_name(topic)} older than "
                   f"{topic.snapshot_retention_days} days (before {kept_from:%Y-%m-%d %H:%M}Z) expired: "
                   f"{len(swept.snapshot_ids)} snapshot(s), and the files no kept snapshot held")))
    orphans = remove_unheld_files_in(table.refresh(), storage, [data_directory(topic)], now - ORPHAN_MIN_AGE)
    return CurrentStateRetention(erased_rows, erase_snapshot, len(swept.snapshot_ids), len(swept.files_deleted),
                                 len(orphans), tuple(audits))


def _lake_paths(storage: LakeStorage, uris) -> tuple[str, ...]:
    return tuple(lake_relative_path(storage, uri) or uri for uri in uris)
