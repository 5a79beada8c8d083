"""Erasure: the rows of requested subjects removed from every table with a `subject_field`, by rewriting only the
partitions that hold one through a new generation, as compaction does, so readers never see a half-erased partition.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_lake.decoding.pii import Pseudonymizer
from kafka_lake.lake import layout
from kafka_lake.lake.compaction_manifest import CompactionManifest, read_compaction
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import partition_of_path
from kafka_lake.lake.table_state import storage_partitions
from kafka_lake.table_spec import TableSpec
from kafka_lake.upkeep.compaction import (
    CompactionReport,
    CompactionTask,
    Rewritten,
    committed_raw_files,
    landed_lineage,
    rewrite_generations,
    subject_values,
)


@dataclass(frozen=True)
class ErasureRequest:
    request_id: str
    subject_ids: tuple[str, ...]
    requested_at: str
    path: str


def read_erasure_requests(storage: LakeStorage) -> list[ErasureRequest]:
    """`{LAKE_ROOT}/_erasure_requests/<id>.json`: {"subject_ids": [...], "requested_at": "…"}."""
    requests = []
    for stored in storage.list_files(layout.ERASURE_REQUESTS_PREFIX):
        request_id = layout.erasure_request_id(stored.path)
        if request_id is None:
            continue
        try:
            document = json.loads(storage.read_listed(stored.path))
            subjects = document["subject_ids"]
            if not isinstance(subjects, list) or not subjects:
                raise ValueError("subject_ids must be a non-empty list")
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"erasure request {storage.uri(stored.path)} cannot be read: {error}") from None
        requests.append(ErasureRequest(request_id, tuple(str(s) for s in subjects),
                                       str(document.get("requested_at", "")), stored.path))
    return requests


def subjects_to_match(topic: TableSpec, requests: list[ErasureRequest], pii_key: bytes | None) -> frozenset:
    """Requested ids as they are stored: pseudonymized when the subject field is a PII field."""
    subjects = {subject for request in requests for subject in request.subject_ids}
    if topic.subject_field and tuple(topic.subject_field.split(".")) in topic.pii_fields:
        if pii_key is None:
            raise ValueError(f"{topic.topic}: subject_field {topic.subject_field} is pseudonymized; set PII_HMAC_KEY to erase")
        pseudonymizer = Pseudonymizer(pii_key)
        subjects = {pseudonymizer.digest(subject) for subject in subjects}
    return frozenset(subjects)


def plan_erasure(storage: LakeStorage, topic: TableSpec, subjects: frozenset, target_bytes: int) -> list[CompactionTask]:
    """A rewrite task for every partition whose current files hold one of `subjects`."""
    path = topic.subject_column  # where the subject field landed: `rename` may have given it another column
    if path is None or not subjects:
        return []
    manifests = ManifestStore(storage, topic.database, topic.table)
    tasks = []
    for partition in storage_partitions(storage, topic.database, topic.table):
        current = read_compaction(storage, topic.database, topic.table, partition)
        if current is not None:
            files = [f.path for f in current.files]
        else:
            committed = committed_raw_files(storage, topic, manifests, partition.hour)
            files = sorted(p for p in committed if partition_of_path(p) == partition)
        if any(_holds_subject(storage, file, path, subjects) for file in files):
            tasks.append(CompactionTask(topic, partition, (current.generation if current else 0) + 1, tuple(files),
                                        storage.root, target_bytes, subjects, path, landed_lineage(current, files)))
    return tasks


def _holds_subject(storage: LakeStorage, path: str, subject_path: tuple[str, ...], subjects: frozenset) -> bool:
    table = pq.read_table(storage.full_path(path), filesystem=storage.filesystem, columns=[subject_path[0]])
    matches = pc.is_in(subject_values(table, subject_path), value_set=pc.cast(sorted(subjects), "string"))
    return bool(pc.any(pc.fill_null(matches, False)).as_py())


def erase(
    storage: LakeStorage,
    topic: TableSpec,
    subjects: frozenset,
    run_tasks: Callable[[list[CompactionTask]], list[CompactionReport]],
    publish: Callable[[list[CompactionManifest]], None],
) -> Rewritten:
    """Rewrites the affected partitions without the subjects' rows: write, verify, commit, publish, delete."""
    tasks = plan_erasure(storage, topic, subjects, topic.target_file_mb * 1024 * 1024)
    return rewrite_generations(storage, tasks, run_tasks, publish)
