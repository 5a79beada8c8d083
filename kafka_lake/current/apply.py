"""Applying landed Kafka hours to a change topic's current-state table, and the check that it holds them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from kafka_lake.current.changes import CHANGE, LATER_DELETION, HourChanges, hour_changes, newest_per_key, with_source
from kafka_lake.current.key_ranges import merge_by_key_range, range_files
from kafka_lake.current.ledger import AppliedHour, CurrentStateLedger, HourNotLanded
from kafka_lake.current.state_table import current_table_name, ensure_current_table, key_names
from kafka_lake.hours import ONE_HOUR, KafkaHour
from kafka_lake.lake.landing_checks import CheckOutcome
from kafka_lake.lake.manifests import HourManifest, ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.iceberg.catalog import lake_relative_path
from kafka_lake.tables.iceberg.commits import ACTION, KAFKA_HOUR, LANDED_AT, RUN_ID, TOPIC
from kafka_lake.tables.iceberg.files import rows_schema
from kafka_lake.tables.table_format import TableFormat
from kafka_lake.upkeep.subjects import accepted_erasures

# The check looks this far back for landed hours not applied: the hours a day of catch-up or backfill can leave.
CHECK_WINDOW_HOURS = 24


# An hour is applied in three steps, each safe to repeat: the keys it deletes are recorded (`ledger`), its changes are
# merged into the files holding their keys in one snapshot (`key_ranges`), and the application is recorded. A kill
# between two steps leaves work that applying the hour again finishes; every step keeps what is newer, so any order of
# hours, applied any number of times, ends as if each had been applied once, in order.
def apply_landed_hours(topic: TableSpec, storage: LakeStorage, catalog: Catalog, raw: TableFormat,
                       hours: Iterable[KafkaHour], run_id: str = "", pii_key: bytes | None = None) -> Iterator[AppliedHour]:
    """Applies each hour's landing, in the order given; `raw`: the topic's table format, which reads the hour's rows
    as its table holds them now; `pii_key`: to find erased subjects by their pseudonyms. Yields each hour once it is
    recorded as applied."""
    table = ensure_current_table(catalog, storage, topic)
    manifests = ManifestStore(storage, topic.database, topic.table)
    ledger = CurrentStateLedger(storage, topic)
    for hour in hours:
        manifest = manifests.read(hour)
        if manifest is None:
            raise HourNotLanded(f"{topic.topic} hour {hour}: raw/{topic.name} has not landed it, so there is nothing to "
                                f"apply to {current_table_name(topic)}; land the hour first")
        yield apply_hour(topic, storage, table.refresh(), raw, ledger, manifest, run_id, pii_key)


def apply_hour(topic: TableSpec, storage: LakeStorage, table: Table, raw: TableFormat, ledger: CurrentStateLedger,
               manifest: HourManifest, run_id: str = "", pii_key: bytes | None = None) -> AppliedHour:
    started = time.monotonic()
    hour = manifest.kafka_hour
    schema = rows_schema(table)
    # An accepted erasure request holds for every application after it: the subjects' changes (a delete event's
    # `before` included) are left out, even of an hour landed before it and not erased yet.
    erased = accepted_erasures(storage, topic, pii_key)
    rows = [erased.without(held)[0] for held in raw.landed_hour_rows(topic, manifest)]
    changes = hour_changes(topic, hour, rows, schema)
    # Before the table changes: an earlier hour applied meanwhile, or after a kill, must not bring these keys back.
    ledger.record_deletions(hour, changes.deletions)
    effective = with_later_deletions(changes, ledger.deletions_after(hour), key_names(topic), schema)
    done = merge_by_key_range(table, storage, topic, effective, {
        ACTION: "merge", KAFKA_HOUR: manifest.hour, TOPIC: manifest.topic, LANDED_AT: manifest.landed_at,
        RUN_ID: manifest.run_id})
    applied = AppliedHour(
        database=topic.database, table=topic.table, current_table=current_table_name(topic), hour=manifest.hour,
        landed_at=manifest.landed_at, run_id=manifest.run_id,
        offsets={str(p.partition): [p.start, p.end] for p in manifest.partitions},
        rows_read=changes.rows_read, keyless=changes.keyless, changes=changes.changes.num_rows,
        inserts=done.inserts, updates=done.updates, deletes=done.deletes, snapshot_id=done.snapshot_id, rows=done.rows,
        files_rewritten=len(done.files_removed), files_written=len(done.files_added), bytes_read=done.bytes_read,
        bytes_written=done.bytes_written, attempts=done.attempts,
        applied_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_s=round(time.monotonic() - started, 3), applied_by=run_id,
        notes={"files_added": [lake_relative_path(storage, path) or path for path in done.files_added]},
    )
    ledger.record(applied)
    return applied


def with_later_deletions(changes: HourChanges, later: list[pa.Table], keys: list[str], schema: pa.Schema) -> pa.Table:
    """The hour's changes, each replaced by a later hour's deletion of its key where that is newer: applying an earlier
    hour after a later one deleted a key leaves the key deleted."""
    if not later:
        return changes.changes
    deletions = pa.concat_tables(later, promote_options="permissive")
    rows = pa.Table.from_arrays([deletions.column(f.name).cast(f.type) if f.name in deletions.column_names
                                 else pa.nulls(deletions.num_rows, f.type) for f in schema], schema=schema)
    candidates = pa.concat_tables([changes.changes, with_source(rows, LATER_DELETION, True)])
    newest, present = newest_per_key(candidates, keys)
    return newest.filter(pa.array(present[CHANGE]))  # the keys the hour changed, not every key ever deleted


def current_state_check(topic: TableSpec, storage: LakeStorage, table: Table, hour: KafkaHour) -> CheckOutcome:
    """No key has two rows (the files' key ranges are apart, and the files the hour's application wrote hold each key
    once), and the table is not behind the landings: the hour's landing is the one applied, and every hour landed in
    the day up to it is applied."""
    manifests, ledger = ManifestStore(storage, topic.database, topic.table), CurrentStateLedger(storage, topic)
    problems: list[str] = []
    manifest, applied = manifests.read(hour), ledger.applied(hour)
    if manifest is not None and applied is None:
        problems.append(f"hour {hour} landed (at {manifest.landed_at}) and is not applied")
    elif manifest is not None and applied is not None and not applied.applies(manifest):
        problems.append(f"hour {hour} was landed again at {manifest.landed_at}, after the landing applied "
                        f"({applied.landed_at}): the table is behind it")
    first = KafkaHour(hour.start - (CHECK_WINDOW_HOURS - 1) * ONE_HOUR)
    behind = sorted(set(manifests.landed_in(first, hour)) - set(ledger.applied_in(first, hour)) - {hour})
    if behind:
        problems.append(f"{len(behind)} earlier landed hour(s) not applied: {', '.join(map(str, behind[:10]))}")
    keys = key_names(topic)
    files = range_files(table, keys[0])
    for before, after in zip(files, files[1:]):
        if not before.high < after.low:
            problems.append(f"data files {before.data_file.file_path} and {after.data_file.file_path} hold overlapping "
                            f"key ranges ({before.low}..{before.high} and {after.low}..{after.high})")
    live = {lake_relative_path(storage, f.data_file.file_path): f.data_file for f in files}
    written = [path for path in (applied.notes.get("files_added", []) if applied else []) if path in live]
    twice = _keys_held_twice(storage, written, keys)
    if twice:
        problems.append(f"{twice} key(s) have more than one row in the files hour {hour} wrote")
    snapshot = table.current_snapshot()
    metadata = {"rows": int(snapshot.summary["total-records"]) if snapshot and snapshot.summary else 0,
                "data_files": len(files), "files_checked_for_keys": len(written),
                "iceberg_snapshot_id": snapshot.snapshot_id if snapshot else 0}
    name = current_table_name(topic)
    if problems:
        return CheckOutcome(False, f"{name} hour {hour}: " + "; ".join(problems), metadata)
    return CheckOutcome(True, f"{name} holds one row per key and every landed hour up to {hour} of the last "
                              f"{CHECK_WINDOW_HOURS} h, its landing the one applied", metadata)


def _keys_held_twice(storage: LakeStorage, paths: list[str], keys: list[str]) -> int:
    if not paths:
        return 0
    held = pa.concat_tables(pq.read_table(storage.full_path(path), filesystem=storage.filesystem, columns=keys)
                            for path in paths)
    return held.num_rows - held.group_by(keys).aggregate([]).num_rows
