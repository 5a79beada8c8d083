"""Raw landing end to end: real Tansu broker, real Spark, materialized through Dagster,
on a local lake and on the SeaweedFS S3 server.
"""

from __future__ import annotations

import gc
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from dagster import AssetKey, DagsterInstance, materialize

from kafka_lake.hours import KafkaHour
from kafka_lake.lake import layout
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.driver import land_hours
from kafka_lake.landing.slice_task import land_slice
from kafka_lake.landing.slices import HourNotClosed
from kafka_lake.settings import PlatformSettings
from platform_assets.assets import raw_landing_asset
from platform_assets.definitions import platform_resources
from tests.constants import PII_TEST_KEY
from tests.landing_fixtures import (
    EXPECTED_CAUSE,
    HOURS,
    PARTITIONS,
    build_traffic,
    in_this_process,
    lake_snapshot,
    land,
    landing_settings,
    placement_of,
    produce,
    pseudonym,
    read_lake,
    unique_topic_name,
    write_test_topic,
)


@pytest.fixture
def landed_topic(broker, spark, tmp_path, lake_root):
    """Given known traffic over three hours on three partitions, with a slice limit that forces splits."""
    kafka_topic = unique_topic_name()
    topic = write_test_topic(tmp_path / "catalog", kafka_topic, max_rows_per_task=10)
    broker.create_topic(kafka_topic, PARTITIONS)
    traffic = build_traffic(topic)
    produce(broker.bootstrap_servers, traffic)
    settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=lake_root)
    return topic, traffic, settings


def materialize_hours(topic, settings, hours):
    asset = raw_landing_asset(topic)
    results = []
    for hour in hours:
        result = materialize(
            [asset],
            partition_key=KafkaHour(hour).partition_key,
            resources=platform_resources(settings),
            instance=DagsterInstance.ephemeral(),
        )
        assert result.success
        checks = result.get_asset_check_evaluations()
        iceberg = {"table_matches_landing": True} if topic.table_format == "iceberg" else {}
        assert {c.check_name: c.passed for c in checks} == {
            "slices_contiguous": True, "counts_balance": True, "dead_letter_rate": True, "boundaries_confirmed": True,
            **iceberg}, [c.description for c in checks]
        results.append(result)
    return results


def test_every_good_record_lands_exactly_once_in_its_hour_with_its_values(landed_topic):
    topic, traffic, settings = landed_topic
    storage = LakeStorage(settings.lake_root)

    results = materialize_hours(topic, settings, HOURS)

    landed = traffic.in_hours(HOURS)
    rows = read_lake(storage, layout.table_prefix(topic.database, topic.table))
    by_id = Counter(r.row["event_id"] for r in rows)
    assert sorted(by_id) == sorted(p.record["event_id"] for p in landed.rows())
    assert set(by_id.values()) == {1}, "a record landed more than once"
    expected = {p.record["event_id"]: p for p in landed.rows()}
    for lake_row in rows:
        row, produced = lake_row.row, expected[lake_row.row["event_id"]]
        version, hour_dir = placement_of(produced)
        assert lake_row.path.startswith(f"e2e/orders/schema_version={version}/{hour_dir}/")
        assert (row["_kafka_topic"], row["_kafka_partition"], row["_kafka_offset"]) == (
            topic.topic, produced.partition, produced.offset)
        assert row["_kafka_timestamp"] == datetime.fromtimestamp(produced.timestamp_ms / 1000, tz=timezone.utc)
        assert row["_kafka_key"] == produced.key
        assert row["user_id"] == pseudonym(produced.record["user_id"], PII_TEST_KEY)
        assert row["amount"] == produced.record["amount"]
        assert row["quantity"] == produced.record["quantity"]
        assert row["tags"] == produced.record["tags"]
        assert row["meta"] == produced.record["meta"]
        assert row.get("channel") == produced.record.get("channel")
        assert "date" not in row and "hour" not in row and "schema_version" not in row

    dead = read_lake(storage, layout.dead_letter_prefix(topic.database, topic.table))
    expected_dead = {(p.partition, p.offset): p for p in landed.dead()}
    assert sorted((r.row["_kafka_partition"], r.row["_kafka_offset"]) for r in dead) == sorted(expected_dead)
    for lake_row in dead:
        produced = expected_dead[(lake_row.row["_kafka_partition"], lake_row.row["_kafka_offset"])]
        assert lake_row.row["value"] == produced.value
        assert lake_row.row["error"].startswith(EXPECTED_CAUSE[produced.kind] + ":"), lake_row.row["error"]
        kafka_hour = datetime.fromtimestamp(produced.timestamp_ms / 1000, tz=timezone.utc).replace(minute=0, second=0, microsecond=0)
        assert f"/{layout.hour_directory(kafka_hour)}/" in lake_row.path
    assert set(EXPECTED_CAUSE.values()) <= {r.row["error"].split(":")[0] for r in dead}

    manifests = ManifestStore(storage, topic.database, topic.table)
    counts = LandingCounts.total(manifest.counts for manifest in manifests.all())
    assert counts.tombstones == sum(1 for p in landed.produced if p.kind == "tombstone")
    assert counts.late_events == sum(1 for p in landed.rows() if placement_of(p)[1] < layout.hour_directory(
        datetime.fromtimestamp(p.timestamp_ms / 1000, tz=timezone.utc).replace(minute=0, second=0, microsecond=0)))
    assert counts.late_events > 0
    owned = {f.path for m in manifests.all() for f in m.files}
    on_disk = {f.path for prefix in (layout.table_prefix("e2e", "orders"), layout.dead_letter_prefix("e2e", "orders"))
               for f in storage.list_files(prefix)}
    assert on_disk == owned, "files in the lake that no manifest owns"

    metadata = results[1].asset_materializations_for_node(f"land_{topic.database}__{topic.table}")[0].metadata
    assert metadata["rows"].value == sum(1 for p in traffic.in_hours([HOURS[1]]).rows())
    assert metadata["slices"].value > PARTITIONS  # max_rows_per_task=10 split the partitions


def test_relanding_in_another_order_or_twice_changes_nothing(landed_topic):
    topic, traffic, settings = landed_topic
    storage = LakeStorage(settings.lake_root)
    materialize_hours(topic, settings, [HOURS[2], HOURS[0], HOURS[1]])
    first = lake_snapshot(storage, topic)
    assert first

    materialize_hours(topic, settings, [HOURS[1], HOURS[0], HOURS[2], HOURS[1]])

    assert lake_snapshot(storage, topic) == first
    rows = read_lake(storage, layout.table_prefix(topic.database, topic.table))
    assert len(rows) == len(traffic.in_hours(HOURS).rows())


def test_a_range_run_lands_each_hour_as_one_run_per_hour_does(landed_topic):
    """A backfill's run over several hours starts each hour's slices while the one before still runs (its plan
    starting where the running hour's plan ends); the lake and the boundaries are those of hour-by-hour runs."""
    topic, traffic, settings = landed_topic
    by_hour = replace(settings, lake_root=f"{settings.lake_root}-by-hour")
    materialize_hours(topic, by_hour, HOURS)

    keys = [KafkaHour(hour).partition_key for hour in HOURS]
    result = materialize(
        [raw_landing_asset(topic)],
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
        resources=platform_resources(settings),
        instance=DagsterInstance.ephemeral(),
    )

    assert result.success
    raw_key = AssetKey(["raw", topic.database, topic.table])
    assert sorted(e.materialization.partition for e in result.get_asset_materialization_events()
                  if e.asset_key == raw_key) == keys
    assert all(check.passed for check in result.get_asset_check_evaluations())
    ranged, hourly = LakeStorage(settings.lake_root), LakeStorage(by_hour.lake_root)
    assert lake_snapshot(ranged, topic) == lake_snapshot(hourly, topic)
    boundaries = lambda storage: [(m.hour, m.partitions) for m in ManifestStore(storage, topic.database, topic.table).all()]
    assert boundaries(ranged) == boundaries(hourly)
    assert len(read_lake(ranged, layout.table_prefix(topic.database, topic.table))) == len(traffic.in_hours(HOURS).rows())


def test_when_an_hour_of_a_range_fails_the_hours_before_are_committed_and_the_one_started_after_is_not(
        landed_topic, tmp_path):
    """Slices run in this process (a thread per hour), the failure raised by the second hour's slices."""
    topic, _traffic, settings = landed_topic
    landing = landing_settings(settings.lake_root, settings.kafka_bootstrap_servers)
    hours = [KafkaHour(hour) for hour in HOURS]
    threads = ThreadPoolExecutor(max_workers=2)

    def start_slices(tasks):
        def run():
            if tasks[0].hour == hours[1]:
                raise RuntimeError("a slice of the second hour failed")
            return [land_slice(task) for task in tasks]
        return threads.submit(run)

    committed = []
    with pytest.raises(RuntimeError, match="second hour failed"):
        for result in land_hours(topic, hours, landing, start_slices):
            committed.append(result.manifest.hour)

    storage = LakeStorage(settings.lake_root)
    assert committed == [hours[0].partition_key]
    assert ManifestStore(storage, topic.database, topic.table).landed_hours() == [hours[0]]
    threads.shutdown()
    assert gc.isenabled()  # the slice tasks that shared this process gave the collector back
    # The third hour was started ahead and waited for: what it wrote is owned by no manifest, and the next
    # landing of the hour removes it.
    land(topic, [hours[2]], landing, in_this_process)
    owned = {f.path for m in ManifestStore(storage, topic.database, topic.table).all() for f in m.files}
    for stored in storage.list_files(layout.table_prefix(topic.database, topic.table)):
        assert stored.path in owned


def test_when_the_last_hour_of_a_range_is_still_open_the_hours_before_it_land(landed_topic):
    """A backfill selected up to the current hour: that hour is refused, the one landing ahead of it commits."""
    topic, _traffic, settings = landed_topic
    landing = landing_settings(settings.lake_root, settings.kafka_bootstrap_servers)
    open_hour = KafkaHour(datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0))
    hours = [KafkaHour(HOURS[0]), KafkaHour(HOURS[1]), open_hour]
    threads = ThreadPoolExecutor(max_workers=2)

    committed = []
    with pytest.raises(HourNotClosed):
        for result in land_hours(topic, hours, landing, lambda tasks: threads.submit(lambda: [land_slice(t) for t in tasks])):
            committed.append(result.manifest.hour)
    threads.shutdown()

    assert committed == [hour.partition_key for hour in hours[:2]]
    assert ManifestStore(LakeStorage(settings.lake_root), topic.database, topic.table).landed_hours() == hours[:2]
