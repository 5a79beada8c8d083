"""GDPR retention, run daily for each topic: expiry (`expiry.py`), then every erasure request (`erasure.py`), each
action that changed something audited (`audit.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from kafka_lake.lake import layout
from kafka_lake.lake.audit import AuditEntry, write_audit
from kafka_lake.lake.compaction_manifest import CompactionManifest
from kafka_lake.lake.manifests import ManifestChanges
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.table_spec import TableSpec
from kafka_lake.upkeep.compaction import CompactionReport, CompactionTask
from kafka_lake.upkeep.erasure import erase
from kafka_lake.upkeep.expiry import expire, expiry_detail
from kafka_lake.upkeep.subjects import erased_subjects, read_erasure_requests


class ErasureNotApplied(RuntimeError):
    """A partition's generation written without the subjects' rows did not verify: the partition is unchanged."""


@dataclass
class RetentionReport:
    expired_partitions: list[TablePartition] = field(default_factory=list)
    expired_rows: int = 0
    expired_dead_letter_files: int = 0
    erased_partitions: list[TablePartition] = field(default_factory=list)
    erased_rows: int = 0
    audit_paths: list[str] = field(default_factory=list)


def apply_retention(
    storage: LakeStorage,
    topic: TableSpec,
    now: datetime,
    pii_key: bytes | None,
    run_tasks: Callable[[list[CompactionTask]], list[CompactionReport]],
    publish: Callable[[list[CompactionManifest]], None],
    unpublish: Callable[[list[TablePartition]], None],
) -> RetentionReport:
    """Expiry, then every erasure request; each action that changed something is audited. The lake's log of manifest
    changes is pruned too (lake-wide: the first retention run of a day finds its old days, the others nothing)."""
    report = RetentionReport()
    ManifestChanges(storage).prune(now)
    stamp = now.isoformat(timespec="seconds")
    expired, rows, deleted = expire(storage, topic, now, unpublish)
    if deleted:
        report.expired_partitions, report.expired_rows = expired, rows
        report.expired_dead_letter_files = sum(1 for path in deleted if path.startswith(layout.DEAD_LETTERS_PREFIX))
        report.audit_paths.append(write_audit(storage, topic, AuditEntry(
            "expire", topic.topic, stamp, rows, tuple(map(str, expired)), tuple(deleted),
            detail=expiry_detail(topic, now),
        )))
    requests = read_erasure_requests(storage) if topic.subject_fields else []
    if requests:
        rewritten = erase(storage, topic, erased_subjects(topic, requests, pii_key), run_tasks, publish)
        reports, manifests, deleted = rewritten.reports, rewritten.manifests, rewritten.deleted
        if reports:
            report.erased_partitions = [r.task.partition for r in reports]
            report.erased_rows = sum(r.rows_erased for r in reports)
            report.audit_paths.append(write_audit(storage, topic, AuditEntry(
                "erase", topic.topic, stamp, report.erased_rows, tuple(map(str, report.erased_partitions)),
                tuple(deleted), tuple(f.path for m in manifests for f in m.files),
                tuple(r.request_id for r in requests), detail=f"rows whose {topic.subject_field_text} matched",
            )))
        if rewritten.refused:
            raise ErasureNotApplied(f"{topic.topic}: erasure rewrote partitions whose new generation does not hold "
                                    f"their rows, left as they were (run retention again): {'; '.join(rewritten.refused)}")
    return report
