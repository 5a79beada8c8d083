"""The open hour landed in increments (`open_hour` of topic.yaml), against the real broker, in both table formats, on
a local lake and S3: each increment adds exactly what the hour holds beyond the ones before, the landing after the
hour closed makes it final with the rows a landing once after the close gives, and a crash, a landing again or a
second landing at once never shows a reader an offset twice nor takes away a row it read.

Slices run in this process (Spark's task body without Spark): the increments are the driver's doing.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pyarrow as pa
import pytest

from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.lake.leases import HourHeld, HourLease
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.tables.catalogs.glue import GlueCatalog
from kafka_lake.tables.catalogs.hive_metastore import HiveCatalog
from kafka_lake.tables.formats import table_format
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
from kafka_lake.tables.table_format import TableAccess
from tests.landing_fixtures import (
    HOURS,
    PARTITIONS,
    Traffic,
    build_traffic,
    in_this_process,
    lake_snapshot,
    land,
    landing_settings,
    produce,
    rows_as_readers_see_them,
    unique_topic_name,
    write_test_topic,
)

H = KafkaHour(HOURS[0])


def staged(traffic: Traffic) -> list[Traffic]:
    """The topic's records in three deliveries: the hour's first 20 minutes, the next 20, then the rest (the hour's
    end, and the hours after it, whose records close it)."""
    cuts = [to_millis(H.start + timedelta(minutes=20)), to_millis(H.start + timedelta(minutes=40))]
    parts = [[p for p in traffic.produced if p.timestamp_ms < cuts[0]],
             [p for p in traffic.produced if cuts[0] <= p.timestamp_ms < cuts[1]],
             [p for p in traffic.produced if p.timestamp_ms >= cuts[1]]]
    return [Traffic(traffic.topic, part) for part in parts]


def produced_rows(traffic: Traffic, upto_ms: int | None = None) -> set[tuple[int, int]]:
    return {(p.partition, p.offset) for p in traffic.in_hours([H.start]).rows()
            if upto_ms is None or p.timestamp_ms < upto_ms}


class OpenHourLake:
    """A topic landed in increments every 5 minutes, its lake and table as readers see them. Its Hive layout's table
    is registered in the session's embedded metastore, in a database of its own (on S3, in Glue: the metastore here
    has no S3 file system to create a table there)."""

    def __init__(self, broker, tmp_path, lake_root: str, table_format: str, spark, glue: bool = False):
        self.spark, self.glue = spark, glue
        self.topic = write_test_topic(tmp_path / "catalog", unique_topic_name(), table_format=table_format
                                      ).model_copy(update={"open_hour_minutes": 5,
                                                           "database": f"open_{uuid.uuid4().hex[:8]}"})
        broker.create_topic(self.topic.topic, PARTITIONS)
        self.traffic = build_traffic(self.topic)
        self.storage = LakeStorage(lake_root)
        sql_uri = f"sqlite:///{tmp_path}/iceberg.db" if self.storage.is_s3 else None
        self.settings = dataclasses.replace(landing_settings(lake_root, broker.bootstrap_servers),
                                            iceberg_catalog=IcebergCatalogConfig(lake_root, sql_uri=sql_uri))
        self.manifests = ManifestStore(self.storage, self.topic.database, self.topic.table)

    def formats(self, settings):
        access = TableAccess(LakeStorage(settings.lake_root), settings.iceberg_catalog,
                             hive_catalog=(GlueCatalog if self.glue else lambda: HiveCatalog(self.spark)))
        return lambda table: table_format(table, access)

    def land(self, minutes_into_hour: int, topic=None, settings=None, run_slices=in_this_process, **options):
        """Lands H as the clock reads `minutes_into_hour` after its start."""
        settings = settings or self.settings
        return land(topic or self.topic, [H], settings, run_slices, now=H.start + timedelta(minutes=minutes_into_hour),
                    table_formats=self.formats(settings), **options)

    def readable(self, topic=None, settings=None) -> set[tuple[int, int]]:
        """(partition, offset) of every row a reader of the table sees; fails on a row seen twice."""
        topic, settings = topic or self.topic, settings or self.settings
        if topic.table_format == "iceberg":
            table = open_catalog(settings.iceberg_catalog).load_table((topic.database, topic.table))
            rows = table.scan().to_arrow()
            keys = list(zip(rows.column("_kafka_partition").to_pylist(), rows.column("_kafka_offset").to_pylist()))
            assert len(keys) == len(set(keys)), "a row seen twice"
            return set(keys)
        return set(rows_as_readers_see_them(LakeStorage(settings.lake_root), topic))


@pytest.fixture(params=["hive", "iceberg"])
def open_lake(request, broker, tmp_path, lake_root, spark):
    glue = request.param == "hive" and lake_root.startswith("s3://")
    if glue:
        request.getfixturevalue("glue_endpoint")
    return OpenHourLake(broker, tmp_path, lake_root, request.param, spark, glue)


def test_increments_add_what_the_open_hour_holds_and_the_close_gives_the_rows_of_one_landing_after_it(
        open_lake, broker, tmp_path):
    first, second, rest = staged(open_lake.traffic)

    produce(broker.bootstrap_servers, first)
    [one] = open_lake.land(25)
    assert not one.manifest.final and len(one.manifest.increments) == 1
    assert open_lake.readable() == produced_rows(open_lake.traffic, to_millis(H.start + timedelta(minutes=20)))
    files_after_one = {f.path for f in one.manifest.files}

    produce(broker.bootstrap_servers, second)
    [two] = open_lake.land(45)
    assert not two.manifest.final and len(two.manifest.increments) == 2
    assert files_after_one < {f.path for f in two.manifest.files}, "the first increment's files stay as they are"
    assert open_lake.readable() == produced_rows(open_lake.traffic, to_millis(H.start + timedelta(minutes=40)))
    assert two.manifest.counts.records == sum(p.offsets for p in two.manifest.partitions)

    produce(broker.bootstrap_servers, rest)
    [closed] = open_lake.land(75)
    assert closed.manifest.final and len(closed.manifest.increments) == 3
    assert open_lake.readable() == produced_rows(open_lake.traffic)

    # The same hour landed once after it closed, with increments off, in a lake of its own: the same rows.
    once = open_lake.topic.model_copy(update={"open_hour_minutes": None, "database": "once"})
    once_settings = dataclasses.replace(open_lake.settings, lake_root=f"{open_lake.settings.lake_root}-once")
    [single] = open_lake.land(75, topic=once, settings=once_settings)
    assert [(p.partition, p.start, p.end, p.counts) for p in single.manifest.partitions] == [
        (p.partition, p.start, p.end, p.counts) for p in closed.manifest.partitions]
    assert open_lake.readable(once, once_settings) == open_lake.readable()

    # Landed again, the hour is sliced where its increments were: the same files, the same rows.
    before = lake_snapshot(open_lake.storage, open_lake.topic)
    [again] = open_lake.land(80)
    assert again.manifest.final
    if open_lake.topic.table_format == "hive":  # Iceberg names each landing's files by its attempt
        assert {f.path for f in again.manifest.files} == {f.path for f in closed.manifest.files}
        assert lake_snapshot(open_lake.storage, open_lake.topic) == before
    assert open_lake.readable() == produced_rows(open_lake.traffic)


def test_an_increment_with_nothing_new_writes_nothing(open_lake, broker):
    first, _, _ = staged(open_lake.traffic)
    produce(broker.bootstrap_servers, first)
    [one] = open_lake.land(25)

    [again] = open_lake.land(30)

    assert again.unchanged and again.manifest == one.manifest == open_lake.manifests.read(H)


def test_an_increment_that_died_before_its_commit_leaves_the_next_to_land_its_offsets_once(open_lake, broker):
    """Given an increment killed after its files and before its manifest (a process gone at that point), when the
    next increment lands, then every offset is read once, nothing of the dead one is left outside the manifest."""
    first, second, rest = staged(open_lake.traffic)
    produce(broker.bootstrap_servers, first)
    open_lake.land(25)
    produce(broker.bootstrap_servers, second)

    def dies_after_its_files(tasks):
        in_this_process(tasks)
        raise KeyboardInterrupt("killed after its files, before its manifest")

    with pytest.raises(KeyboardInterrupt):
        open_lake.land(45, run_slices=dies_after_its_files)
    lease = HourLease(open_lake.storage, open_lake.topic.database, open_lake.topic.table, H)
    assert not open_lake.storage.exists(lease.path), "the dead landing's process let its lease go on its way out"

    open_lake.land(46)
    assert open_lake.readable() == produced_rows(open_lake.traffic, to_millis(H.start + timedelta(minutes=40)))
    produce(broker.bootstrap_servers, rest)
    [closed] = open_lake.land(75)
    assert closed.manifest.final and open_lake.readable() == produced_rows(open_lake.traffic)
    if open_lake.topic.table_format == "hive":
        owned = {f.path for f in closed.manifest.files if f.kind == "data"}
        stored = {f.path for f in open_lake.storage.list_files(f"{open_lake.topic.database}/{open_lake.topic.table}")}
        assert stored == owned, "no file outside the manifest"


def test_a_second_landing_of_the_open_hour_at_once_waits_for_the_first(open_lake, broker):
    """Two increments at once would each add files the other's manifest does not know: the second finds the hour held
    (a run retries it, the sensor asks again next time), and nothing of it is written."""
    first, _, _ = staged(open_lake.traffic)
    produce(broker.bootstrap_servers, first)
    lease = HourLease(open_lake.storage, open_lake.topic.database, open_lake.topic.table, H)
    lease.acquire("the-first-run")
    try:
        with pytest.raises(HourHeld, match="being landed by run the-first-run"):
            open_lake.land(25)
        assert open_lake.manifests.read(H) is None
    finally:
        lease.release()
    [one] = open_lake.land(25)
    assert not one.manifest.final


def test_an_iceberg_increment_is_one_append_snapshot(broker, tmp_path, spark):
    lake = OpenHourLake(broker, tmp_path, str(tmp_path / "lake"), "iceberg", spark)
    first, second, _ = staged(lake.traffic)
    produce(broker.bootstrap_servers, first)
    lake.land(25)
    produce(broker.bootstrap_servers, second)
    [two] = lake.land(45)

    table = open_catalog(lake.settings.iceberg_catalog).load_table((lake.topic.database, lake.topic.table))
    assert [s.summary.operation.value for s in table.snapshots()][-2:] == ["append", "append"]
    assert two.table_commit["iceberg_operation"] == "append"
    assert isinstance(table.scan().to_arrow(), pa.Table)


def test_lag_counts_what_the_open_hours_increments_landed(open_lake, broker):
    """The metrics' and `topic_health`'s lag: records past the last increment's ends, and seconds since it read the
    log, not since the end of the hour before."""
    from datetime import datetime, timezone

    from kafka_lake import automation
    from kafka_lake.kafka.cluster import LogTail
    from kafka_lake.metrics import lag_seconds

    first, second, _ = staged(open_lake.traffic)
    produce(broker.bootstrap_servers, first)
    [one] = open_lake.land(25)
    produce(broker.bootstrap_servers, second)
    ends = {p.partition: p.end for p in one.manifest.partitions}
    more = {p: sum(1 for r in second.produced if r.partition == p) for p in ends}

    lags = automation.landing_lag(one.manifest, [LogTail(p, ends[p] + more[p], None) for p in ends])

    assert {lag.partition: lag.records for lag in lags} == more
    read_at = datetime.fromisoformat(one.manifest.increments[-1].read_at)
    assert one.manifest.landed_through == min(read_at, H.end)
    later = datetime.now(timezone.utc) + timedelta(seconds=30)
    assert lag_seconds(one.manifest, later) == (later - min(read_at, H.end)).total_seconds()


def test_the_open_hour_lands_through_dagster_as_an_increment_its_partition_shows(broker, tmp_path, spark):
    """A landing of the hour the clock is in, as the sensor asks for it: its partition shows the increment (final or
    not, landed up to which offsets and when) and every landing check passes on it."""
    from datetime import datetime, timezone

    from confluent_kafka import Producer
    from dagster import DagsterInstance, materialize

    from kafka_lake.settings import PlatformSettings
    from platform_assets.assets import raw_landing_asset
    from platform_assets.definitions import platform_resources

    now = datetime.now(timezone.utc)
    if now.minute >= 55:
        pytest.skip("the hour ends within five minutes: run again after it")  # the open hour must stay open meanwhile
    open_now = KafkaHour.containing(now)
    lake = OpenHourLake(broker, tmp_path, str(tmp_path / "lake"), "iceberg", spark)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for item in lake.traffic.in_hours([H.start]).rows()[:30]:
        producer.produce(lake.topic.topic, value=item.value, partition=item.partition,
                         timestamp=to_millis(now) - 60_000)
        producer.flush(10)
    settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=str(tmp_path / "lake"))

    result = materialize([raw_landing_asset(lake.topic, embedded_metastore=False)],
                         partition_key=open_now.partition_key, resources=platform_resources(settings),
                         instance=DagsterInstance.ephemeral())

    assert result.success
    [raw] = [e.materialization for e in result.get_asset_materialization_events() if e.asset_key.path[0] == "raw"]
    metadata = {name: value.value for name, value in raw.metadata.items()}
    assert metadata["final"] is False and metadata["rows"] == 30
    assert "| 1 |" in metadata["increments"] and metadata["landed_up_to"]
    assert {c.check_name: c.passed for c in result.get_asset_check_evaluations()} == {
        "slices_contiguous": True, "counts_balance": True, "dead_letter_rate": True, "boundaries_confirmed": True,
        "table_matches_landing": True}
