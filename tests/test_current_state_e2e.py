"""Current-state tables end to end: a Debezium-shaped change stream on the real broker, landed hour by hour into the
Hive layout or an Iceberg table, each hour applied to the topic's current-state table, which is compared row by row and
value by value with the state the producer kept: after every hour, after re-landing and applying the hours again in
reverse order, after compaction, and applied out of order into a new table.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from kafka_lake.current.apply import apply_landed_hours, current_state_check
from kafka_lake.current.ledger import HourNotLanded
from kafka_lake.current.state_table import current_table_name, data_directory
from kafka_lake.current.upkeep import retain_current_state
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.audit import read_audit
from kafka_lake.lake.compaction_manifest import read_compaction
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.tables.formats import table_format
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
from kafka_lake.tables.iceberg.duckdb_reader import duckdb_connection
from kafka_lake.tables.table_format import TableAccess
from kafka_lake.upkeep.compaction import compact_hour, compact_partition
from kafka_lake.upkeep.retention import apply_retention
from tests.change_topics import CLOSING, change_topic_with_traffic
from tests.landing_fixtures import HOURS, in_this_process, land, landing_settings

RAW_HOURS = [KafkaHour(hour) for hour in [*HOURS, CLOSING]]
COLUMNS = ["id", "first_name", "email", "phone", "_kafka_key_id", "_kafka_partition", "_kafka_offset", "_kafka_timestamp"]


@pytest.fixture
def iceberg_catalog(tmp_path, lake_root, monkeypatch) -> IcebergCatalogConfig:
    """The embedded catalog beside a local lake; for an S3 lake a SQLite file in the test's folder stands for a shared
    database (`ICEBERG_CATALOG_URI`), which the landing processes find too."""
    if LakeStorage(lake_root).is_s3:
        monkeypatch.setenv("ICEBERG_CATALOG_URI", f"sqlite:///{tmp_path}/iceberg.db")
        return IcebergCatalogConfig(lake_root, sql_uri=f"sqlite:///{tmp_path}/iceberg.db")
    return IcebergCatalogConfig(lake_root)


@pytest.fixture
def customers(broker, tmp_path, lake_root, request, iceberg_catalog):
    raw_format = getattr(request, "param", "hive")
    topic, traffic = change_topic_with_traffic(broker, tmp_path / "catalog", f"e2e.customers.{uuid.uuid4().hex[:8]}",
                                               table_format=raw_format)
    return topic, traffic


class Lake:
    def __init__(self, topic, broker, lake_root, catalog_config):
        self.topic, self.storage = topic, LakeStorage(lake_root)
        self.settings = landing_settings(lake_root, broker.bootstrap_servers)
        self.catalog = open_catalog(catalog_config)
        self.raw = table_format(topic, TableAccess(self.storage, iceberg_catalog=catalog_config))

    def land(self, hours):
        return land(self.topic, hours, self.settings, in_this_process)

    def apply(self, hours):
        return list(apply_landed_hours(self.topic, self.storage, self.catalog, self.raw, hours, run_id="test"))

    def table(self):
        return self.catalog.load_table(tuple(current_table_name(self.topic).split(".")))

    def check(self, hour):
        return current_state_check(self.topic, self.storage, self.table(), hour)


def pyiceberg_state(table) -> dict[int, dict]:
    rows = table.scan().to_arrow()
    return _by_key(rows)


def duckdb_state(table) -> dict[int, dict]:
    return _by_key(duckdb_connection().execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')").arrow().read_all())


def _by_key(rows: pa.Table) -> dict[int, dict]:
    assert rows.column_names == COLUMNS, rows.column_names
    listed = rows.to_pylist()
    by_key = {row["_kafka_key_id"]: row for row in listed}
    assert len(by_key) == len(listed), "a key has two rows"
    return by_key


def assert_table_is(lake: Lake, expected: dict[int, dict]) -> None:
    table = lake.table()
    for read in (pyiceberg_state(table), duckdb_state(table)):
        assert sorted(read) == sorted(expected)
        for key, row in expected.items():
            assert read[key] == row, (key, read[key], row)


@pytest.mark.parametrize("lake_root, customers", [("local", "hive"), ("s3", "iceberg")], indirect=True)
def test_each_hour_applied_leaves_the_producers_state_and_applying_them_again_in_reverse_changes_nothing(
        broker, lake_root, customers, iceberg_catalog):
    """Given the change stream landed hour by hour; when each hour is applied after it lands, then the table is the
    source table as of that hour's end: newest row per key, deletes by `op: d`, by a tombstone and by `delete_when`
    gone, dead letters and keyless records without effect, rows of v1 without `phone`. When the raw hours are landed
    again in reverse order and each applied again, then the table stays the final state, and every check passes."""
    topic, traffic = customers
    lake = Lake(topic, broker, lake_root, iceberg_catalog)

    for hour in RAW_HOURS:
        lake.land([hour])
        [applied] = lake.apply([hour])
        expected = traffic.state_after(hour.start)
        assert_table_is(lake, expected)
        assert applied.rows == len(expected)
        assert lake.check(hour).passed, lake.check(hour).description

    final = traffic.state_after(CLOSING)

    for hour in reversed(RAW_HOURS):
        lake.land([hour])
        behind = lake.check(hour)
        assert not behind.passed and "landed again" in behind.description, behind.description
        [again] = lake.apply([hour])
        assert (again.inserts, again.updates, again.deletes, again.snapshot_id) == (0, 0, 0, None), again
        assert_table_is(lake, final)
        assert lake.check(hour).passed, lake.check(hour).description


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_hours_applied_out_of_order_into_a_new_table_end_in_the_state_of_all_of_them(broker, lake_root, customers,
                                                                                     iceberg_catalog):
    """Given every hour landed; when they are applied last first, the first twice, into a new table, then it holds the
    final state: an earlier hour applied after a later one never brings back a key the later one deleted, nor an older
    row over a newer one."""
    topic, traffic = customers
    lake = Lake(topic, broker, lake_root, iceberg_catalog)
    lake.land(RAW_HOURS)

    lake.apply([RAW_HOURS[2], RAW_HOURS[3], RAW_HOURS[0], RAW_HOURS[1], RAW_HOURS[0]])

    assert_table_is(lake, traffic.state_after(CLOSING))


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_an_hour_not_landed_is_refused_naming_it(broker, lake_root, customers, iceberg_catalog):
    topic, _ = customers
    lake = Lake(topic, broker, lake_root, iceberg_catalog)
    with pytest.raises(HourNotLanded, match=f"{RAW_HOURS[0]}.*land the hour first"):
        lake.apply([RAW_HOURS[0]])
    assert not ManifestStore(lake.storage, topic.database, topic.table).landed_hours()


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_erasure_removes_the_subjects_rows_and_snapshots_expire_with_the_files_only_they_held(broker, lake_root, tmp_path,
                                                                                              iceberg_catalog):
    """Given every hour applied to a change topic whose subject_field is inside the row; when an erasure request names
    two customers and retention runs a week later, then their rows are gone (pyiceberg and DuckDB), every other row
    stays, older snapshots (which still held the erased rows) expired with the files only they held, a file of a
    killed application a day old is deleted, and each deletion is audited."""
    topic, traffic = change_topic_with_traffic(broker, tmp_path / "catalog", f"e2e.customers.{uuid.uuid4().hex[:8]}",
                                               subject_field="after.id")
    lake = Lake(topic, broker, lake_root, iceberg_catalog)
    lake.land(RAW_HOURS)
    lake.apply(RAW_HOURS)
    final = traffic.state_after(CLOSING)
    erased = sorted(final)[:2]
    lake.storage.write_bytes("_erasure_requests/forget-two.json",
                             json.dumps({"subject_ids": [str(k) for k in erased], "requested_at": "2026-11-30"}).encode())
    orphan = f"{data_directory(topic)}/{uuid.uuid4().hex}.parquet"
    lake.storage.write_bytes(orphan, b"PAR1 of an application killed before its commit")
    old = time.time() - 2 * 86_400
    os.utime(lake.storage.full_path(orphan), (old, old))
    before = len(lake.table().snapshots())

    done = retain_current_state(topic, lake.storage, lake.catalog, datetime.now(timezone.utc) + timedelta(days=8), None)

    assert done.erased_rows == 2 and done.snapshots_expired == before and done.orphan_files_removed == 1
    assert_table_is(lake, {key: row for key, row in final.items() if key not in erased})
    assert len(lake.table().snapshots()) == 1, "only the erasure's snapshot is left"
    assert not lake.storage.exists(orphan)
    audited = {entry.action for entry in read_audit(lake.storage, topic)}
    assert audited == {"erase", "expire_snapshots"}


@pytest.mark.parametrize("lake_root, customers", [("local", "hive"), ("local", "iceberg")], indirect=True)
def test_hours_applied_again_after_compaction_read_their_rows_from_the_compacted_files(broker, lake_root, customers,
                                                                                      iceberg_catalog):
    """Given every hour landed (the two before the traffic too, empty, so the placement hours of its late events are
    due) and applied; when the due placement hours are compacted (their raw files rewritten, the Hive layout's deleted)
    and every hour is applied again, then each reads the rows it read before, from the compacted files, and the table
    stays the final state without a commit."""
    topic, traffic = customers
    lake = Lake(topic, broker, lake_root, iceberg_catalog)
    early = [KafkaHour(RAW_HOURS[0].start - timedelta(hours=n)) for n in (2, 1)]
    lake.land([*early, *RAW_HOURS])
    first = {applied.hour: applied for applied in lake.apply([*early, *RAW_HOURS])}
    due = [hour.start for hour in [*early, *RAW_HOURS[:2]]]
    for hour in due:
        lake.raw.compact_hour(topic, hour) if topic.table_format == "iceberg" else compact_hour(
            topic, hour, lake.storage, lambda tasks: [compact_partition(task) for task in tasks], lambda manifests: None)
    if topic.table_format == "hive":
        landed = [f.path for m in ManifestStore(lake.storage, topic.database, topic.table).all() for f in m.files
                  if f.kind == "data"]
        assert sum(not lake.storage.exists(path) for path in landed) > len(landed) // 2, "compaction deleted the sources"

    again = lake.apply(list(reversed([*early, *RAW_HOURS])))

    for applied in again:
        assert (applied.rows_read, applied.changes, applied.snapshot_id) == (
            first[applied.hour].rows_read, first[applied.hour].changes, None), applied
    assert_table_is(lake, traffic.state_after(CLOSING))


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_hours_applied_again_after_compaction_and_an_erasure_rewrote_their_partitions_read_the_last_generation(
        broker, lake_root, tmp_path, iceberg_catalog, spark):
    """Given every hour landed (the two before the traffic too) and applied, the due placement hours compacted on
    Spark, and an erasure request applied by retention, which rewrites the compacted partitions holding its subject a
    second time; when every hour is applied again, and again once landed again and compacted again, then each run
    succeeds, nothing changes the table, and it is the final state without the subject (the accepted request holds
    for the landing, the compaction and the application after it). Before: applying an hour that
    landed into a partition rewritten twice failed with FileNotFoundError on its landed file, which compaction had
    consumed and the erasure's generation no longer named (an hour rewritten once, or never, applied again fine)."""
    from spark_jobs.compaction_job import run_compactions_on_spark

    topic, traffic = change_topic_with_traffic(broker, tmp_path / "catalog", f"e2e.customers.{uuid.uuid4().hex[:8]}",
                                               subject_field="after.id")
    lake = Lake(topic, broker, lake_root, iceberg_catalog)
    early = [KafkaHour(RAW_HOURS[0].start - timedelta(hours=n)) for n in (2, 1)]
    hours = [*early, *RAW_HOURS]
    run_tasks = lambda tasks: run_compactions_on_spark(spark, tasks)
    lake.land(hours)
    lake.apply(hours)
    due = [hour.start for hour in [*early, *RAW_HOURS[:2]]]
    for hour in due:
        compact_hour(topic, hour, lake.storage, run_tasks, lambda manifests: None)
    final = traffic.state_after(CLOSING)
    erased = sorted(final)[0]
    lake.storage.write_bytes("_erasure_requests/forget.json", json.dumps({"subject_ids": [str(erased)]}).encode())
    now = datetime(2026, 11, 2, tzinfo=timezone.utc)
    report = apply_retention(lake.storage, topic, now, None, run_tasks, lambda manifests: None, lambda partitions: None)
    retain_current_state(topic, lake.storage, lake.catalog, now, None)
    twice = [p for p in report.erased_partitions
             if (compaction := read_compaction(lake.storage, topic.database, topic.table, p)) and compaction.generation > 1]
    assert twice, "the erasure rewrote a compacted partition"
    expected = {key: row for key, row in final.items() if key != erased}

    again = lake.apply(hours)

    assert all(applied.snapshot_id is None for applied in again), again
    assert_table_is(lake, expected)
    lake.land(hours)
    for hour in due:
        compact_hour(topic, hour, lake.storage, run_tasks, lambda manifests: None)
    assert all(applied.snapshot_id is None for applied in lake.apply(hours))
    assert_table_is(lake, expected)
