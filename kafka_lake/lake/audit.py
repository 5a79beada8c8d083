"""The audit log: one immutable entry per expiry, erasure or accepted loss of offsets, under `_audit/<db>/<table>/`:
what was done, when, how many rows, which partitions, files and requests.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from kafka_lake.lake import layout
from kafka_lake.lake.documents import DocumentCodec
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.table_spec import TableSpec


@dataclass(frozen=True)
class AuditEntry:
    action: str  # "expire", "erase" or "accept_lost_offsets"
    topic: str
    at: str
    rows: int
    partitions: tuple[str, ...]
    files_deleted: tuple[str, ...] = ()
    files_written: tuple[str, ...] = ()
    request_ids: tuple[str, ...] = ()
    detail: str = ""


# Written without a format number before the codec: that is format 1, the same fields.
AUDIT_ENTRY = DocumentCodec(AuditEntry, "audit entry", version=1, unnumbered=1)


def write_audit(storage: LakeStorage, topic: TableSpec, entry: AuditEntry) -> str:
    """One immutable JSON file per deletion, erasure or accepted loss under `_audit/<db>/<table>/`."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = layout.audit_path(topic.database, topic.table, stamp, entry.action, uuid.uuid4().hex[:8])
    storage.write_bytes(path, AUDIT_ENTRY.to_json(entry))
    return path


def read_audit(storage: LakeStorage, topic: TableSpec) -> list[AuditEntry]:
    return [AUDIT_ENTRY.from_json(storage.read_listed(stored.path), storage.uri(stored.path))
            for stored in storage.list_files(layout.audit_prefix(topic.database, topic.table))]
