"""GDPR retention: expire partitions older than `retention_days`, apply erasure requests, audit both.

Erasure rewrites only the partitions holding a requested subject, through a new generation
exactly like compaction, so readers never see a half-erased partition.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_lake import layout
from kafka_lake.catalog import TopicSpec
from kafka_lake.compaction import (
    CompactionReport,
    CompactionTask,
    committed_raw_files,
    rewrite_generations,
    subject_values,
)
from kafka_lake.hours import ONE_HOUR
from kafka_lake.manifests import ManifestStore
from kafka_lake.pii import Pseudonymizer
from kafka_lake.storage import LakeStorage
from kafka_lake.table_state import (
    CompactionManifest,
    TablePartition,
    compaction_manifest_path,
    partition_of_path,
    read_compaction,
    storage_partitions,
)

ERASURE_REQUESTS_PREFIX = "_erasure_requests"
AUDIT_PREFIX = "_audit"


@dataclass(frozen=True)
class ErasureRequest:
    request_id: str
    subject_ids: tuple[str, ...]
    requested_at: str
    path: str


@dataclass(frozen=True)
class AuditEntry:
    action: str  # "expire" or "erase"
    topic: str
    at: str
    rows: int
    partitions: tuple[str, ...]
    files_deleted: tuple[str, ...] = ()
    files_written: tuple[str, ...] = ()
    request_ids: tuple[str, ...] = ()
    detail: str = ""


@dataclass
class RetentionReport:
    expired_partitions: list[TablePartition] = field(default_factory=list)
    expired_rows: int = 0
    expired_dead_letter_files: int = 0
    erased_partitions: list[TablePartition] = field(default_factory=list)
    erased_rows: int = 0
    audit_paths: list[str] = field(default_factory=list)


def read_erasure_requests(storage: LakeStorage) -> list[ErasureRequest]:
    """`{LAKE_ROOT}/_erasure_requests/<id>.json`: {"subject_ids": [...], "requested_at": "…"}."""
    requests = []
    for stored in storage.list_files(ERASURE_REQUESTS_PREFIX):
        if not stored.path.endswith(".json"):
            continue
        try:
            document = json.loads(storage.read_bytes(stored.path))
            subjects = document["subject_ids"]
            if not isinstance(subjects, list) or not subjects:
                raise ValueError("subject_ids must be a non-empty list")
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"erasure request {storage.uri(stored.path)} cannot be read: {error}") from None
        request_id = stored.path.rsplit("/", 1)[-1][: -len(".json")]
        requests.append(ErasureRequest(request_id, tuple(str(s) for s in subjects),
                                       str(document.get("requested_at", "")), stored.path))
    return requests


def write_audit(storage: LakeStorage, topic: TopicSpec, entry: AuditEntry) -> str:
    """One immutable JSON file per deletion or erasure under `_audit/<db>/<table>/`."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = f"{AUDIT_PREFIX}/{topic.database}/{topic.table}/{stamp}-{entry.action}-{uuid.uuid4().hex[:8]}.json"
    storage.write_bytes(path, json.dumps(asdict(entry), indent=1, sort_keys=True).encode())
    return path


def read_audit(storage: LakeStorage, topic: TopicSpec) -> list[AuditEntry]:
    entries = []
    for stored in storage.list_files(f"{AUDIT_PREFIX}/{topic.database}/{topic.table}"):
        document = json.loads(storage.read_bytes(stored.path))
        entries.append(AuditEntry(**{k: tuple(v) if isinstance(v, list) else v for k, v in document.items()}))
    return entries


def retention_cutoff(topic: TopicSpec, now: datetime) -> datetime | None:
    """Hours that end at or before this moment are expired; None when the topic keeps data forever."""
    return None if topic.retention_days is None else now - timedelta(days=topic.retention_days)


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
    expired = [] if cutoff is None else [
        p for p in storage_partitions(storage, topic.database, topic.table) if p.hour + ONE_HOUR <= cutoff
    ]
    if expired:
        unpublish(expired)  # readers first: a query never meets a partition whose files are gone
    rows, deleted = 0, []
    for partition in expired:
        for stored in storage.list_files(partition.raw_directory(topic.database, topic.table)):
            if stored.path.endswith(".parquet"):
                rows += pq.ParquetFile(storage.full_path(stored.path), filesystem=storage.filesystem).metadata.num_rows
            storage.delete(stored.path)
            deleted.append(stored.path)
        storage.delete(compaction_manifest_path(topic.database, topic.table, partition))
    dead_letters_until = dead_letter_cutoff(topic, now)
    for stored in storage.list_files(layout.dead_letter_prefix(topic.database, topic.table)):
        hour = layout.hour_of_path(stored.path)
        if hour is not None and hour + ONE_HOUR <= dead_letters_until:
            storage.delete(stored.path)
            deleted.append(stored.path)
    return expired, rows, deleted


def _expiry_detail(topic: TopicSpec, now: datetime) -> str:
    cutoff = retention_cutoff(topic, now)
    rows = "rows kept forever" if cutoff is None else (
        f"partitions older than {topic.retention_days} days (before {cutoff:%Y-%m-%d %H:%M}Z)"
    )
    return (f"{rows}; dead letters older than {dead_letter_days(topic)} days "
            f"(before {dead_letter_cutoff(topic, now):%Y-%m-%d %H:%M}Z)")


def subjects_to_match(topic: TopicSpec, requests: list[ErasureRequest], pii_key: bytes | None) -> frozenset:
    """Requested ids as they are stored: pseudonymized when the subject field is a PII field."""
    subjects = {subject for request in requests for subject in request.subject_ids}
    if topic.subject_field and tuple(topic.subject_field.split(".")) in topic.pii_fields:
        if pii_key is None:
            raise ValueError(f"{topic.topic}: subject_field {topic.subject_field} is pseudonymized; set PII_HMAC_KEY to erase")
        pseudonymizer = Pseudonymizer(pii_key)
        subjects = {pseudonymizer.pseudonymize(subject) for subject in subjects}
    return frozenset(subjects)


def plan_erasure(storage: LakeStorage, topic: TopicSpec, subjects: frozenset, target_bytes: int) -> list[CompactionTask]:
    """A rewrite task for every partition whose current files hold one of `subjects`."""
    if not topic.subject_field or not subjects:
        return []
    path = topic.subject_column  # where the subject field landed: `rename` may have given it another column
    manifests = ManifestStore(storage, topic.database, topic.table)
    landed = manifests.landed_hours()
    tasks = []
    for partition in storage_partitions(storage, topic.database, topic.table):
        current = read_compaction(storage, topic.database, topic.table, partition)
        if current is not None:
            files = [f.path for f in current.files]
        else:
            committed = committed_raw_files(storage, topic, manifests, landed, partition.hour)
            files = sorted(p for p in committed if partition_of_path(p) == partition)
        if any(_holds_subject(storage, file, path, subjects) for file in files):
            tasks.append(CompactionTask(topic, partition, (current.generation if current else 0) + 1, tuple(files),
                                        storage.root, target_bytes, subjects, path))
    return tasks


def _holds_subject(storage: LakeStorage, path: str, subject_path: tuple[str, ...], subjects: frozenset) -> bool:
    table = pq.read_table(storage.full_path(path), filesystem=storage.filesystem, columns=[subject_path[0]])
    matches = pc.is_in(subject_values(table, subject_path), value_set=pc.cast(sorted(subjects), "string"))
    return bool(pc.any(pc.fill_null(matches, False)).as_py())


def erase(
    storage: LakeStorage,
    topic: TopicSpec,
    subjects: frozenset,
    run_tasks: Callable[[list[CompactionTask]], list[CompactionReport]],
    publish: Callable[[list[CompactionManifest]], None],
) -> tuple[list[CompactionReport], list[CompactionManifest], list[str]]:
    """Rewrites the affected partitions without the subjects' rows: write, commit, publish, delete."""
    tasks = plan_erasure(storage, topic, subjects, topic.target_file_mb * 1024 * 1024)
    return rewrite_generations(storage, tasks, run_tasks, publish)


def apply_retention(
    storage: LakeStorage,
    topic: TopicSpec,
    now: datetime,
    pii_key: bytes | None,
    run_tasks: Callable[[list[CompactionTask]], list[CompactionReport]],
    publish: Callable[[list[CompactionManifest]], None],
    unpublish: Callable[[list[TablePartition]], None],
) -> RetentionReport:
    """Expiry, then every erasure request; each action that changed something is audited."""
    report = RetentionReport()
    stamp = now.isoformat(timespec="seconds")
    expired, rows, deleted = expire(storage, topic, now, unpublish)
    if deleted:
        report.expired_partitions, report.expired_rows = expired, rows
        report.expired_dead_letter_files = sum(1 for path in deleted if path.startswith(layout.DEAD_LETTERS_PREFIX))
        report.audit_paths.append(write_audit(storage, topic, AuditEntry(
            "expire", topic.topic, stamp, rows, tuple(map(str, expired)), tuple(deleted),
            detail=_expiry_detail(topic, now),
        )))
    requests = read_erasure_requests(storage) if topic.subject_field else []
    if requests:
        reports, manifests, deleted = erase(storage, topic, subjects_to_match(topic, requests, pii_key), run_tasks, publish)
        if reports:
            report.erased_partitions = [r.task.partition for r in reports]
            report.erased_rows = sum(r.rows_erased for r in reports)
            report.audit_paths.append(write_audit(storage, topic, AuditEntry(
                "erase", topic.topic, stamp, report.erased_rows, tuple(map(str, report.erased_partitions)),
                tuple(deleted), tuple(f.path for m in manifests for f in m.files),
                tuple(r.request_id for r in requests), detail=f"rows whose {topic.subject_field} matched",
            )))
    return report
