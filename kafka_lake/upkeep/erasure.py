"""Erasure: the rows of requested subjects removed from every table with a `subject_field`, by rewriting only the
partitions that hold one through a new generation, as compaction does, so readers never see a half-erased partition.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow.parquet as pq

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
)
from kafka_lake.upkeep.subjects import ErasedSubjects


def plan_erasure(storage: LakeStorage, topic: TableSpec, erased: ErasedSubjects, target_bytes: int) -> list[CompactionTask]:
    """A rewrite task for every partition whose current files hold one of the subjects."""
    if not erased:
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
        if any(_holds_subject(storage, file, erased) for file in files):
            tasks.append(CompactionTask(topic, partition, (current.generation if current else 0) + 1, tuple(files),
                                        storage.root, target_bytes, erased, landed_lineage(current, files)))
    return tasks


def _holds_subject(storage: LakeStorage, path: str, erased: ErasedSubjects) -> bool:
    schema = pq.read_schema(storage.full_path(path), filesystem=storage.filesystem)
    columns = [column for column in erased.columns if column in schema.names]
    if not columns:
        return False
    return erased.holds_any(pq.read_table(storage.full_path(path), filesystem=storage.filesystem, columns=columns))


def erase(
    storage: LakeStorage,
    topic: TableSpec,
    erased: ErasedSubjects,
    run_tasks: Callable[[list[CompactionTask]], list[CompactionReport]],
    publish: Callable[[list[CompactionManifest]], None],
) -> Rewritten:
    """Rewrites the affected partitions without the subjects' rows: write, verify, commit, publish, delete."""
    tasks = plan_erasure(storage, topic, erased, topic.target_file_mb * 1024 * 1024)
    return rewrite_generations(storage, tasks, run_tasks, publish)
