"""Fault suite, the Kafka log changing under the lake: offsets expired by retention before landing, the
topic deleted and recreated, partitions added; each ends with the exactly-once check.

Real brokers (Tansu, and librdkafka's mock cluster where Tansu cannot expire records) and real Spark.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from dagster import DagsterInstance, materialize

from dev_services.tansu import admin_client
from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.kafka.log import KafkaLog, consumer_config
from kafka_lake.lake.audit import read_audit
from kafka_lake.lake.landing_checks import slices_contiguous
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.slices import HourNotClosed, OffsetsLost
from kafka_lake.settings import PlatformSettings
from platform_assets.assets import raw_landing_asset
from platform_assets.definitions import platform_resources
from spark_jobs.landing_job import run_slices_on_spark
from tests.exactly_once import assert_exactly_once
from tests.landing_fixtures import (
    HOURS,
    Produced,
    Traffic,
    build_traffic,
    land,
    land_on_spark,
    landing_settings,
    produce,
    topic_with_traffic,
    unique_topic_name,
    write_test_topic,
)

pytestmark = pytest.mark.faults

# librdkafka's mock cluster keeps at most 5 MB per partition and drops the oldest batches beyond that.
MOCK_PARTITION_BYTES = 5 * 1024 * 1024


def log_bounds(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer(consumer_config(bootstrap))
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


# --- Offsets expired by retention ------------------------------------------------------------------


@pytest.fixture
def retention_broker():
    """librdkafka's built-in mock cluster, serving on loopback for as long as its owning client lives.

    Tansu 0.6 cannot expire records (no retention, and DeleteRecords is unimplemented: it panics), so
    this second real Kafka-protocol broker stands in: it enforces size retention by itself, moving a
    partition's log start forward exactly as retention does. Topics are created on first produce with
    4 partitions; its time lookups answer -1, which the platform's record-timestamp search handles.
    """
    owner = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    brokers = owner.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{b.host}:{b.port}" for b in brokers)
    owner.flush(1)


def padded_records(topic, hour, count: int, first_id: int) -> list[Produced]:
    """Rows of ~1 KB each (a long tag), a few seconds apart inside `hour`, all on partition 0."""
    version = topic.version(1)
    records = []
    for n in range(count):
        moment = hour + timedelta(milliseconds=n * (3_500_000 // count))
        record = {"event_id": first_id + n, "user_id": None, "meta": {"occurred_at": moment.isoformat().replace("+00:00", "Z")},
                  "amount": Decimal("1.00"), "quantity": 1, "tags": ["x" * 1000]}
        records.append(Produced(0, to_millis(moment), None, encode_confluent(version.registry_id, version.parsed, record),
                                "row", record, 1))
    return records


def test_given_offsets_expired_before_landing_then_the_hour_fails_naming_them_and_an_audited_option_accepts_the_loss(
    retention_broker, spark, tmp_path,
):
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    lake = str(tmp_path / "lake")
    first = Traffic(topic, padded_records(topic, HOURS[0], 50, 1))
    produce(retention_broker, first)
    land_on_spark(topic, landing_settings(lake, retention_broker), spark, [HOURS[0]])
    # Then more than the partition keeps arrives: retention drops the oldest records, some of them unlanded.
    later = Traffic(topic, padded_records(topic, HOURS[1], 6000, 51) + padded_records(topic, HOURS[2], 1, 6051))
    produce(retention_broker, later)
    log_start, _ = log_bounds(retention_broker, topic.topic, 0)
    assert 50 < log_start < 6050, "retention must have dropped unlanded offsets of the second hour, and only those"
    settings = PlatformSettings(kafka_bootstrap_servers=retention_broker, lake_root=lake)
    asset, hour = raw_landing_asset(topic), KafkaHour(HOURS[1])

    refused = materialize([asset], partition_key=hour.partition_key, resources=platform_resources(settings),
                          instance=DagsterInstance.ephemeral(), raise_on_error=False)

    assert not refused.success
    [failure] = [event.event_specific_data.error.to_string() for event in refused.all_events if event.is_step_failure]
    assert f"partition 0: offsets [50, {log_start})" in failure and "accept_lost_offsets" in failure
    storage = LakeStorage(lake)
    manifests = ManifestStore(storage, topic.database, topic.table)
    assert manifests.landed_hours() == [KafkaHour(HOURS[0])]

    accepted = materialize([asset], partition_key=hour.partition_key, resources=platform_resources(settings),
                           instance=DagsterInstance.ephemeral(),
                           run_config={"ops": {f"land_{topic.database}__{topic.table}": {"config": {"accept_lost_offsets": True}}}})

    assert accepted.success
    manifest = manifests.read(hour)
    assert manifest.accepted_losses == {"0": [50, log_start]}
    assert manifest.partition(0).start == log_start
    [check] = [c for c in accepted.get_asset_check_evaluations() if c.check_name == "slices_contiguous"]
    assert check.passed and f"offsets [50, {log_start}) accepted as lost" in check.description
    [audit] = read_audit(storage, topic)
    assert (audit.action, audit.rows, audit.partitions) == ("accept_lost_offsets", log_start - 50, (hour.partition_key,))
    assert f"[50, {log_start})" in audit.detail and accepted.run_id in audit.detail
    land_on_spark(topic, landing_settings(lake, retention_broker), spark, [HOURS[2]])
    count = assert_exactly_once(storage, topic, first.produced + later.produced)
    assert count.accepted_lost == {(0, offset) for offset in range(50, log_start)}


def test_given_an_accepted_gap_that_the_manifest_does_not_record_then_slices_contiguous_fails():
    """The other side of the check above: the same gap without the recorded acceptance is a failure."""
    from tests.test_slices import manifest

    before = manifest(KafkaHour(HOURS[0]), {0: (0, 50)})
    after = manifest(KafkaHour(HOURS[1]), {0: (1200, 6050)})
    outcome = slices_contiguous(after, before, None)
    assert not outcome.passed and "start 1200 ≠ previous hour" in outcome.description
    recorded = replace(after, accepted_losses={"0": [50, 1200]})
    assert slices_contiguous(recorded, before, None).passed
    assert not slices_contiguous(replace(after, accepted_losses={"0": [60, 1200]}), before, None).passed


# --- The topic deleted and recreated; partitions added ------------------------------------------------


def recreate_topic(broker, name: str, partitions: int) -> None:
    admin = admin_client(broker.bootstrap_servers)
    admin.delete_topics([name])[name].result(10)
    deadline = time.monotonic() + 10
    while name in admin.list_topics(timeout=5).topics:
        assert time.monotonic() < deadline, f"topic {name} still listed after deletion"
        time.sleep(0.05)
    broker.create_topic(name, partitions)


def test_given_the_topic_recreated_with_lower_offsets_then_landing_fails_naming_them_and_commits_nothing(broker, spark, tmp_path):
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog")
    lake = str(tmp_path / "lake")
    land_on_spark(topic, landing_settings(lake, broker.bootstrap_servers), spark, HOURS[:2])
    landed = ManifestStore(LakeStorage(lake), topic.database, topic.table).read(KafkaHour(HOURS[1]))
    recreate_topic(broker, topic.topic, 3)
    fewer = Traffic(topic, [p for p in build_traffic(topic, per_partition_per_hour=2).produced if p.timestamp_ms >= to_millis(HOURS[2])])
    produce(broker.bootstrap_servers, fewer)

    with pytest.raises(OffsetsLost) as lost:
        land(topic, [KafkaHour(HOURS[2])], landing_settings(lake, broker.bootstrap_servers),
                  lambda tasks: run_slices_on_spark(spark, tasks))

    for partition in landed.partitions:
        _, end = log_bounds(broker.bootstrap_servers, topic.topic, partition.partition)
        assert lost.value.losses[partition.partition] == (end, partition.end)
        assert f"partition {partition.partition}: offsets [{end}, {partition.end})" in str(lost.value)
    assert "recreated" in str(lost.value) and topic.topic in str(lost.value)
    manifests = ManifestStore(LakeStorage(lake), topic.database, topic.table)
    assert manifests.landed_hours() == [KafkaHour(h) for h in HOURS[:2]]
    assert_exactly_once(LakeStorage(lake), topic, traffic.in_hours(HOURS[:2]).produced)


def test_given_a_partition_added_after_an_hour_landed_then_it_lands_from_its_first_record_and_is_reported(broker, spark, tmp_path):
    """Tansu 0.6 cannot add partitions (it lacks CreatePartitions), so the topic is recreated with one
    more and given the same records at the same offsets on the old ones: what an added partition
    looks like to the platform. The new partition also gets records stamped in the hour landed before it existed."""
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog")
    lake = str(tmp_path / "lake")
    settings = landing_settings(lake, broker.bootstrap_servers)
    land_on_spark(topic, settings, spark, HOURS[:1])
    offsets = [p.offset for p in traffic.produced]
    recreate_topic(broker, topic.topic, 4)
    produce(broker.bootstrap_servers, traffic)
    assert [p.offset for p in traffic.produced] == offsets
    added = Traffic(topic, [replace(p, partition=3, offset=-1) for p in build_traffic(topic, seed=9).produced if p.partition == 0])
    produce(broker.bootstrap_servers, added)

    land_on_spark(topic, settings, spark, HOURS[1:])

    manifests = ManifestStore(LakeStorage(lake), topic.database, topic.table)
    second = manifests.read(KafkaHour(HOURS[1]))
    assert second.new_partitions == (3,)
    assert second.partition(3).start == 0 and "new since" in second.boundaries["3"]["start_from"]
    outcome = slices_contiguous(second, manifests.read(KafkaHour(HOURS[0])), manifests.read(KafkaHour(HOURS[2])))
    assert outcome.passed and "partition 3 (new since" in outcome.description
    assert any(p.timestamp_ms < to_millis(HOURS[1]) for p in added.produced), "the new partition holds records of the first hour"
    assert_exactly_once(LakeStorage(lake), topic, traffic.in_hours(HOURS).produced + added.in_hours(HOURS).produced)


def test_given_a_broker_answering_minus_one_for_no_later_record_then_the_hour_is_open_not_landed_empty(retention_broker, tmp_path):
    """Kafka answers a time lookup past the last record with -1 (the mock cluster does too; Tansu answers 0)."""
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    produce(retention_broker, Traffic(topic, padded_records(topic, HOURS[0], 3, 1)))
    with KafkaLog(consumer_config(retention_broker), topic.topic) as log:
        assert log._broker_lookup(0, KafkaHour(HOURS[0]).end_ms) == -1
        assert log.first_offset_at_or_after(0, KafkaHour(HOURS[0]).end_ms, 0, 3) is None

    with pytest.raises(HourNotClosed):
        land(topic, [KafkaHour(HOURS[0])], landing_settings(str(tmp_path / "lake"), retention_broker),
                  lambda tasks: pytest.fail("an open hour must not be landed"), now=HOURS[0] + timedelta(hours=1, minutes=5))
