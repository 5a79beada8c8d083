"""Apache Iceberg as a table format: each landed hour one snapshot of `<database>.<table>`, compaction a replace
snapshot, expiry and erasure delete snapshots, and files leave storage when the snapshots holding them expire.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import ClassVar

import pyarrow as pa
from botocore.exceptions import BotoCoreError
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import ServerError, ServiceUnavailableError
from pyiceberg.table import Table
from sqlalchemy.exc import SQLAlchemyError

from kafka_lake.lake import layout
from kafka_lake.lake.audit import AuditEntry, write_audit
from kafka_lake.lake.landed_files import (
    attempt_folders,
    files_in_hour_ranges,
    letter_prefixes,
    remove_orphans,
    remove_replaced_files,
    replaced_files,
)
from kafka_lake.lake.landing_checks import CheckOutcome
from kafka_lake.lake.manifests import HourManifest, ManifestStore
from kafka_lake.lake.table_partition import TablePartition, partition_of_path
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, lake_relative_path, open_catalog, table_location
from kafka_lake.tables.iceberg.commits import (
    HourCommit,
    commit_landed_hour,
    holds_landing,
    hour_commits,
    hour_data_files,
    landed_hour_matches_table,
    landed_hour_rows,
    recorded_placements,
    same_landing,
)
from kafka_lake.tables.iceberg.files import files_matching
from kafka_lake.tables.iceberg.maintenance import (
    compact_placement_hour,
    compaction_kept_rows,
    erase_subjects,
    expire_placement_hours,
    expire_snapshots,
    expired_placements_filter,
    remove_orphan_files,
    remove_unheld_files,
)
from kafka_lake.tables.iceberg.schema import IcebergSchemaError, check_topic, ensure_table, iceberg_rows
from kafka_lake.tables.table_format import (
    FormatDescriptions,
    HourCommitted,
    LakeUri,
    Markdown,
    TableAccess,
    TableOutcome,
)
from kafka_lake.upkeep.compaction import check_due, nothing_to_compact, raw_hours_that_feed
from kafka_lake.upkeep.expiry import expire_dead_letters, expiry_detail, retention_cutoff
from kafka_lake.upkeep.subjects import erased_subjects, read_erasure_requests

# Files no snapshot holds are deleted once older than this: younger ones may be a landing's still being written.
# Longer than any landing of an hour runs.
ORPHAN_MIN_AGE = timedelta(days=1)
SHOWN = 100
# What a catalog or storage that cannot be reached raises: the network (REST, S3: OSError), a SQL catalog's
# database, Glue, a REST catalog answering 5xx.
UNREACHABLE = (OSError, SQLAlchemyError, BotoCoreError, ServerError, ServiceUnavailableError)


class IcebergCommitFailed(RuntimeError):
    """A landed hour's manifest is written, but its snapshot could not be committed."""


class IcebergTables:
    """Iceberg tables in the deployment's Iceberg catalog, their files in the Hive layout's folders.

    The work is done in `iceberg.commits` and `iceberg.maintenance`; this class joins it to the seam of table formats,
    keeps storage clean of files no snapshot holds, audits every deletion and says what each action shows."""

    name: ClassVar[str] = "iceberg"
    compaction_check: ClassVar[str] = "row_set_unchanged"
    registration_check: ClassVar[str] = "table_matches_landing"
    retention_check: ClassVar[str] = "nothing_expired_remains"
    landing_check: ClassVar[str | None] = "table_matches_landing"
    kind: ClassVar[str | None] = "iceberg"
    runs_on_spark: ClassVar[bool] = False  # pyiceberg on the Dagster process
    holds_raw_values: ClassVar[bool] = False  # an Iceberg schema is folded from schema versions, and a raw archive has none

    @staticmethod
    def schema_problem(topic: TableSpec) -> str | None:
        try:
            check_topic(topic)
        except IcebergSchemaError as error:
            return str(error)
        return None

    @staticmethod
    def described(topic: TableSpec) -> FormatDescriptions:
        return FormatDescriptions(
            compaction=f"rewritten into files near {topic.target_file_mb} MiB in one Iceberg replace snapshot",
            registration=f"the Iceberg catalog: columns by field id from every Avro version of `{topic.topic}`, and "
                         f"every landed hour committed",
            retention=f" Snapshots are kept {topic.snapshot_retention_days} days for time travel; expired and erased "
                      f"rows leave storage with them.",
        )

    @staticmethod
    def landed_rows(table: pa.Table) -> pa.Table:
        return iceberg_rows(table)

    def __init__(self, access: TableAccess):
        self.access = access
        self.storage = access.storage
        self._ensured: dict[str, Table] = {}

    @cached_property
    def catalog_config(self) -> IcebergCatalogConfig:
        return self.access.iceberg_catalog or IcebergCatalogConfig(self.storage.root)

    @cached_property
    def catalog(self) -> Catalog:
        return open_catalog(self.catalog_config)

    def table(self, topic: TableSpec) -> Table:
        """The topic's table, created or evolved to the catalog's versions once per instance, then as it is now."""
        if topic.name not in self._ensured:
            location = table_location(self.storage, topic.database, topic.table)
            self._ensured[topic.name] = ensure_table(self.catalog, topic, location)
            return self._ensured[topic.name]
        return self._ensured[topic.name].refresh()

    def file_attempt(self) -> str:
        # A committed file never changes: snapshots kept for time travel read it; a re-landing writes new ones.
        return layout.new_attempt()

    def prepare(self, topic: TableSpec) -> None:
        self.table(topic)

    # --- landing ------------------------------------------------------------------------------------------

    def commit_hour(self, topic: TableSpec, manifest: HourManifest, previous: HourManifest | None,
                    attempt: str) -> HourCommitted:
        """One snapshot makes the hour's rows the manifest's, unless a later landing of the hour wrote its manifest
        meanwhile; then files are cleaned: dead letters as the Hive layout does (their names do not change), data
        files of landings that finished but are no snapshot's at once, those of attempts that never finished once
        `ORPHAN_MIN_AGE` old (a younger one may be a landing's still running)."""
        manifests = ManifestStore(self.storage, topic.database, topic.table)

        def still_latest() -> bool:
            latest = manifests.read(manifest.kafka_hour)
            return latest is not None and same_landing(latest, manifest)

        try:
            table = self.table(topic)
            commit = commit_landed_hour(table, self.storage, manifest, previous, still_latest)
        except UNREACHABLE as error:
            raise IcebergCommitFailed(
                f"{topic.topic} hour {manifest.hour}: its files and manifest are written, but committing them to the "
                f"Iceberg table {topic.database}.{topic.table} ({self.catalog_config.describe()}) failed: "
                f"{type(error).__name__}: {error}. Once the catalog and the lake answer, landing the hour again or "
                f"materializing catalog/{topic.database}/{topic.table} for its placement hours commits it") from error
        return self._clean_after(topic, table, manifest, previous, commit)

    def _clean_after(self, topic: TableSpec, table: Table, manifest: HourManifest, previous: HourManifest | None,
                     commit: HourCommit) -> HourCommitted:
        table = table.refresh()
        mine = [f.path for f in hour_data_files(manifest)]
        if commit.operation == "superseded":
            # The later landing is the hour's: this one's files are no snapshot's, and nothing else is this run's.
            return HourCommitted((), tuple(remove_unheld_files(table, self.storage, mine)), _commit_metadata(commit))
        dead_letters = letter_prefixes(topic)
        replaced = remove_replaced_files(self.storage, previous, manifest, kinds=("dead_letter", "unrouted"))
        orphans = remove_orphans(self.storage, topic, manifest, dead_letters)
        finished = [f.path for f in replaced_files(previous, manifest, kinds=("data",))]
        orphans += remove_unheld_files(table, self.storage, finished)
        placements = {p for p in map(partition_of_path, mine + finished) if p is not None} | recorded_placements(
            hour_commits(table, manifest.hour))
        # Data folders this hour's attempts wrote into (its journal), besides the placements of its commits.
        attempted = attempt_folders(self.storage, topic, manifest, (layout.table_prefix(topic.database, topic.table),))
        in_ranges = files_in_hour_ranges(self.storage, topic, manifest, [
            p.raw_directory(topic.database, topic.table) for p in sorted(placements)] + attempted)
        old_enough = datetime.now(timezone.utc) - ORPHAN_MIN_AGE
        orphans += remove_unheld_files(table, self.storage, [
            stored.path for stored in in_ranges if stored.modified is not None and stored.modified < old_enough])
        return HourCommitted(tuple(replaced), tuple(orphans), _commit_metadata(commit))

    def landed_hour_check(self, topic: TableSpec, manifest: HourManifest) -> CheckOutcome:
        return landed_hour_matches_table(self.table(topic), self.storage, manifest)

    def landed_hour_rows(self, topic: TableSpec, manifest: HourManifest) -> list[pa.Table]:
        """Read from the current snapshot; a landing whose commit is missing (its run died between its manifest and
        its commit) is committed first, as registration would."""
        table = self.table(topic)
        if not holds_landing(table, manifest):
            self.commit_hour(topic, manifest, manifest, "")
            table = table.refresh()
        return [landed_hour_rows(table, manifest)]

    # --- compaction ---------------------------------------------------------------------------------------

    def compact_hour(self, topic: TableSpec, hour: datetime) -> TableOutcome:
        check_due(topic, hour, ManifestStore(self.storage, topic.database, topic.table))
        table = self.table(topic)
        done = [compact_placement_hour(table.refresh(), self.storage, TablePartition(v.version, hour))
                for v in topic.schema_versions]
        rewritten = [c for c in done if c.snapshot_id is not None]
        outcomes = [compaction_kept_rows(table.refresh(), snapshot_id)
                    for snapshot_id in (c.snapshot_id for c in rewritten) if snapshot_id is not None]
        rows = sum(c.rows for c in done)
        check = CheckOutcome(
            all(o.passed for o in outcomes),
            "; ".join(o.description for o in outcomes)
            or f"no placement of the hour had more than one file: its {rows} row(s) stay in the files they were in",
            {"snapshots": len(rewritten)})
        if not rows:
            # A landing whose commit died before it holds no row yet: registration commits it, hence only a warning.
            check = nothing_to_compact(self.storage, topic, hour, {"snapshots": 0}, severity_if_rows="warn")
        metadata = {
            "rows": rows,
            "partitions_rewritten": len(rewritten),
            "partitions_up_to_date": len(done) - len(rewritten),
            "files_before": sum(len(c.files_removed) for c in rewritten),
            "files_after": sum(len(c.files_added) for c in rewritten),
            "iceberg_snapshot_ids": [c.snapshot_id for c in rewritten],
            "iceberg_table": f"{topic.database}.{topic.table}",
        }
        summary = (f"{topic.topic} {hour:%Y-%m-%d %H}:00: {len(rewritten)} placement(s) rewritten in replace "
                   f"snapshot(s) {', '.join(str(c.snapshot_id) for c in rewritten) or '(none)'}, {rows} row(s)")
        return TableOutcome(summary, metadata, check)

    # --- registration -------------------------------------------------------------------------------------

    def register(self, topic: TableSpec, hours: Collection[datetime]) -> TableOutcome:
        """The table created or evolved to the catalog's versions; every landed Kafka hour that can place rows in
        these placement hours checked against the table, and a landing whose commit is missing (its run died
        between its manifest and its commit) committed from its manifest."""
        hours = sorted(hours)
        table = self.table(topic)
        manifests = ManifestStore(self.storage, topic.database, topic.table)
        kafka_hours = sorted({kafka_hour for hour in hours for kafka_hour in raw_hours_that_feed(topic, hour)})
        checked, completed, problems = 0, [], []
        for kafka_hour in kafka_hours:
            manifest = manifests.read(kafka_hour)
            if manifest is None:
                continue
            checked += 1
            outcome = landed_hour_matches_table(table.refresh(), self.storage, manifest)
            if not outcome.passed:
                self.commit_hour(topic, manifest, manifest, "")
                completed.append(manifest.hour)
                outcome = landed_hour_matches_table(table.refresh(), self.storage, manifest)
            if not outcome.passed:
                problems.append(outcome.description)
        table = table.refresh()
        snapshot = table.current_snapshot()
        check = CheckOutcome(not problems, "; ".join(problems) or (
            f"the table holds the rows of each of the {checked} landed Kafka hour(s) that feed these placement hours"
            + (f" (committed now from their manifests: {', '.join(completed)})" if completed else "")),
            {"kafka_hours_checked": checked, "kafka_hours_committed": completed})
        summary = (f"{topic.database}.{topic.table} (Iceberg, {self.catalog_config.describe()}) {hours[0]:%Y-%m-%d %H}:00 "
                   f"to {hours[-1]:%Y-%m-%d %H}:00: {checked} landed hour(s) checked, {len(completed)} committed now")
        return TableOutcome(summary, self._table_metadata(topic, table, snapshot, hours[-1]) | {
            "kafka_hours_checked": checked, "kafka_hours_committed": completed}, check)

    def _table_metadata(self, topic: TableSpec, table: Table, snapshot, hour: datetime) -> dict:
        schema = table.schema()
        columns = ["| column | type |", "|---|---|"] + [f"| {f.name} | `{f.field_type}` |" for f in schema.fields]
        name = f"{topic.database}.{topic.table}"
        date, hour_text = layout.date_text(hour), f"{hour:%H}"
        return {
            "table": name,
            "catalog": f"Iceberg: {self.catalog_config.describe()}",
            "iceberg_catalog_name": self.catalog_config.name,
            "location": LakeUri(table.location()),
            "metadata_location": LakeUri(table.metadata_location),
            "columns": len(schema.fields),
            "schema": Markdown("\n".join(columns)),
            "schema_versions": [v.version for v in topic.schema_versions],
            "iceberg_snapshot_id": snapshot.snapshot_id if snapshot else 0,
            "snapshots": len(table.snapshots()),
            "sample_query": Markdown(
                f"DuckDB:\n```sql\nSELECT * FROM iceberg_scan('{table.metadata_location}') WHERE date = '{date}' "
                f"AND hour = '{hour_text}' LIMIT 100\n```\nTrino, Athena, Spark SQL (Iceberg catalog):\n```sql\n"
                f"SELECT * FROM {topic.database}.{topic.table} WHERE \"date\" = '{date}' AND \"hour\" = '{hour_text}' "
                f"LIMIT 100\n```"),
        }

    # --- retention ----------------------------------------------------------------------------------------

    def retain(self, topic: TableSpec, now: datetime, pii_key: bytes | None) -> TableOutcome:
        """Expired hours deleted from the table, dead letters expired, erasure requests applied, snapshots older than
        `snapshot_retention_days` expired with the files only they held (expired and erased rows leave storage
        then), files no snapshot holds removed; every deletion audited."""
        table = self.table(topic)
        stamp = now.isoformat(timespec="seconds")
        audits: list[str] = []
        cutoff = retention_cutoff(topic, now)
        expiry = expire_placement_hours(table, cutoff) if cutoff is not None else None
        dead_letters = expire_dead_letters(self.storage, topic, now)
        expired_rows = expiry.rows if expiry else 0
        if (expiry and expiry.snapshot_ids) or dead_letters:
            snapshots = f"; delete snapshot {expiry.snapshot_ids[0]}" if expiry and expiry.snapshot_ids else ""
            audits.append(write_audit(self.storage, topic, AuditEntry(
                "expire", topic.topic, stamp, expired_rows, tuple(map(str, expiry.partitions if expiry else ())),
                tuple(dead_letters) + tuple(self._lake_paths(expiry.files_removed if expiry else ())),
                detail=expiry_detail(topic, now) + snapshots + self._leaves_storage(topic, now))))
        erased_rows, erased_partitions = 0, tuple[TablePartition, ...]()
        requests = read_erasure_requests(self.storage) if topic.subject_fields else []
        if requests:
            erasure = erase_subjects(table.refresh(), self.storage, erased_subjects(topic, requests, pii_key))
            if erasure.snapshot_ids:
                erased_rows, erased_partitions = erasure.rows, erasure.partitions
                audits.append(write_audit(self.storage, topic, AuditEntry(
                    "erase", topic.topic, stamp, erasure.rows, tuple(map(str, erasure.partitions)),
                    self._lake_paths(erasure.files_removed), self._lake_paths(erasure.files_added),
                    tuple(r.request_id for r in requests),
                    detail=f"rows whose {topic.subject_field_text} matched; overwrite snapshot {erasure.snapshot_ids[0]}"
                           + self._leaves_storage(topic, now))))
        kept_from = now - timedelta(days=topic.snapshot_retention_days)
        swept = expire_snapshots(table.refresh(), self.storage, kept_from)
        if swept.files_deleted:
            data = [path for path in swept.files_deleted if path.endswith(".parquet")]
            audits.append(write_audit(self.storage, topic, AuditEntry(
                "expire_snapshots", topic.topic, stamp, 0, (), tuple(swept.files_deleted),
                detail=f"snapshots older than {topic.snapshot_retention_days} days (before {kept_from:%Y-%m-%d %H:%M}Z) "
                       f"expired: {len(swept.snapshot_ids)} snapshot(s); {len(data)} data file(s) no kept snapshot "
                       f"held deleted, with the rows expired or erased in them")))
        table = table.refresh()
        orphans = remove_orphan_files(table, self.storage, _kept_placements(table), now - ORPHAN_MIN_AGE)
        metadata = {
            "expired_partitions": len(expiry.partitions) if expiry else 0,
            "expired_rows": expired_rows,
            "expired_dead_letter_files": len(dead_letters),
            "erased_partitions": len(erased_partitions),
            "erased_rows": erased_rows,
            "snapshots_expired": len(swept.snapshot_ids),
            "files_deleted_with_snapshots": len(swept.files_deleted),
            "orphan_files_removed": len(orphans),
            "iceberg_snapshot_id": table.current_snapshot().snapshot_id if table.current_snapshot() else 0,
            "audit_entries": [self.storage.uri(path) for path in audits],
            "retention_days": topic.retention_days or 0,
            "snapshot_retention_days": topic.snapshot_retention_days,
        }
        summary = (f"{topic.topic}: {metadata['expired_partitions']} placement(s) expired, {erased_rows} row(s) erased, "
                   f"{len(swept.snapshot_ids)} snapshot(s) expired deleting {len(swept.files_deleted)} file(s), "
                   f"{len(orphans)} orphan file(s) removed")
        return TableOutcome(summary, metadata, self._nothing_expired_remains(topic, table, now))

    def _nothing_expired_remains(self, topic: TableSpec, table: Table, now: datetime) -> CheckOutcome:
        """No expired placement hour in the current snapshot, and no snapshot kept past its retention: the files of
        expired or erased rows are gone once no kept snapshot holds them."""
        cutoff = retention_cutoff(topic, now)
        problems = []
        if cutoff is not None and table.current_snapshot() is not None:
            left = sorted({str(partition_of_path(lake_relative_path(self.storage, f.file_path) or ""))
                           for f in files_matching(table, expired_placements_filter(cutoff))})
            if left:
                problems.append(f"expired placement hours still in the table: {', '.join(left[:SHOWN])}")
        kept_from = now - timedelta(days=topic.snapshot_retention_days)
        current = table.current_snapshot()
        stale = [s.snapshot_id for s in table.snapshots()
                 if s.timestamp_ms < kept_from.timestamp() * 1000 and (current is None or s.snapshot_id != current.snapshot_id)]
        if stale:
            problems.append(f"{len(stale)} snapshot(s) older than {topic.snapshot_retention_days} days still kept: {stale[:10]}")
        if problems:
            return CheckOutcome(False, "; ".join(problems), {"stale_snapshots": len(stale)})
        holds = f"no placement hour ends before {cutoff:%Y-%m-%d %H:%M}Z" if cutoff else "the topic keeps rows forever"
        return CheckOutcome(True, f"{holds}; no snapshot older than {topic.snapshot_retention_days} days kept",
                            {"stale_snapshots": 0})

    def _lake_paths(self, uris) -> tuple[str, ...]:
        return tuple(lake_relative_path(self.storage, uri) or uri for uri in uris)

    @staticmethod
    def _leaves_storage(topic: TableSpec, now: datetime) -> str:
        leaves = now + timedelta(days=topic.snapshot_retention_days)
        return (f"; the rows stay readable by time travel to older snapshots, and their files in storage, until those "
                f"snapshots expire ({topic.snapshot_retention_days} days: by {leaves:%Y-%m-%d}), audited as expire_snapshots")


def _commit_metadata(commit: HourCommit) -> dict:
    return {
        "iceberg_snapshot_id": commit.snapshot_id or 0,
        "iceberg_operation": commit.operation,
        "iceberg_files_added": len(commit.files_added),
        "iceberg_files_removed": len(commit.files_removed),
        "iceberg_files_rewritten": len(commit.files_rewritten),
        "iceberg_commit_s": commit.duration_s,
    }


def _kept_placements(table: Table) -> set[TablePartition]:
    """The placement hours landings wrote into in the snapshots kept: where a crashed attempt's files can be, as
    its re-landing writes where it did. Bounded by the snapshots kept, not by the table's age."""
    return recorded_placements(table.snapshots())
