"""The Hive layout as a table format: a landed hour's manifest is its commit, compaction writes generation folders
that the table catalog (Hive metastore or Glue) is switched to, retention drops partitions there first.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from functools import cached_property
from typing import ClassVar

import pyarrow as pa

from kafka_lake.lake import layout
from kafka_lake.lake.compaction_manifest import CompactionManifest
from kafka_lake.lake.landed_files import letter_prefixes, remove_orphans, remove_replaced_files
from kafka_lake.lake.landing_checks import CheckOutcome
from kafka_lake.lake.manifests import HourManifest
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.lake.table_state import landed_hour_rows, storage_partitions
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.catalogs.protocol import TableCatalog, TableChange
from kafka_lake.tables.catalogs.reconciliation import (
    ReconcileReport,
    partition_differences,
    publish,
    reconcile,
    storage_partition_uris,
)
from kafka_lake.tables.table_format import (
    FormatDescriptions,
    HourCommitted,
    LakeUri,
    Markdown,
    TableAccess,
    TableOutcome,
)
from kafka_lake.tables.table_schema import TableDefinition, table_definition
from kafka_lake.upkeep.compaction import CompactionResult, compact_hour, generations_hold_their_sources
from kafka_lake.upkeep.expiry import is_expired, retention_cutoff
from kafka_lake.upkeep.retention import apply_retention

SHOWN = 100  # partitions listed in metadata; a backfill of months would drown the UI


def definition_for(topic: TableSpec, storage) -> TableDefinition:
    return table_definition(topic, storage.uri(layout.table_prefix(topic.database, topic.table)))


class HiveTables:
    """Tables of `schema_version=/date=/hour=` folders, registered in a table catalog.

    The work is done in `lake.landed_files`, `upkeep.compaction`, `upkeep.retention` and `tables.catalogs`; this class
    joins it to the seam of table formats and says what each action shows."""

    name: ClassVar[str] = "hive"
    compaction_check: ClassVar[str] = "row_set_unchanged"
    registration_check: ClassVar[str] = "catalog_matches_storage"
    retention_check: ClassVar[str] = "nothing_expired_remains"
    landing_check: ClassVar[str | None] = None
    kind: ClassVar[str | None] = None
    runs_on_spark: ClassVar[bool] = True
    holds_raw_values: ClassVar[bool] = True

    @staticmethod
    def schema_problem(topic: TableSpec) -> str | None:
        return None  # the table's columns are merged from its versions at registration, which says what cannot be

    @staticmethod
    def described(topic: TableSpec) -> FormatDescriptions:
        return FormatDescriptions(
            compaction=f"rewritten into files near {topic.target_file_mb} MiB",
            registration=f"the table catalog: columns from every Avro version of `{topic.topic}`, and the partitions "
                         f"of each placement hour equal to those in storage",
        )

    @staticmethod
    def landed_rows(table: pa.Table) -> pa.Table:
        return table

    def __init__(self, access: TableAccess):
        self.access = access
        self.storage = access.storage

    def file_attempt(self) -> str:
        return ""  # a re-run of a slice rewrites the same files

    def prepare(self, topic: TableSpec) -> None:
        pass  # the manifest alone commits an hour

    def commit_hour(self, topic: TableSpec, manifest: HourManifest, previous: HourManifest | None,
                    attempt: str) -> HourCommitted:
        """The manifest is the commit; then the files it replaced and those of crashed attempts go. A topic whose open
        hour lands in increments is read through the table catalog within minutes: the placement hours each landing
        wrote into are registered at once (their raw folders, or their generation), not after compaction."""
        replaced = remove_replaced_files(self.storage, previous, manifest)
        prefixes = (layout.table_prefix(topic.database, topic.table), *letter_prefixes(topic))
        orphans = remove_orphans(self.storage, topic, manifest, prefixes)
        metadata = {}
        if topic.open_hour_minutes is not None:
            hours = sorted({f.placement_hour for f in manifest.files if f.kind == "data"})
            if hours:
                registered = self.register(topic, hours)
                metadata = {"registered": registered.summary}
        return HourCommitted(tuple(replaced), tuple(orphans), metadata)

    def landed_hour_check(self, topic: TableSpec, manifest: HourManifest) -> CheckOutcome | None:
        return None

    def landed_hour_rows(self, topic: TableSpec, manifest: HourManifest) -> list[pa.Table]:
        return landed_hour_rows(self.storage, topic.database, topic.table, manifest)

    # --- compaction ---------------------------------------------------------------------------------------

    def compact_hour(self, topic: TableSpec, hour: datetime) -> TableOutcome:
        result = compact_hour(topic, hour, self.storage,
                              lambda tasks: self._run_compactions(tasks, f"compact {topic.topic} {hour:%Y-%m-%d %H}:00"),
                              lambda manifests: self._switch_to_generations(topic, manifests),
                              pii_key=self.access.pii_key)
        summary = (f"{topic.topic} {hour:%Y-%m-%d %H}:00: {len(result.manifests)} partition(s) rewritten, "
                   f"{len(result.switched)} switched to the generation an interrupted run committed, "
                   f"{len(result.kept)} already compact, {len(result.deleted_sources)} source files deleted")
        return TableOutcome(summary, self._compaction_metadata(result),
                            generations_hold_their_sources(self.storage, topic, result))

    def _compaction_metadata(self, result: CompactionResult) -> dict:
        reports, manifests = result.reports, result.manifests
        rows = sum(r.rows for r in reports)
        return {
            "partitions_rewritten": len(manifests),
            "partitions_switched": len(result.switched),
            "partitions_up_to_date": len(result.kept),
            "files_before": sum(len(r.task.sources) for r in reports),
            "files_after": sum(len(r.files) for r in reports),
            "bytes_before": sum(r.source_bytes for r in reports),
            "bytes_after": sum(f.bytes for r in reports for f in r.files),
            "rows": rows,
            "duplicate_rows_dropped": sum(r.rows_read - r.rows for r in reports),
            "locations": {str(m.partition): self.storage.uri(m.location) for m in manifests[:SHOWN]},
        }

    # --- the table catalog ------------------------------------------------------------------------------

    @cached_property
    def _catalog(self) -> TableCatalog:
        if self.access.hive_catalog is None:
            raise RuntimeError("this action of the Hive layout needs its table catalog, and none was given")
        return self.access.hive_catalog()

    def _published_catalog(self, topic: TableSpec) -> TableCatalog:
        """The catalog, with the table created or evolved first, so the first switch also registers it."""
        self._catalog.ensure_table(definition_for(topic, self.storage))
        return self._catalog

    def _switch_to_generations(self, topic: TableSpec, manifests: list[CompactionManifest]) -> None:
        publish(self._published_catalog(topic), definition_for(topic, self.storage),
                {m.partition: m.location for m in manifests})

    def _drop(self, topic: TableSpec, partitions: list[TablePartition]) -> None:
        self._published_catalog(topic).drop_partitions(definition_for(topic, self.storage), partitions)

    def _run_compactions(self, tasks, description: str):
        if self.access.run_compactions is None:
            raise RuntimeError("compaction in the Hive layout runs on Spark, and no Spark runner was given")
        return self.access.run_compactions(tasks, description)

    def register(self, topic: TableSpec, hours: Collection[datetime]) -> TableOutcome:
        hours = sorted(hours)
        definition = definition_for(topic, self.storage)
        catalog = self._catalog
        change = catalog.ensure_table(definition)
        stored = storage_partitions(self.storage, topic.database, topic.table, among=[
            TablePartition(version, hour) for hour in hours for version in definition.schema_versions])
        report = reconcile(catalog, definition, stored, only_hours=hours)
        # The check reads the catalog again: it states what readers see now, not what reconcile intended.
        in_catalog = catalog.list_partitions(definition, hours)
        in_storage = storage_partition_uris(definition, stored, hours)
        differences = partition_differences(in_catalog, in_storage)
        check = CheckOutcome(differences.none, differences.describe(), {
            "hours": len(hours),
            "catalog_partitions": len(in_catalog),
            "storage_partitions": len(in_storage),
            "missing_from_catalog": sorted(str(p) for p in differences.missing),
            "pointing_elsewhere": sorted(str(p) for p in differences.misplaced),
            "not_in_storage": [str(p) for p in differences.unexpected],
        })
        summary = _registration_line(definition, hours, change, report)
        return TableOutcome(summary, _registration_metadata(definition, catalog.kind, change, report, in_catalog, hours[-1]),
                            check)

    # --- retention ----------------------------------------------------------------------------------------

    def retain(self, topic: TableSpec, now: datetime, pii_key: bytes | None) -> TableOutcome:
        # Readers find the table through its catalog, which expiry changes first: a run that cannot open the catalog
        # fails here, rather than report nothing to expire or erase for a table it never looked at.
        self._catalog.table_columns(definition_for(topic, self.storage))
        report = apply_retention(
            self.storage, topic, now, pii_key,
            lambda tasks: self._run_compactions(tasks, f"erase subjects in {topic.topic}"),
            lambda manifests: self._switch_to_generations(topic, manifests),
            lambda partitions: self._drop(topic, partitions),
        )
        metadata = {
            "expired_partitions": len(report.expired_partitions),
            "expired_rows": report.expired_rows,
            "expired_dead_letter_files": report.expired_dead_letter_files,
            "erased_partitions": len(report.erased_partitions),
            "erased_rows": report.erased_rows,
            "audit_entries": [self.storage.uri(path) for path in report.audit_paths],
            "retention_days": topic.retention_days or 0,
        }
        cutoff = retention_cutoff(topic, now)
        left = [str(p) for p in storage_partitions(self.storage, topic.database, topic.table) if is_expired(p.hour, cutoff)]
        check = CheckOutcome(
            not left,
            f"expired partitions still in storage: {', '.join(left)}" if left
            else f"no partition ends before {cutoff:%Y-%m-%d %H:%M}Z" if cutoff else "the topic keeps data forever",
            {"expired_partitions_left": len(left)},
        )
        summary = (f"{topic.topic}: {len(report.expired_partitions)} partition(s) expired, {report.erased_rows} row(s) "
                   f"erased, {len(report.audit_paths)} audit entr(ies)")
        return TableOutcome(summary, metadata, check)


def _registration_line(definition: TableDefinition, hours: list, change: TableChange, report: ReconcileReport) -> str:
    table = "created" if change.created else (
        f"evolved (+{len(change.added_columns)} columns, {len(change.widened_columns)} widened, "
        f"{len(change.recased_columns)} renamed lowercase)" if change.changed else "unchanged"
    )
    return (
        f"{definition.name} {hours[0]:%Y-%m-%d %H}:00 to {hours[-1]:%Y-%m-%d %H}:00 ({len(hours)} hours): table {table}; "
        f"partitions +{len(report.added)} added, "
        f"{len(report.relocated)} relocated, {len(report.dropped)} dropped"
    )


def _registration_metadata(definition: TableDefinition, kind: str, change: TableChange, report: ReconcileReport,
                           in_catalog: dict, hour) -> dict:
    queries = definition.sample_queries(f"{hour:%Y-%m-%d}", f"{hour:%H}")
    columns = ["| column | type |", "|---|---|"] + [f"| {c.name} | `{c.type.hive()}` |" for c in definition.columns]
    return {
        "table": definition.name,
        "catalog": kind,
        "location": LakeUri(definition.location),
        "columns": len(definition.columns),
        "schema": Markdown("\n".join(columns)),
        "schema_versions": list(definition.schema_versions),
        "table_created": change.created,
        "columns_added": list(change.added_columns),
        "columns_widened": list(change.widened_columns),
        "columns_renamed_lowercase": list(change.recased_columns),
        "partitions_added": len(report.added),
        "partitions_relocated": len(report.relocated),
        "partitions_dropped": len(report.dropped),
        "partition_changes": {
            "added": [str(p) for p in report.added][:SHOWN],
            "relocated": [str(p) for p in report.relocated][:SHOWN],
            "dropped": [str(p) for p in report.dropped][:SHOWN],
        },
        "partitions": {str(p): location for p, location in sorted(in_catalog.items())[:SHOWN]},
        "sample_query": Markdown(
            f"Spark SQL:\n```sql\n{queries['spark_sql']}\n```\nAthena (Glue):\n```sql\n{queries['athena']}\n```"
        ),
    }
