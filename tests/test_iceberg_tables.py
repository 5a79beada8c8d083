"""Iceberg tables beside the Hive layout: hours landed by the real landing (Tansu broker, slices run in this process)
are committed to an Iceberg table one snapshot per hour, compacted, expired and erased, and read back with pyiceberg
and with DuckDB's iceberg extension, on a local lake (embedded SQLite catalog) and on the SeaweedFS S3 server.
"""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import CommitFailedException, ValidationException

from dev_services.tansu import admin_client
from kafka_lake.hours import floor_hour
from kafka_lake.lake import layout
from kafka_lake.lake.manifests import HourManifest, ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_state import partition_of_path
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, lake_relative_path, open_catalog, table_location
from kafka_lake.tables.iceberg.commits import (
    KAFKA_HOUR,
    OFFSETS,
    TOPIC,
    commit_landed_hour,
    landed_hour_matches_table,
)
from kafka_lake.tables.iceberg.duckdb_reader import duckdb_connection
from kafka_lake.tables.iceberg.files import placement_of
from kafka_lake.tables.iceberg.maintenance import (
    compact_placement_hour,
    compaction_kept_rows,
    erase_subjects,
    expire_placement_hours,
    expire_snapshots,
    remove_orphan_files,
)
from kafka_lake.tables.iceberg.schema import ensure_table
from kafka_lake.tables.iceberg.tables import IcebergTables
from kafka_lake.tables.table_format import HourCommitted, TableAccess
from kafka_lake.upkeep.subjects import ErasedSubjects
from tests.constants import PII_TEST_KEY
from tests.landing_fixtures import RAW_HOURS, in_this_process, land, landing_settings, pseudonym, topic_with_traffic
from tests.test_log_boundaries import land_in_process

NOW = RAW_HOURS[-1] + timedelta(hours=2)
KEYS = ["_kafka_partition", "_kafka_offset"]


class Lake:
    """An Iceberg topic landed by the real landing (which commits each hour to its table), its manifests, and its
    table."""

    def __init__(self, broker, tmp_path, lake_root: str, config: IcebergCatalogConfig | None = None):
        self.topic, self.traffic = topic_with_traffic(broker, tmp_path / "catalog", table_format="iceberg")
        self.storage = LakeStorage(lake_root)
        sql_uri = f"sqlite:///{tmp_path}/iceberg_catalog.db" if self.storage.is_s3 else None
        self.config = config or IcebergCatalogConfig(lake_root, sql_uri=sql_uri)
        self.settings = dataclasses.replace(landing_settings(lake_root, broker.bootstrap_servers), iceberg_catalog=self.config)
        self.catalog = open_catalog(self.config)
        self.manifests = ManifestStore(self.storage, self.topic.database, self.topic.table)
        self.commits = []
        self.table = ensure_table(self.catalog, self.topic, table_location(self.storage, self.topic.database, self.topic.table))

    def land(self, hours=RAW_HOURS) -> list[HourManifest]:
        """Lands the hours; the landing commits each to the table."""
        results = land_in_process(self.topic, self.settings, hours, NOW)
        self.commits += [result.table_commit for result in results]
        self.table = self.table.refresh()
        return [result.manifest for result in results]

    def land_uncommitted(self, hours) -> list[HourManifest]:
        """Lands the hours as a run that died after writing each manifest, before its Iceberg commit."""
        stops = _StopsBeforeTheTableCommit(TableAccess(self.storage, self.config))
        return [r.manifest for r in land(self.topic, hours, self.settings, in_this_process, now=NOW, table_formats=lambda table: stops)]

    def landed_rows(self) -> pa.Table:
        """Every row of the landed files the manifests own, with the placement columns of their folders."""
        tables = []
        for manifest in self.manifests.all():
            for landed in manifest.files:
                if landed.kind != "data":
                    continue
                rows = pq.read_table(self.storage.full_path(landed.path), filesystem=self.storage.filesystem)
                placement = landed.path.split("/")
                values = dict(part.split("=", 1) for part in placement if "=" in part)
                tables.append(rows.select(KEYS).append_column("schema_version", pa.array([int(values["schema_version"])] * rows.num_rows, pa.int32()))
                              .append_column("date", pa.array([values["date"]] * rows.num_rows))
                              .append_column("hour", pa.array([values["hour"]] * rows.num_rows)))
        return _sorted(pa.concat_tables(tables))


class _StopsBeforeTheTableCommit(IcebergTables):
    """The Iceberg table format of a landing process that dies right after each manifest: the commit never runs."""

    def commit_hour(self, topic, manifest, previous, attempt):
        return HourCommitted()


def _sorted(rows: pa.Table) -> pa.Table:
    return rows.sort_by([(c, "ascending") for c in KEYS])


def _keys(rows) -> list[tuple]:
    return sorted(zip(rows.column("_kafka_partition").to_pylist(), rows.column("_kafka_offset").to_pylist()))


def pyiceberg_rows(table, snapshot_id=None, row_filter="True") -> pa.Table:
    return _sorted(table.scan(row_filter=row_filter, snapshot_id=snapshot_id).to_arrow())


def duckdb_rows(table, snapshot_id=None, where="") -> pa.Table:
    travel = f", snapshot_from_id => {snapshot_id}" if snapshot_id else ""
    query = f"SELECT * FROM iceberg_scan('{table.metadata_location}'{travel}) {where}"
    return _sorted(duckdb_connection().execute(query).arrow().read_all())


@pytest.fixture
def lake(broker, tmp_path, lake_root):
    with topic_deleted_after(broker, Lake(broker, tmp_path, lake_root)) as landed:
        yield landed


@pytest.fixture
def local_lake(broker, tmp_path):
    with topic_deleted_after(broker, Lake(broker, tmp_path, str(tmp_path / "lake"))) as landed:
        yield landed


@contextlib.contextmanager
def topic_deleted_after(broker, lake: Lake):
    """The session's broker is shared: the test's topic goes with it (a sensor test lists the cluster's topics)."""
    try:
        yield lake
    finally:
        admin = admin_client(broker.bootstrap_servers)  # held until the deletion is answered
        for deleted in admin.delete_topics([lake.topic.topic], operation_timeout=30).values():
            deleted.result()


def test_given_landed_hours_when_each_is_committed_then_pyiceberg_and_duckdb_read_exactly_the_landed_rows(lake):
    manifests = lake.land()

    expected = lake.landed_rows()
    produced = sorted((p.partition, p.offset) for p in lake.traffic.rows())
    assert _keys(expected) == produced  # the landing itself: every good record once
    for read in (pyiceberg_rows(lake.table), duckdb_rows(lake.table)):
        assert read.select(expected.column_names).equals(expected.cast(read.select(expected.column_names).schema))
    # Values, not only keys: the Iceberg rows are the landed files' rows, column for column.
    landed_values = pa.concat_tables([
        pq.read_table(lake.storage.full_path(f.path), filesystem=lake.storage.filesystem)
        for m in manifests for f in m.files if f.kind == "data"], promote_options="permissive")
    landed_values = _sorted(landed_values)
    through_duckdb = duckdb_rows(lake.table).select(landed_values.column_names)
    assert landed_values.cast(through_duckdb.schema).equals(through_duckdb)
    # pyiceberg 0.12 reads a null list of structs as an empty list (apache/iceberg-python#3833, open): records without
    # Kafka headers come back with [] from it alone. The files hold the nulls, and DuckDB reads them (above).
    through_pyiceberg = pyiceberg_rows(lake.table).select(landed_values.column_names)
    headers = landed_values.column("_kafka_headers")
    assert headers.null_count > 0 and through_pyiceberg.column("_kafka_headers").null_count == 0
    as_pyiceberg_reads = landed_values.set_column(
        landed_values.column_names.index("_kafka_headers"), "_kafka_headers",
        pa.array([value if value is not None else [] for value in headers.to_pylist()], headers.type))
    assert as_pyiceberg_reads.cast(through_pyiceberg.schema).equals(through_pyiceberg)
    # A placement hour's filter prunes to its files, for both readers.
    hour = floor_hour(RAW_HOURS[1])
    where = f"date = '{hour:%Y-%m-%d}' AND hour = '{hour:%H}'"
    in_hour = expected.filter(pc.and_(pc.equal(expected["date"], f"{hour:%Y-%m-%d}"), pc.equal(expected["hour"], f"{hour:%H}")))
    assert 0 < in_hour.num_rows < expected.num_rows
    assert _keys(pyiceberg_rows(lake.table, row_filter=where)) == _keys(in_hour) == _keys(duckdb_rows(lake.table, where=f"WHERE {where}"))
    planned = lake.table.scan(row_filter=where).plan_files()
    assert {t.file.file_path for t in planned} == {
        f.file_path for f in (t.file for t in lake.table.scan().plan_files())
        if (f.partition[1], f.partition[2]) == (f"{hour:%Y-%m-%d}", f"{hour:%H}")}


def test_each_landed_hour_is_one_snapshot_naming_the_hour_topic_and_offsets(local_lake):
    manifests = local_lake.land()

    snapshots = local_lake.table.snapshots()
    assert len(snapshots) == len(manifests)
    for snapshot, manifest in zip(snapshots, manifests):
        summary = snapshot.summary
        assert summary.operation.value == "append"
        assert summary[KAFKA_HOUR] == manifest.hour and summary[TOPIC] == local_lake.topic.topic
        assert summary[OFFSETS] == " ".join(f"{p.partition}:[{p.start},{p.end})" for p in manifest.partitions)
        assert int(summary["added-records"]) == sum(f.rows for f in manifest.files if f.kind == "data")
        assert landed_hour_matches_table(local_lake.table, local_lake.storage, manifest).passed


def test_committing_the_same_hour_twice_leaves_the_same_table(local_lake):
    manifests = local_lake.land()
    before = (local_lake.table.current_snapshot().snapshot_id, pyiceberg_rows(local_lake.table))

    again = commit_landed_hour(local_lake.table, local_lake.storage, manifests[1], manifests[1])

    assert again.operation == "unchanged" and again.snapshot_id is None
    table = local_lake.table.refresh()
    assert (table.current_snapshot().snapshot_id, pyiceberg_rows(table)) == before


def test_relanding_an_hour_replaces_what_its_earlier_landing_committed_compacted_rows_included(local_lake):
    """Re-landing hour H after its placement hours were compacted: H's rows are taken out of the compacted files
    (rewritten without them) and H's new files added, in one overwrite snapshot; every row stays once."""
    local_lake.land()
    expected = local_lake.landed_rows()
    table = local_lake.table
    values_before = duckdb_rows(table)
    placements = {placement_of(task.file) for task in table.scan().plan_files()}
    for placement in placements:
        compact_placement_hour(table.refresh(), local_lake.storage, placement)
    table = table.refresh()
    assert _keys(pyiceberg_rows(table)) == _keys(expected)
    assert duckdb_rows(table).equals(values_before)  # every value, the nulls of lists of structs included

    [relanded] = local_lake.land([RAW_HOURS[1]])

    table = local_lake.table
    latest = table.current_snapshot()
    assert latest.summary.operation.value == "overwrite" and latest.summary[KAFKA_HOUR] == relanded.hour
    assert local_lake.commits[-1]["iceberg_files_rewritten"] and not local_lake.commits[-1]["iceberg_files_removed"]  # all compacted
    assert _keys(pyiceberg_rows(table)) == _keys(expected) == _keys(duckdb_rows(table))
    assert duckdb_rows(table).equals(values_before)  # the compacted files rewritten without the hour kept their values
    check = landed_hour_matches_table(table, local_lake.storage, relanded)
    assert check.passed, check.description


def test_a_landing_that_stopped_before_its_commit_is_named_by_the_check_and_completed_by_committing_its_manifest(local_lake):
    """The landing wrote its files and its manifest, then died before the Iceberg commit: the table does not hold
    the hour, the check says so, and committing the manifest (what the next landing or registration run does)
    completes it without landing again."""
    local_lake.land(RAW_HOURS[:1])
    [uncommitted] = local_lake.land_uncommitted([RAW_HOURS[1]])
    table = local_lake.table.refresh()

    check = landed_hour_matches_table(table, local_lake.storage, uncommitted)
    assert not check.passed and "no commit of hour" in check.description

    commit_landed_hour(table, local_lake.storage, uncommitted, uncommitted)

    assert landed_hour_matches_table(table.refresh(), local_lake.storage, uncommitted).passed


def test_a_file_a_relanding_rewrote_in_place_with_other_content_is_read_with_its_new_content(local_lake):
    """Landing names files by topic, partition and first offset, so a re-landing rewrites a committed file in place;
    when its content changed, the commit replaces the table's entry for that path (size and statistics), so the
    current snapshot reads the new rows."""
    [manifest] = local_lake.land(RAW_HOURS[1:2])
    storage = local_lake.storage
    rewritten = max((f for f in manifest.files if f.kind == "data"), key=lambda f: f.rows)
    shorter = pq.read_table(storage.full_path(rewritten.path), filesystem=storage.filesystem).slice(1)
    with storage.open_output(rewritten.path) as stream:
        pq.write_table(shorter, stream)
    relanded = dataclasses.replace(manifest, landed_at=datetime.now(timezone.utc).isoformat(), files=tuple(
        dataclasses.replace(f, rows=shorter.num_rows, bytes=storage.filesystem.get_file_info(storage.full_path(f.path)).size)
        if f.path == rewritten.path else f for f in manifest.files))

    commit = commit_landed_hour(local_lake.table, storage, relanded, manifest)

    table = local_lake.table.refresh()
    assert commit.operation == "overwrite" and commit.rows_removed == commit.rows_added + 1
    assert len(pyiceberg_rows(table)) == sum(f.rows for f in relanded.files if f.kind == "data")
    assert _keys(duckdb_rows(table)) == _keys(pyiceberg_rows(table))
    assert landed_hour_matches_table(table, storage, relanded).passed


def test_given_an_hour_committed_then_the_check_fails_when_its_rows_are_in_the_table_twice(local_lake):
    manifests = local_lake.land(RAW_HOURS[:2])
    table = local_lake.table
    extra = table.transaction()
    with extra.update_snapshot().fast_append() as append:  # a writer bypassing the platform adds a landed file again
        from kafka_lake.tables.iceberg.files import landed_data_files
        landed = [f for f in manifests[0].files if f.kind == "data"][:1]
        [copy] = landed_data_files(table, local_lake.storage, landed)
        append.append_data_file(copy)
    extra.commit_transaction()

    check = landed_hour_matches_table(table.refresh(), local_lake.storage, manifests[0])

    assert not check.passed and "more than once" in check.description


def test_the_check_fails_when_rows_of_the_hour_vanish_but_not_when_an_erasure_removed_them(local_lake):
    """Rows of a landed hour deleted by a writer other than the platform's expiry or erasure are rows lost; after
    an erasure committed since the hour's landing, fewer rows are reported as erased (the count is not kept per
    hour, so a loss after an erasure goes unnoticed until the hour is landed again)."""
    [manifest] = local_lake.land(RAW_HOURS[1:2])
    table = local_lake.table
    first = min(p.start for p in manifest.partitions if p.counts.rows)
    partition = next(p.partition for p in manifest.partitions if p.start == first and p.counts.rows)
    table.delete(f"_kafka_partition = {partition} AND _kafka_offset < {first + 3}")  # no platform action recorded

    lost = landed_hour_matches_table(table.refresh(), local_lake.storage, manifest)
    assert not lost.passed and "the manifest landed" in lost.description
    [manifest] = local_lake.land(RAW_HOURS[1:2])  # re-landing the hour restores it
    table = local_lake.table
    assert landed_hour_matches_table(table, local_lake.storage, manifest).passed

    subject = next(u for u in pyiceberg_rows(table).column("user_id").to_pylist() if u)
    erase_subjects(table, local_lake.storage, ErasedSubjects(((("user_id",), frozenset({subject})),)))

    explained = landed_hour_matches_table(table.refresh(), local_lake.storage, manifest)
    assert explained.passed and explained.metadata["rows_expired_or_erased"] > 0


def test_two_commits_of_the_same_hour_planned_at_once_never_both_land(local_lake):
    """Two runs of hour H commit, each planned on the table before the other's commit: the second fails its
    commit validation (rows of H were added since it planned) instead of adding H's rows twice."""
    manifests = local_lake.land(RAW_HOURS[:1])
    stale = local_lake.catalog.load_table((local_lake.topic.database, local_lake.topic.table))  # a run that planned here
    [second] = local_lake.land_uncommitted([RAW_HOURS[1]])
    commit_landed_hour(local_lake.table.refresh(), local_lake.storage, second, None)

    with pytest.raises((ValidationException, CommitFailedException)):
        commit_landed_hour(stale, local_lake.storage, second, None)

    table = local_lake.table.refresh()
    assert landed_hour_matches_table(table, local_lake.storage, second).passed
    assert landed_hour_matches_table(table, local_lake.storage, manifests[0]).passed


def test_a_commit_racing_another_hours_commit_lands_both(local_lake):
    """The commit's conflict check covers the hour's offsets only: a run of hour H+1 that planned before hour H
    committed is retried by pyiceberg on the new table and lands, rather than failing on an unrelated commit."""
    local_lake.land(RAW_HOURS[:1])
    stale = local_lake.catalog.load_table((local_lake.topic.database, local_lake.topic.table))
    one, two = local_lake.land_uncommitted(RAW_HOURS[1:3])
    commit_landed_hour(local_lake.table.refresh(), local_lake.storage, one, None)

    commit_landed_hour(stale, local_lake.storage, two, None)

    table = local_lake.table.refresh()
    for manifest in (one, two):
        check = landed_hour_matches_table(table, local_lake.storage, manifest)
        assert check.passed, check.description


def test_compacting_a_placement_hour_is_one_replace_snapshot_with_the_same_rows_and_time_travel_reads_before(lake):
    lake.land()
    table = lake.table
    by_placement: dict = {}
    for task in table.scan().plan_files():
        by_placement.setdefault(placement_of(task.file), []).append(task.file)
    placement = max(by_placement, key=lambda p: len(by_placement[p]))
    assert len(by_placement[placement]) > 1
    before = table.current_snapshot().snapshot_id
    rows_before = pyiceberg_rows(table)

    compaction = compact_placement_hour(table, lake.storage, placement)

    table = table.refresh()
    assert table.current_snapshot().summary.operation.value == "replace"
    files_now = [t.file for t in table.scan().plan_files() if placement_of(t.file) == placement]
    assert len(files_now) == 1 and compaction.rows == sum(f.record_count for f in by_placement[placement])
    assert pyiceberg_rows(table).equals(rows_before)
    assert duckdb_rows(table).equals(duckdb_rows(table, snapshot_id=before))
    assert _keys(duckdb_rows(table)) == _keys(rows_before)
    assert pyiceberg_rows(table, snapshot_id=before).equals(rows_before)
    assert compaction_kept_rows(table, compaction.snapshot_id).passed
    assert compact_placement_hour(table, lake.storage, placement).snapshot_id is None  # one file: nothing to do


def test_the_compaction_check_fails_for_a_replace_that_lost_a_row(local_lake):
    """A replace snapshot recorded as a compaction whose new file misses one row of the file it replaced."""
    from pyiceberg.expressions import AlwaysFalse
    from pyiceberg.table.snapshots import Operation

    from kafka_lake.tables.iceberg.commits import ACTION
    from kafka_lake.tables.iceberg.files import commit_files, read_rows, write_rows
    from kafka_lake.tables.iceberg.maintenance import OFFSETS_CHECKSUM, PLACEMENT
    from kafka_lake.upkeep.compaction import KEY_COLUMNS, offsets_checksum

    local_lake.land(RAW_HOURS[:1])
    table = local_lake.table
    source = max((t.file for t in table.scan().plan_files()), key=lambda f: f.record_count)
    rows = read_rows(table, [source])
    summary = {ACTION: "compact", PLACEMENT: "a placement", OFFSETS_CHECKSUM: offsets_checksum(rows.select(KEY_COLUMNS))}
    table = commit_files(table, Operation.REPLACE, [source], write_rows(table, local_lake.storage, rows.slice(1)), summary, AlwaysFalse())

    check = compaction_kept_rows(table, table.current_snapshot().snapshot_id)

    assert not check.passed and f"removed {rows.num_rows} row(s), added {rows.num_rows - 1}" in check.description


def test_expiring_old_hours_and_snapshots_removes_their_rows_then_their_files(lake):
    manifests = lake.land()
    table, storage = lake.table, lake.storage
    expected = lake.landed_rows()
    cutoff = RAW_HOURS[1] + timedelta(minutes=30)  # placement hours ending at or before it expire: up to RAW_HOURS[0]
    placed = pc.binary_join_element_wise(expected["date"], expected["hour"], " ")
    kept = expected.filter(pc.greater(placed, f"{RAW_HOURS[0]:%Y-%m-%d %H}"))
    before = table.current_snapshot().snapshot_id

    expiry = expire_placement_hours(table, cutoff)

    table = table.refresh()
    assert expiry.rows == expected.num_rows - kept.num_rows > 0
    assert all(p.hour + timedelta(hours=1) <= cutoff for p in expiry.partitions)
    assert _keys(pyiceberg_rows(table)) == _keys(kept) == _keys(duckdb_rows(table))
    assert table.current_snapshot().summary.operation.value == "delete"
    assert pyiceberg_rows(table, snapshot_id=before).num_rows == expected.num_rows  # time travel, until expiry
    removed = [lake_relative_path(storage, uri) for uri in expiry.files_removed]
    assert removed and all(storage.exists(path) for path in removed)
    for manifest in manifests:  # the landed-hour check tells rows expired from rows lost
        check = landed_hour_matches_table(table, storage, manifest)
        assert check.passed, check.description

    swept = expire_snapshots(table, storage, datetime.now(timezone.utc) + timedelta(seconds=1))

    table = table.refresh()
    assert len(table.snapshots()) == 1 and before in swept.snapshot_ids
    assert not any(storage.exists(path) for path in removed) and set(removed) <= set(swept.files_deleted)
    assert _keys(pyiceberg_rows(table)) == _keys(kept) == _keys(duckdb_rows(table))


def test_erasing_subjects_deletes_their_rows_reports_them_and_leaves_every_other_row(lake):
    lake.land()
    table = lake.table
    subject = next(p.record["user_id"] for p in lake.traffic.rows() if p.record["user_id"])
    stored = pseudonym(subject, PII_TEST_KEY)
    rows_before = pyiceberg_rows(table)
    theirs = rows_before.filter(pc.equal(rows_before["user_id"], stored))
    assert theirs.num_rows > 0
    before = table.current_snapshot().snapshot_id

    erasure = erase_subjects(table, lake.storage, ErasedSubjects(((("user_id",), frozenset({stored})),)))

    table = table.refresh()
    assert all(lake.storage.exists(lake_relative_path(lake.storage, uri)) for uri in erasure.files_removed)
    assert erasure.rows == theirs.num_rows and erasure.files_removed
    after = pyiceberg_rows(table)
    assert stored not in after.column("user_id").to_pylist()
    assert _keys(after) == sorted(set(_keys(rows_before)) - set(_keys(theirs))) == _keys(duckdb_rows(table))
    assert pyiceberg_rows(table, snapshot_id=before).num_rows == rows_before.num_rows  # until the snapshot expires

    expire_snapshots(table, lake.storage, datetime.now(timezone.utc) + timedelta(seconds=1))

    assert not any(lake.storage.exists(lake_relative_path(lake.storage, uri)) for uri in erasure.files_removed)


def test_files_of_a_crashed_attempt_in_an_hours_folders_are_removed_and_committed_ones_kept(local_lake):
    manifests = local_lake.land(RAW_HOURS[:2])
    storage, topic = local_lake.storage, local_lake.topic
    landed = [f for f in manifests[1].files if f.kind == "data"][0]
    folder = landed.path.rsplit("/", 1)[0]
    orphan = f"{folder}/{layout.data_file_name(topic.topic, 99, 0)}"
    storage.write_bytes(orphan, storage.read_bytes(landed.path))  # written by an attempt that never committed
    placement = partition_of_path(landed.path)
    now = datetime.now(timezone.utc)

    young = remove_orphan_files(local_lake.table, storage, [placement], older_than=now - timedelta(hours=1))
    assert young == [] and storage.exists(orphan)  # may belong to a landing still running

    removed = remove_orphan_files(local_lake.table, storage, [placement], older_than=now + timedelta(seconds=1))

    assert removed == [orphan] and not storage.exists(orphan)
    assert all(storage.exists(f.path) for m in manifests for f in m.files)
    assert landed_hour_matches_table(local_lake.table, storage, manifests[1]).passed
