"""Landing commits of an Iceberg table: one landed Kafka hour becomes one snapshot, and the check that the table
holds what landed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import And, Not
from pyiceberg.manifest import DataFile, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot

from kafka_lake.lake.landing_checks import CheckOutcome
from kafka_lake.lake.manifests import HourManifest, LandedFile
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition, partition_of_data_file
from kafka_lake.tables.iceberg.files import (
    OffsetRange,
    all_rows_within,
    commit_files,
    files_matching,
    landed_data_files,
    live_files_by_path,
    offsets_filter,
    placements_filter,
    read_rows,
    removed_unless_committed,
    write_rows,
)

log = logging.getLogger(__name__)

# Snapshot summary keys of the platform's commits (Iceberg keeps every string there, readers show it).
ACTION = "kafka-lake.action"  # land | compact | expire | erase
ROW_REMOVING_ACTIONS = ("expire", "erase")
KAFKA_HOUR = "kafka-lake.kafka-hour"
TOPIC = "kafka-lake.topic"
OFFSETS = "kafka-lake.offsets"  # "0:[120,180) 1:[75,90)"
PLACEMENTS = "kafka-lake.placements"  # the placement hours the landing wrote into, comma-separated
LANDED_AT = "kafka-lake.landed-at"
RUN_ID = "kafka-lake.run-id"
# A commit that meets another commit of the hour's rows is planned again on the new table, this many times at most.
COMMIT_ATTEMPTS = 5


@dataclass(frozen=True)
class HourCommit:
    """What committing a landed hour did to the table."""

    kafka_hour: str
    snapshot_id: int | None  # None: nothing was committed
    # "append", "overwrite", "unchanged" (the table held exactly this landing) or "superseded" (a later landing of
    # the hour wrote its manifest: that one is the table's to hold)
    operation: str
    files_added: tuple[str, ...]
    files_removed: tuple[str, ...]  # files whose rows were all an earlier landing's of this hour
    files_rewritten: tuple[str, ...]  # files holding this hour's rows among others', rewritten without them
    rows_added: int
    rows_removed: int
    duration_s: float


def hour_offsets(manifest: HourManifest) -> tuple[OffsetRange, ...]:
    return tuple(OffsetRange(p.partition, p.start, p.end) for p in manifest.partitions)


def hour_data_files(manifest: HourManifest) -> tuple[LandedFile, ...]:
    """The files of the landing that are table rows (dead letters stay in their own folders)."""
    return tuple(f for f in manifest.files if f.kind == "data")


def commit_landed_hour(table: Table, storage: LakeStorage, manifest: HourManifest,
                       previous: HourManifest | None = None, still_latest: Callable[[], bool] | None = None) -> HourCommit:
    """Makes the table's rows in the hour's offset ranges exactly the manifest's data files, in one snapshot.

    The hour manifest stays the record of boundaries: files an earlier landing of the hour committed are removed,
    files holding some of the hour's rows among others (compacted) are rewritten without them, the new files are
    added. Committing the same manifest again changes nothing.

    `previous`: the manifest this landing replaced (None when the hour never landed), whose placement hours, with
    those the table's history records for the hour, bound where earlier rows of the hour can be. A file path the
    table already holds is replaced by the new file of that path (a landing rewrote it in place).

    `still_latest`, when given, is asked after planning and before committing whether the manifest is still the
    hour's (the last manifest written wins); when not, nothing is committed ("superseded"), and a commit that met
    another commit of the hour's rows is planned again. The commit's own check then makes the table end with the
    landing whose manifest was written last, whatever order two runs of the hour commit in. Without it, such a
    commit fails (`ValidationException`).
    """
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            return _commit_once(table if attempt == 1 else table.refresh(), storage, manifest, previous, still_latest)
        # A file gone: a later landing of the hour removed this one's files as no snapshot's (it is superseded).
        except (ValidationException, CommitFailedException, FileNotFoundError) as conflict:
            if still_latest is None or attempt == COMMIT_ATTEMPTS:
                raise
            log.warning("%s hour %s: the commit met another commit of the hour (%s); planning it again",
                        manifest.topic, manifest.hour, conflict)
    raise AssertionError("unreachable")


def _commit_once(table: Table, storage: LakeStorage, manifest: HourManifest, previous: HourManifest | None,
                 still_latest: Callable[[], bool] | None) -> HourCommit:
    started = time.monotonic()
    ranges = hour_offsets(manifest)
    landed = hour_data_files(manifest)
    placements = {partition_of_data_file(f.path) for f in landed} | _earlier_placements(table, manifest, previous)
    scope = And(placements_filter(placements), offsets_filter(ranges))
    existing = files_matching(table, scope) if table.current_snapshot() is not None else []
    whole = [f for f in existing if all_rows_within(table, f, ranges)]
    # Compacted files: some of the hour's rows among other hours'.
    shared = [f for f in existing if not all_rows_within(table, f, ranges)]
    if still_latest is not None and not still_latest():
        return HourCommit(manifest.hour, None, "superseded", (), (), (), 0, 0, round(time.monotonic() - started, 3))
    added = landed_data_files(table, storage, landed)
    if not shared and _same_files(whole, added) and _latest_commit_is(table, manifest):
        return HourCommit(manifest.hour, None, "unchanged", (), (), (), 0, 0, round(time.monotonic() - started, 3))
    held = {(f.file_path, f.file_size_in_bytes, f.record_count) for f in whole}
    if not shared and whole and len(added) > len(held) and held <= {
            (f.file_path, f.file_size_in_bytes, f.record_count) for f in added}:
        # The open hour's next increment: the table holds its earlier ones as they are, and gains the new files.
        new = [f for f in added if (f.file_path, f.file_size_in_bytes, f.record_count) not in held]
        committed = commit_files(table, Operation.APPEND, (), new, _summary(manifest), conflicts=scope)
        return HourCommit(manifest.hour, committed.current_snapshot().snapshot_id, Operation.APPEND.value,
                          tuple(f.file_path for f in new), (), (), sum(f.record_count for f in new), 0,
                          round(time.monotonic() - started, 3))
    remainders = write_rows(table, storage, read_rows(table, shared, Not(offsets_filter(ranges)))) if shared else []
    earlier = {f.file_path: (f.file_size_in_bytes, f.record_count) for f in whole}
    in_place = sorted(f.file_path for f in added
                      if f.file_path in earlier and earlier[f.file_path] != (f.file_size_in_bytes, f.record_count))
    if in_place:
        log.warning("%s hour %s: %d file(s) were rewritten in place (%s): snapshots before this commit now read "
                    "their new content", manifest.topic, manifest.hour, len(in_place), ", ".join(in_place[:3]))
    operation = Operation.OVERWRITE if existing else Operation.APPEND
    with removed_unless_committed(storage, remainders):
        committed = commit_files(table, operation, whole + shared, added + remainders, _summary(manifest), conflicts=scope)
    removed_rows = sum(f.record_count for f in whole + shared) - sum(f.record_count for f in remainders)
    return HourCommit(
        kafka_hour=manifest.hour,
        snapshot_id=committed.current_snapshot().snapshot_id,
        operation=operation.value,
        files_added=tuple(f.file_path for f in added),
        files_removed=tuple(f.file_path for f in whole),
        files_rewritten=tuple(f.file_path for f in shared),
        rows_added=sum(f.record_count for f in added),
        rows_removed=removed_rows,
        duration_s=round(time.monotonic() - started, 3),
    )


def holds_landing(table: Table, manifest: HourManifest) -> bool:
    """Whether the table holds this landing of the hour: its latest commit of the hour is the landing's, or the hour's
    commits expired from the table's history (a landing that old was committed, or registration committed it)."""
    return _latest_commit_is(table, manifest) or (
        not hour_commits(table, manifest.hour) and _history_starts_after(table, manifest.landed_at))


def landed_hour_rows(table: Table, manifest: HourManifest, columns: Sequence[str] = ()) -> pa.Table:
    """Every row the current snapshot holds in the hour's offset ranges (only `columns`, when given), in the table's
    schema: in the placement hours its landing wrote into and those earlier landings of the hour did (compaction and
    erasure keep rows in their placement)."""
    offsets = offsets_filter(hour_offsets(manifest))
    placements = {partition_of_data_file(f.path) for f in hour_data_files(manifest)} | _earlier_placements(table, manifest, None)
    files = files_matching(table, And(placements_filter(placements), offsets)) if table.current_snapshot() else []
    return read_rows(table, files, offsets, columns)


def _latest_commit_is(table: Table, manifest: HourManifest) -> bool:
    commits = hour_commits(table, manifest.hour)
    return bool(commits) and _landing_of(commits[-1]) == (manifest.landed_at, manifest.run_id)


def same_landing(one: HourManifest, other: HourManifest) -> bool:
    """Whether two manifests record the same landing of an hour: when and by which run it landed, and its files
    (which an Iceberg topic's landing names by its own attempt)."""
    return (one.landed_at, one.run_id, {f.path for f in one.files}) == (other.landed_at, other.run_id,
                                                                          {f.path for f in other.files})


def _landing_of(snapshot: Snapshot) -> tuple[str | None, str | None]:
    properties = snapshot.summary.additional_properties
    return properties.get(LANDED_AT), properties.get(RUN_ID)


def _same_files(live: list[DataFile], landed: list[DataFile]) -> bool:
    def described(files: list[DataFile]) -> set:
        return {(f.file_path, f.file_size_in_bytes, f.record_count) for f in files}
    return described(live) == described(landed)


def _summary(manifest: HourManifest) -> dict[str, str]:
    written = sorted({partition_of_data_file(f.path) for f in hour_data_files(manifest)})
    return {
        ACTION: "land",
        KAFKA_HOUR: manifest.hour,
        TOPIC: manifest.topic,
        OFFSETS: " ".join(map(str, hour_offsets(manifest))),
        PLACEMENTS: ",".join(map(str, written)),
        LANDED_AT: manifest.landed_at,
        RUN_ID: manifest.run_id,
    }


def _earlier_placements(table: Table, manifest: HourManifest, previous: HourManifest | None) -> set[TablePartition]:
    """Where rows of earlier landings of the hour can be: the previous manifest's placement hours and those every
    commit of the hour still in the table's history recorded. Compaction and erasure keep rows in their placement."""
    placements = {partition_of_data_file(f.path) for f in hour_data_files(previous)} if previous else set()
    return {p for p in placements if p is not None} | recorded_placements(hour_commits(table, manifest.hour))


def recorded_placements(snapshots: Iterable[Snapshot]) -> set[TablePartition]:
    """The placement hours these snapshots' landings recorded writing into."""
    found = set()
    for snapshot in snapshots:
        recorded = snapshot.summary.additional_properties.get(PLACEMENTS, "") if snapshot.summary else ""
        found |= {partition_of_data_file(text + "/") for text in recorded.split(",") if text}
    return {p for p in found if p is not None}


def hour_commits(table: Table, kafka_hour: str) -> list[Snapshot]:
    """The snapshots still in the table's history that committed a landing of this Kafka hour, oldest first."""
    return [s for s in table.snapshots()
            if s.summary is not None and s.summary.additional_properties.get(KAFKA_HOUR) == kafka_hour
            and s.summary.additional_properties.get(ACTION) == "land"]


def landed_hour_matches_table(table: Table, storage: LakeStorage, manifest: HourManifest) -> CheckOutcome:
    """The table holds what the hour's manifest landed: its latest landing commit of the hour added exactly the
    manifest's data files (paths and row counts), and the current snapshot holds the manifest's rows in the hour's
    offset ranges, each once (compacted hours included); fewer only after an expiry or erasure committed since."""
    problems: list[str] = []
    metadata: dict[str, str | int] = {"kafka_hour": manifest.hour}
    commits = hour_commits(table, manifest.hour)
    expected = {f.path: f.rows for f in hour_data_files(manifest)}
    latest = commits[-1] if commits else None
    if latest is None:
        if _history_starts_after(table, manifest.landed_at):
            metadata["commit"] = "expired from the table's history; its rows are checked"
        else:
            problems.append(f"no commit of hour {manifest.hour} in the table's history")
    else:
        metadata["snapshot_id"] = latest.snapshot_id
        if _landing_of(latest) != (manifest.landed_at, manifest.run_id):
            problems.append(f"the latest commit of the hour (snapshot {latest.snapshot_id}) is of the landing at "
                            f"{_landing_of(latest)[0]}, not of the manifest's at {manifest.landed_at}")
        # An hour landed in increments was committed by each increment's append: together they added its files.
        lineage = {increment.landed_at for increment in manifest.increments} or {manifest.landed_at}
        ours = [commit for commit in commits if _landing_of(commit)[0] in lineage] or [latest]
        added = {path: f for commit in ours for path, f in live_files_by_path(table, storage,
                                                                               _added_by(table, commit)).items()}
        if {path: f.record_count for path, f in added.items()} != expected:
            missing, extra = sorted(set(expected) - set(added)), sorted(set(added) - set(expected))
            problems.append(f"snapshot {latest.snapshot_id} added {len(added)} file(s), the manifest lists "
                            f"{len(expected)}; missing {missing[:5]}, not in the manifest {extra[:5]}")
    landed, held = sum(expected.values()), landed_hour_rows(table, manifest, ("_kafka_partition", "_kafka_offset"))
    removed_since = [s.snapshot_id for s in table.snapshots()
                     if s.summary is not None and s.summary.additional_properties.get(ACTION) in ROW_REMOVING_ACTIONS
                     and (latest is None or s.sequence_number > latest.sequence_number)]
    metadata.update(rows_in_table=held.num_rows, rows_landed=landed)
    distinct = held.group_by(["_kafka_partition", "_kafka_offset"]).aggregate([]).num_rows
    if distinct != held.num_rows:
        problems.append(f"{held.num_rows - distinct} row(s) of the hour's offsets are in the table more than once")
    if held.num_rows > landed or (held.num_rows < landed and not removed_since):
        problems.append(f"the table holds {held.num_rows} row(s) in the hour's offsets, the manifest landed {landed}")
    elif held.num_rows < landed:
        metadata["rows_expired_or_erased"] = landed - held.num_rows
    if problems:
        return CheckOutcome(False, f"{manifest.topic} hour {manifest.hour}: " + "; ".join(problems), metadata)
    removed = f", {landed - held.num_rows} expired or erased since" if held.num_rows < landed else ""
    return CheckOutcome(True, f"{manifest.topic} hour {manifest.hour}: the table holds the landed rows once "
                              f"({held.num_rows} of {landed}{removed})", metadata)


def _history_starts_after(table: Table, landed_at: str) -> bool:
    """Whether the commit of a landing at `landed_at` may have expired: snapshots before the oldest one kept were
    expired (it has a parent no longer there), and the landing is not younger than it."""
    snapshots = table.snapshots()
    if not snapshots:
        return False
    oldest = min(snapshots, key=lambda s: s.timestamp_ms)
    expired_before = oldest.parent_snapshot_id is not None and table.snapshot_by_id(oldest.parent_snapshot_id) is None
    return expired_before and datetime.fromisoformat(landed_at).timestamp() * 1000 <= oldest.timestamp_ms


def _added_by(table: Table, snapshot: Snapshot) -> list[DataFile]:
    return [entry.data_file
            for manifest_file in snapshot.manifests(table.io) if manifest_file.added_snapshot_id == snapshot.snapshot_id
            for entry in manifest_file.fetch_manifest_entry(table.io, discard_deleted=True)
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id]
