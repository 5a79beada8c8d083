"""The sensors against the real broker, a real lake folder and a real (temporary) Dagster instance.

The wall clock is the one thing set by the test (`platform_assets.sensors._now`): closing an hour is
about time, and a test cannot wait an hour.
"""

import json
import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from confluent_kafka import Producer
from dagster import (
    AssetCheckKey,
    AssetMaterialization,
    AssetSelection,
    AssetSpec,
    Definitions,
    GraphDefinition,
    SensorResult,
    asset,
    build_run_status_sensor_context,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
    materialize,
    op,
)

from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.kafka.cluster import KafkaCluster
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import HourManifest, LandedFile, ManifestStore, PartitionLanding
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.loader import TopicCatalog, archived_table_name
from platform_assets import sensors
from platform_assets.checks import freshness_check
from platform_assets.definitions import load_platform_catalog, platform_resources
from platform_assets.jobs import PARTITION_RANGE_END, PARTITION_RANGE_START
from platform_assets.keys import asset_key, raw_key
from resources import AlertWebhookResource, KafkaResource, LakeStorageResource, SchemaRegistryResource
from tests.landing_fixtures import unique_topic_name, write_test_topic

H = KafkaHour(datetime(2026, 11, 20, 10, tzinfo=timezone.utc))


@pytest.fixture
def instance():
    with instance_for_test() as temporary:
        yield temporary


@pytest.fixture
def topic(tmp_path, broker):
    name = unique_topic_name()
    broker.create_topic(name, 2)
    spec = write_test_topic(tmp_path / "catalog", name, allowed_lateness_hours=1)
    return spec.model_copy(update=dict(record_grace_minutes=2, close_grace_minutes=10, freshness_minutes=60))


@pytest.fixture
def clock(monkeypatch):
    def set_to(moment: datetime):
        monkeypatch.setattr(sensors, "_now", lambda: moment)
    return set_to


@pytest.fixture
def webhook(monkeypatch):
    """A real HTTP server on loopback taking the alerts the sensors post."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # As the code location configures it: from ALERT_WEBHOOK_URL, through a dagster.EnvVar.
    monkeypatch.setenv("ALERT_WEBHOOK_URL", f"http://127.0.0.1:{server.server_port}/hooks/alerts")
    yield received
    server.shutdown()


def alerts_resource() -> AlertWebhookResource:
    return platform_resources(PlatformSettings())["alerts"]


def produce_at(broker, topic_name: str, partition: int, moment: datetime) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(topic_name, value=b"\x00", partition=partition, timestamp=to_millis(moment))
    producer.flush(10)


def tick(sensor, instance, cursor=None, **resources) -> SensorResult:
    context = build_sensor_context(instance=instance, cursor=cursor, resources={"alerts": AlertWebhookResource(), **resources})
    return sensor(context)


def test_each_tick_logs_per_topic_what_it_requested_and_why_the_next_hour_waits(broker, topic, instance, clock, caplog):
    """The tick's log (what the UI's *View logs* of a tick shows) has one line per topic."""
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    clock(H.end + timedelta(minutes=12))  # H closed by the clock, H+1 not even by records yet
    context = build_sensor_context(instance=instance, cursor=json.dumps({topic.topic: H.partition_key}),
                                   resources={"kafka": KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                                              "alerts": AlertWebhookResource()})
    context.log.addHandler(caplog.handler)  # the tick's own log, which the UI shows under *View logs*
    with caplog.at_level("INFO"):
        result = sensor(context)
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{topic.topic}: requested")]
    assert line == (f"{topic.topic}: requested {H} (closed); {H.next()} not closed: no record can close it before "
                    f"{H.next().end + timedelta(minutes=2):%H:%M}Z (end + record_grace_minutes); the clock closes it at "
                    f"{H.next().end + timedelta(minutes=10):%H:%M}Z (started where the last tick left off)")
    assert [r.partition_key for r in result.run_requests] == [H.partition_key]


def hours_of(request):
    return request.partition_key or (request.tags["dagster/asset_partition_range_start"],
                                     request.tags["dagster/asset_partition_range_end"])


def landed_by(request) -> tuple[str, ...]:
    """The raw tables a landing run request selects."""
    return tuple(key.to_user_string() for key in request.asset_selection if key.path[0] == "raw")


def test_the_tables_of_one_topic_land_an_hour_they_all_need_in_one_run(broker, topic, instance, clock):
    """Given two tables landing one Kafka topic (a copy placed by Kafka time) from the same hour; when the sensor
    ticks, then one run of the `landing` job lands both (it reads the topic once), tagged with the topic, the
    tables and the layer, with both tables' landing checks and not freshness."""
    copy = topic.model_copy(update=dict(database="copies", table="orders", time_source="kafka_time", time_field=None))
    sensor = sensors.landing_sensor(TopicCatalog((topic, copy)))
    clock(H.end + timedelta(minutes=12))
    cursor = json.dumps({f"{topic.topic} {topic.name}": H.partition_key, f"{copy.topic} {copy.name}": H.partition_key})

    [request] = tick(sensor, instance, cursor, kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers)).run_requests

    assert (request.job_name, request.partition_key) == ("landing", H.partition_key)
    assert set(request.asset_selection) == {raw_key(topic), raw_key(copy), asset_key("dead_letters", topic),
                                            asset_key("dead_letters", copy)}
    assert {key.asset_key for key in request.asset_check_keys} == {raw_key(topic), raw_key(copy)}
    assert "freshness" not in {key.name for key in request.asset_check_keys}, "freshness is topic_health's"
    assert request.tags == {"layer": "raw", "topic": topic.topic, "asset": "raw/e2e/orders, raw/copies/orders",
                            f"topic/{topic.topic}": "raw", "dagster/partition": H.partition_key}


def test_tables_of_one_topic_are_each_requested_from_where_they_left_off(broker, topic, instance, clock):
    """Given two tables landing one Kafka topic, one landed an hour further than the other; when the sensor ticks,
    then each is requested from its own next hour, and the hour both need lands both in one run."""
    copy = topic.model_copy(update=dict(database="copies", table="orders", time_source="kafka_time", time_field=None))
    sensor = sensors.landing_sensor(TopicCatalog((topic, copy)))
    clock(H.next().end + timedelta(minutes=12))  # H and H+1 closed by the clock
    cursor = json.dumps({f"{topic.topic} {topic.name}": H.partition_key, f"{copy.topic} {copy.name}": H.next().partition_key})

    result = tick(sensor, instance, cursor, kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers))

    requested = sorted((landed_by(r), hours_of(r)) for r in result.run_requests)
    assert requested == [(("raw/e2e/orders",), H.partition_key),
                         (("raw/e2e/orders", "raw/copies/orders"), H.next().partition_key)]


def test_a_closed_hour_is_requested_once_every_partition_shows_a_record_after_it(broker, topic, instance, clock):
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    cursor = json.dumps({topic.topic: H.partition_key})
    produce_at(broker, topic.topic, 0, H.start + timedelta(minutes=30))
    produce_at(broker, topic.topic, 0, H.end + timedelta(minutes=3))
    produce_at(broker, topic.topic, 1, H.start + timedelta(minutes=50))

    clock(H.end + timedelta(minutes=5))
    waiting = tick(sensor, instance, cursor, kafka=kafka)
    assert not waiting.run_requests, "partition 1 shows nothing after H+1 yet"
    assert (f"{topic.topic}: requested nothing; {H} not closed: partition(s) 1 hold no record stamped at or after "
            f"{H.end + timedelta(minutes=2):%H:%M}Z yet") in waiting.skip_reason.skip_message, "the tick says which partition holds H open"

    produce_at(broker, topic.topic, 1, H.end + timedelta(minutes=4))
    closed = tick(sensor, instance, cursor, kafka=kafka)
    assert [r.partition_key for r in closed.run_requests] == [H.partition_key]
    assert closed.run_requests[0].job_name == "landing", "runs under the landing job"
    assert closed.run_requests[0].asset_selection == [raw_key(topic), asset_key("dead_letters", topic)]
    assert closed.run_requests[0].tags == {"layer": "raw", "topic": topic.topic, "asset": f"raw/{topic.name}",
                                           f"topic/{topic.topic}": "raw", "dagster/partition": H.partition_key}
    assert json.loads(closed.cursor)[topic.topic] == H.next().partition_key

    again = tick(sensor, instance, closed.cursor, kafka=kafka)
    assert not again.run_requests, "an hour is requested once"


def test_the_cluster_reads_tails_in_batches_and_a_failed_answer_costs_only_its_topic(broker, topic):
    """Given three topics asked about in batches of one topic, one of them naming a partition the broker does not
    have; then the other two have their tails, and the third is named with why, rather than failing the read."""
    others = [unique_topic_name() for _ in range(2)]
    for name in others:
        broker.create_topic(name, 2)
        produce_at(broker, name, 1, H.end + timedelta(minutes=3))
    cluster = KafkaCluster(KafkaResource(bootstrap_servers=broker.bootstrap_servers).consumer_config())

    read = cluster.log_tails({others[0]: [0, 1], topic.topic: [0, 1, 7], others[1]: [0, 1]}, batch_partitions=2)

    assert sorted(read.tails) == sorted(others)
    assert [t.last_timestamp_ms for t in read[others[0]]] == [None, to_millis(H.end + timedelta(minutes=3))]
    assert list(read.unread) == [topic.topic] and "log end of partition(s) 7" in read.unread[topic.topic]


def test_topics_the_broker_did_not_answer_for_within_the_tick_are_named_and_judged_first_next_tick(
        broker, topic, instance, clock, caplog, monkeypatch):
    """Given a tick whose time for the broker is spent before the topic is asked (its budget none); then the tick
    says the topic's hour was not judged and why, requests nothing for it and keeps its hour; the next tick, with
    time for the broker, asks about it first and lands the hour."""
    from kafka_lake.kafka import cluster

    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    for partition in (0, 1):
        produce_at(broker, topic.topic, partition, H.end + timedelta(minutes=3))
    clock(H.end + timedelta(minutes=5))  # closing H asks the broker
    monkeypatch.setattr(cluster, "TICK_BUDGET_S", 0.0)

    skipped = tick(sensor, instance, json.dumps({topic.topic: H.partition_key}), kafka=kafka)

    assert not skipped.run_requests
    assert (f"{topic.topic}: requested nothing; {H} not judged this tick, judged first next tick: not asked this tick: "
            f"the broker's 0s of the tick went to 0 other topic(s)") in skipped.skip_reason.skip_message
    assert json.loads(skipped.cursor)[topic.topic] == H.partition_key, "the hour waits for its judgement"
    assert json.loads(skipped.cursor)[sensors.UNREAD] == [topic.topic]

    monkeypatch.setattr(cluster, "TICK_BUDGET_S", 20.0)
    landed = tick(sensor, instance, skipped.cursor, kafka=kafka)
    assert [r.partition_key for r in landed.run_requests] == [H.partition_key]
    assert json.loads(landed.cursor)[sensors.UNREAD] == []


def test_quiet_partitions_close_the_hour_when_the_idle_timeout_passes(broker, topic, instance, clock):
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    cursor = json.dumps({topic.topic: H.partition_key})
    clock(H.end + timedelta(minutes=9))
    assert not tick(sensor, instance, cursor, kafka=kafka).run_requests
    clock(H.end + timedelta(minutes=10) + timedelta(hours=2))
    [catching_up] = tick(sensor, instance, cursor, kafka=kafka).run_requests
    assert partition_keys(catching_up) == [H.partition_key, H.next().partition_key, H.next().next().partition_key], (
        "hours closed since the last tick land in one run"
    )


def test_a_new_topic_starts_after_its_newest_landed_hour(broker, topic, instance, clock):
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.partition_key))
    clock(H.end + timedelta(hours=1, minutes=11))
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    result = tick(sensor, instance, kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers))
    assert [r.partition_key for r in result.run_requests] == [H.next().partition_key]


def test_a_new_sensor_looks_up_the_newest_landed_hours_it_has_time_for_and_the_rest_next_tick(broker, topic, instance, clock,
                                                                                               monkeypatch):
    """Given a sensor new to the topic whose tick has no time left for asking the instance about new topics; then the
    tick says so for the topic and leaves it out of its cursor; the next tick looks it up and lands from there."""
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.partition_key))
    clock(H.end + timedelta(hours=1, minutes=11))
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    monkeypatch.setattr(sensors, "NEW_TOPICS_BUDGET_S", 0.0)

    waiting = tick(sensor, instance, kafka=kafka)

    assert not waiting.run_requests and topic.topic not in json.loads(waiting.cursor)
    assert (f"{topic.topic}: not judged this tick, judged next tick: its newest landed hour is asked of the instance "
            f"first") in waiting.skip_reason.skip_message
    monkeypatch.setattr(sensors, "NEW_TOPICS_BUDGET_S", 15.0)
    assert [r.partition_key for r in tick(sensor, instance, waiting.cursor, kafka=kafka).run_requests] == [H.next().partition_key]


def test_new_topics_never_landed_are_judged_at_once_whatever_the_ticks_lookup_time(broker, topic, instance, clock,
                                                                                   monkeypatch):
    """A new deployment's thousands of topics: those never landed need no query of their own (one read of every
    asset's latest materialization tells), so the first tick judges them all from their start_hour."""
    clock(H.end + timedelta(minutes=11))
    sensor = sensors.landing_sensor(TopicCatalog((topic.model_copy(update=dict(start_hour=H.start)),)))
    monkeypatch.setattr(sensors, "NEW_TOPICS_BUDGET_S", 0.0)

    first = tick(sensor, instance, kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers))

    assert [r.partition_key for r in first.run_requests] == [H.partition_key]


def write_manifest(storage: LakeStorage, topic, hour: KafkaHour, placement: KafkaHour, run_id: str = "") -> None:
    path = (f"{topic.database}/{topic.table}/schema_version=1/date={placement.start:%Y-%m-%d}/"
            f"hour={placement.start:%H}/{topic.topic}+0+{hour.start_ms}.parquet")
    ManifestStore(storage, topic.database, topic.table).write(HourManifest(
        topic.database, topic.table, topic.topic, hour.partition_key, (PartitionLanding(0, 0, 1, LandingCounts(records=1, rows=1)),),
        (LandedFile(path, "data", 0, 0, 1, 10, 1, placement.partition_key),), "2026-11-20T12:00:00Z", run_id=run_id,
    ))


def land(instance, storage, topic, hour: KafkaHour, placement: KafkaHour | None = None) -> None:
    write_manifest(storage, topic, hour, placement or hour)
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=hour.partition_key))


def partition_keys(request) -> list[str]:
    """The hours a run request covers: one partition, or a range as the UI's backfills tag it."""
    if request.partition_key:
        return [request.partition_key]
    first = KafkaHour.from_partition_key(request.tags[PARTITION_RANGE_START])
    last = KafkaHour.from_partition_key(request.tags[PARTITION_RANGE_END])
    return [KafkaHour(first.start + timedelta(hours=n)).partition_key for n in range(int((last.start - first.start) / timedelta(hours=1)) + 1)]


def requested(result: SensorResult) -> set[tuple[str, str, str]]:
    """(job, the asset it selects, hour) of each hour requested."""
    return {(r.job_name, r.tags["asset"], hour) for r in result.run_requests for hour in partition_keys(r)}


def test_landings_make_compaction_and_then_registration_follow_late_data_included(topic, instance, tmp_path):
    storage = LakeStorage(str(tmp_path / "lake"))
    lake = LakeStorageResource(root=str(tmp_path / "lake"))
    sensor = sensors.follow_up_sensor(TopicCatalog((topic,)))
    compacted = ("compaction", f"compacted/{topic.name}")
    start = tick(sensor, instance, lake=lake)
    assert not start.run_requests

    land(instance, storage, topic, H)
    first = tick(sensor, instance, start.cursor, lake=lake)
    assert requested(first) == set(), "H is not due while H+1 (allowed lateness 1 h) has not landed"

    land(instance, storage, topic, H.next())
    second = tick(sensor, instance, first.cursor, lake=lake)
    assert requested(second) == {(*compacted, H.partition_key)}

    instance.report_runless_asset_event(AssetMaterialization(asset_key("compacted", topic), partition=H.partition_key))
    third = tick(sensor, instance, second.cursor, lake=lake)
    assert requested(third) == {("registration", f"catalog/{topic.name}", H.partition_key)}

    later = KafkaHour(H.start + timedelta(hours=5))
    for hour in (KafkaHour(H.start + timedelta(hours=n)) for n in (2, 3, 4)):
        write_manifest(storage, topic, hour, hour)
    land(instance, storage, topic, later, placement=H)  # late events of H, landed hours later
    fourth = tick(sensor, instance, third.cursor, lake=lake)
    assert (*compacted, H.partition_key) in requested(fourth), "late data makes H due again"
    assert (*compacted, KafkaHour(later.start - timedelta(hours=1)).partition_key) in requested(fourth)


def test_a_run_that_restates_an_hour_another_run_landed_makes_nothing_due(topic, instance, tmp_path):
    """A refused re-landing of an hour that stands restates its landing (its materialization again): nothing landed, so
    nothing is compacted again; a landing of the hour by the run itself is followed up."""
    storage = LakeStorage(str(tmp_path / "lake"))
    lake = LakeStorageResource(root=str(tmp_path / "lake"))
    sensor = sensors.follow_up_sensor(TopicCatalog((topic,)))
    start = tick(sensor, instance, lake=lake)
    write_manifest(storage, topic, H, H)
    write_manifest(storage, topic, H.next(), H.next(), run_id="the-landing-run")

    @op(out={})
    def restate(context):
        context.log_event(AssetMaterialization(raw_key(topic), partition=H.next().partition_key))

    GraphDefinition(name="restating", node_defs=[restate]).to_job().execute_in_process(instance=instance)
    restated = tick(sensor, instance, start.cursor, lake=lake)

    assert requested(restated) == set(), "H+1 stands as its own run landed it: H is not due again by it"


def test_freshness_fails_with_how_late_alerts_and_recovers(broker, topic, instance, clock, webhook, tmp_path):
    sensor = sensors.health_sensor(TopicCatalog((topic,)))
    resources = dict(kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                     lake=LakeStorageResource(root=str(tmp_path / "lake")), alerts=alerts_resource(),
                     schema_registry=SchemaRegistryResource())
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.previous().partition_key))
    clock(H.end + timedelta(minutes=75))  # H was due 15 minutes ago

    stale = tick(sensor, instance, **resources)
    [evaluation] = [e for e in stale.asset_events if type(e).__name__ == "AssetCheckEvaluation"]
    assert not evaluation.passed
    assert evaluation.metadata["minutes_late"].value == pytest.approx(15.0)
    assert "15 min late" in evaluation.description
    assert webhook[-1]["text"].startswith("[FAILED] freshness of " + topic.topic)

    instance.report_runless_asset_event(evaluation)  # what the daemon does with the tick's events
    unchanged = tick(sensor, instance, stale.cursor, **resources)
    assert not [e for e in unchanged.asset_events if type(e).__name__ == "AssetCheckEvaluation"], "no repeat while unchanged"
    assert len(webhook) == 1

    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.partition_key))
    fresh = tick(sensor, instance, unchanged.cursor, **resources)
    [evaluation] = [e for e in fresh.asset_events if type(e).__name__ == "AssetCheckEvaluation"]
    assert evaluation.passed
    assert webhook[-1]["text"].startswith("[RECOVERED] freshness of " + topic.topic)
    # It says when the hour landed (Dagster's record of the landing), not that it landed in time.
    landed = datetime.fromtimestamp(instance.get_latest_materialization_event(raw_key(topic)).timestamp, timezone.utc)
    assert f"hour {H} is landed: landed at {landed:%Y-%m-%d %H:%M}Z" in webhook[-1]["text"]
    assert "within" not in webhook[-1]["text"]


def test_topic_health_judges_what_its_tick_allows_names_the_rest_and_judges_them_first_next_tick(
        broker, topic, instance, clock, tmp_path, caplog, monkeypatch):
    """Given a tick of `topic_health` whose time is spent before it reaches the topic (its budget none); then the
    tick records nothing for it, says so for that topic and keeps it for the next tick, which judges it."""
    sensor = sensors.health_sensor(TopicCatalog((topic,)))
    resources = dict(kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                     lake=LakeStorageResource(root=str(tmp_path / "lake")), alerts=alerts_resource(),
                     schema_registry=SchemaRegistryResource())
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.previous().partition_key))
    clock(H.end + timedelta(minutes=75))
    monkeypatch.setattr(sensors, "HEALTH_TICK_BUDGET_S", 0.0)

    context = build_sensor_context(instance=instance, resources=resources)
    context.log.addHandler(caplog.handler)
    with caplog.at_level("INFO"):
        skipped = sensor(context)

    assert not skipped.asset_events
    assert f"{topic.topic}: not judged this tick, judged first next tick: the tick's 0s went to other topics" in caplog.text
    assert json.loads(skipped.cursor)[sensors.UNREAD] == [topic.topic]

    monkeypatch.setattr(sensors, "HEALTH_TICK_BUDGET_S", 40.0)
    judged = tick(sensor, instance, skipped.cursor, **resources)
    assert {type(e).__name__ for e in judged.asset_events} == {"AssetCheckEvaluation", "AssetObservation"}
    assert json.loads(judged.cursor)[sensors.UNREAD] == []


def test_lag_is_observed_per_partition_in_records_and_time(broker, topic, instance, clock, tmp_path):
    storage = LakeStorage(str(tmp_path / "lake"))
    for minute in (10, 20, 30):
        produce_at(broker, topic.topic, 0, H.start + timedelta(minutes=minute))
    produce_at(broker, topic.topic, 0, H.end + timedelta(minutes=40))
    land(instance, storage, topic, H)  # the manifest says partition 0 landed [0, 1)
    clock(H.end + timedelta(hours=1))
    sensor = sensors.health_sensor(TopicCatalog((topic,)))
    result = tick(sensor, instance, kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                  lake=LakeStorageResource(root=str(tmp_path / "lake")), alerts=alerts_resource(),
                  schema_registry=SchemaRegistryResource())
    [observation] = [e for e in result.asset_events if type(e).__name__ == "AssetObservation"]
    metadata = {k: v.value for k, v in observation.metadata.items()}
    assert metadata["lag_records_p0"] == 3, "four records produced, one landed"
    assert metadata["lag_seconds_p0"] == pytest.approx(40 * 60)
    assert metadata["lag_records_p1"] == 0
    assert metadata["lag_records"] == 3


def test_topics_on_the_cluster_missing_from_the_catalog_are_reported_once(broker, topic, instance, webhook, tmp_path):
    # The broker is shared by the whole suite, so other tests' topics are on it too: they were reported before.
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    reported_before = json.dumps(sorted(set(KafkaCluster(kafka.consumer_config()).topics()) - {topic.topic}))
    stray = unique_topic_name().replace("e2e.orders", "e2e.stray")
    broker.create_topic(stray, 1)
    sensor = sensors.missing_topics_sensor(TopicCatalog((topic,)))
    resources = dict(kafka=kafka, lake=LakeStorageResource(root=str(tmp_path / "lake")), alerts=alerts_resource())
    first = tick(sensor, instance, reported_before, **resources)
    assert "(1 new): " + stray in first.skip_reason.skip_message, "the new topic is named first"
    assert topic.topic not in json.loads(first.cursor)
    assert any(stray in alert["text"] for alert in webhook)
    alerts = len(webhook)
    second = tick(sensor, instance, first.cursor, **resources)
    assert "(0 new)" in second.skip_reason.skip_message and stray in json.loads(second.cursor)
    assert len(webhook) == alerts, "a topic already reported is not alerted again"


def test_new_topics_the_archive_rule_takes_are_archived_not_reported_and_load_as_raw_tables(broker, instance, webhook,
                                                                                           tmp_path):
    """Given an archive rule and a new matching topic on the cluster, when the sensor ticks, then the lake records it,
    it is not reported missing, and the next load of the catalog makes it a raw table of its own."""
    audit, stray = unique_topic_name().replace("e2e.orders", "audit"), unique_topic_name().replace("e2e.orders", "e2e.stray")
    for name in (audit, stray):
        broker.create_topic(name, 1)
    catalog_dir = tmp_path / "catalog"
    write_test_topic(catalog_dir, unique_topic_name())
    (catalog_dir / "_archive.yaml").write_text('pattern: "audit[.].*"\nowner: team-platform\nstart_hour: "2026-11-01T00:00Z"\n')
    settings = replace(PlatformSettings.from_env(), schema_catalog_dir=str(catalog_dir), lake_root=str(tmp_path / "lake"))
    sensor = sensors.missing_topics_sensor(load_platform_catalog(settings))
    resources = dict(kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                     lake=LakeStorageResource(root=settings.lake_root), alerts=alerts_resource())

    # The broker is shared by the whole suite, so other tests' topics are on it too: they were reported before.
    reported_before = json.dumps(sorted(set(KafkaCluster(resources["kafka"].consumer_config()).topics()) - {stray, audit}))
    first = tick(sensor, instance, reported_before, **resources)

    assert first.skip_reason.skip_message.startswith("1 new topic(s) archived (reload the code location to land them)")
    assert stray in first.skip_reason.skip_message and audit not in json.loads(first.cursor)
    assert not any(audit in alert["text"] for alert in webhook)
    reloaded = load_platform_catalog(settings)
    [archived] = reloaded.tables_of(audit)
    assert (archived.database, archived.table, archived.payload_format, archived.archived) == (
        "archive", archived_table_name(audit), "raw", True)
    second = tick(sensors.missing_topics_sensor(reloaded), instance, first.cursor, **resources)
    assert "archived" not in second.skip_reason.skip_message, "a topic is archived once"


def test_a_failed_run_is_posted_with_its_error(instance, webhook, topic):
    @asset(name="always_fails")
    def always_fails():
        raise RuntimeError("hour 2026-11-20-10:00 is not closed: partition(s) 1 have no record")

    result = materialize([always_fails], instance=instance, raise_on_error=False)
    context = build_run_status_sensor_context(
        sensor_name="alert_on_failed_runs", dagster_instance=instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
    ).for_run_failure()
    sensors.failed_runs_sensor(TopicCatalog((topic,)))(context, alerts=alerts_resource())
    [alert] = webhook
    assert alert["text"].startswith(f"[FAILED] run {result.dagster_run.run_id[:8]} of ")
    assert "RuntimeError: hour 2026-11-20-10:00 is not closed" in alert["text"], "the step's error, not just its name"


def test_a_run_of_many_topics_failed_outside_its_steps_says_so_with_its_message_hours_and_what_committed(
        topic, instance, webhook, tmp_path):
    """Given a landing run of three topics whose worker recorded one table-hour and was then lost, the run failed from
    outside (as run monitoring fails it): no step failed. The alert read "0 failed, the others committed", naming no
    topic, hour or cause."""
    from dagster import DagsterRunStatus

    others = [write_test_topic(tmp_path / name, unique_topic_name()).model_copy(update={"database": name})
              for name in ("second", "third")]
    [request] = sensors.landing_requests({t: [H] for t in (topic, *others)})
    run = _run_of_request(instance, request, DagsterRunStatus.STARTED)
    _landed_in(instance, run, topic, H)
    failure = instance.report_run_failed(instance.get_run_by_id(run.run_id))
    context = build_run_status_sensor_context(
        sensor_name="alert_on_failed_runs", dagster_instance=instance, dagster_run=instance.get_run_by_id(run.run_id),
        dagster_event=failure,
    ).for_run_failure()

    sensors.failed_runs_sensor(TopicCatalog((topic, *others)))(context, alerts=alerts_resource())

    [alert] = webhook
    assert alert["text"] == (
        f"[FAILED] run {run.run_id[:8]} of landing of 3 topics {H.partition_key}: no step failed; the run failed before "
        f"or outside its steps: This run has been marked as failed from outside the execution context (its "
        f"materializations show 1 table-hour(s) committed; nothing else of it is known to have committed).")


def test_a_failed_run_whose_retry_is_announced_is_posted_saying_so_unless_its_sensor_asks_again_for_it(topic, webhook):
    """Given run retries on, two runs failing for a cause a retry can heal: one launched as from the UI, one by the
    landing sensor. The failure sensor sees each failure once: it skipped both, and a retry that never started was
    told to nobody. The sensor's run is left to its sensor, which asks again when the retry is lost."""
    from dagster._core.storage.tags import SENSOR_NAME_TAG

    @asset(name="fails_for_a_while")
    def fails_for_a_while():
        raise RuntimeError("the broker is away")

    def alerted(tags: dict) -> list:
        result = materialize([fails_for_a_while], instance=retrying, tags=tags, raise_on_error=False)
        run = retrying.get_run_by_id(result.run_id)
        assert run.tags["dagster/will_retry"] == "true", "the instance announced a retry"
        context = build_run_status_sensor_context(
            sensor_name="alert_on_failed_runs", dagster_instance=retrying, dagster_run=run,
            dagster_event=result.get_run_failure_event(),
        ).for_run_failure()
        before = len(webhook)
        sensors.failed_runs_sensor(TopicCatalog((topic,)))(context, alerts=alerts_resource())
        return webhook[before:]

    with instance_for_test(overrides={"run_retries": {"enabled": True, "max_retries": 2}}) as retrying:
        [from_the_ui] = alerted({})
        assert "RuntimeError: the broker is away" in from_the_ui["text"]
        assert from_the_ui["text"].endswith("\nA retry is announced: if none appears in the Runs list within minutes, "
                                            "it was lost and nothing retries this run.")
        assert alerted({SENSOR_NAME_TAG: "land_closed_hours"}) == []

    catalog = TopicCatalog((topic.model_copy(update={"current_state": None}),))
    layer_sensors = (sensors.landing_sensor(catalog), sensors.follow_up_sensor(catalog), sensors.current_state_sensor(catalog))
    assert sensors.ASKING_SENSORS == {sensor.name for sensor in layer_sensors}


def test_the_freshness_check_runs_on_demand_with_the_same_rule(topic, instance):
    """*Execute* on the check in the UI: a run of the check alone, against what the instance saw land."""
    now = datetime.now(timezone.utc)
    due = KafkaHour.containing(now - timedelta(minutes=topic.freshness_minutes)).previous()
    job = define_asset_job("freshness", selection=AssetSelection.checks(freshness_check(topic)))
    definitions = Definitions(assets=[AssetSpec(raw_key(topic))], asset_checks=[freshness_check(topic)], jobs=[job])

    [stale] = definitions.resolve_job_def("freshness").execute_in_process(instance=instance).get_asset_check_evaluations()
    assert not stale.passed and "no hour landed yet" in stale.description

    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=due.partition_key))
    [fresh] = definitions.resolve_job_def("freshness").execute_in_process(instance=instance).get_asset_check_evaluations()
    assert fresh.passed and str(due) in fresh.description


def test_freshness_shown_stale_by_a_run_is_recorded_again(broker, topic, instance, clock, tmp_path):
    """A landing run that planned the freshness check and failed leaves it "execution failed" in the UI;
    the next tick records the state again, though the state itself did not change."""
    sensor = sensors.health_sensor(TopicCatalog((topic,)))
    resources = dict(kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                     lake=LakeStorageResource(root=str(tmp_path / "lake")), alerts=alerts_resource(),
                     schema_registry=SchemaRegistryResource())
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.partition_key))
    clock(H.end + timedelta(minutes=30))
    before = tick(sensor, instance, **resources)
    [first] = [e for e in before.asset_events if type(e).__name__ == "AssetCheckEvaluation"]
    instance.report_runless_asset_event(first)

    @asset(key=raw_key(topic))
    def failing_landing():
        raise RuntimeError("the broker is gone")

    run = materialize([failing_landing, freshness_check(topic)], instance=instance, raise_on_error=False)
    assert not run.success and not run.get_asset_check_evaluations(), "the run planned freshness and never evaluated it"
    [again] = [e for e in tick(sensor, instance, before.cursor, **resources).asset_events
               if type(e).__name__ == "AssetCheckEvaluation"]
    assert (again.passed, again.description) == (first.passed, first.description)


def test_a_landing_shows_freshness_against_the_new_materialization(broker, topic, instance, clock, tmp_path):
    """An unpartitioned check shows as current only if it targets the newest landing: each landing is
    followed by a new record of the (unchanged) state, pointing at it."""
    sensor = sensors.health_sensor(TopicCatalog((topic,)))
    resources = dict(kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                     lake=LakeStorageResource(root=str(tmp_path / "lake")), alerts=alerts_resource(),
                     schema_registry=SchemaRegistryResource())
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.partition_key))
    clock(H.end + timedelta(minutes=30))
    before = tick(sensor, instance, **resources)
    [first] = [e for e in before.asset_events if type(e).__name__ == "AssetCheckEvaluation"]
    instance.report_runless_asset_event(first)
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.partition_key))  # re-landed
    [again] = [e for e in tick(sensor, instance, before.cursor, **resources).asset_events
               if type(e).__name__ == "AssetCheckEvaluation"]
    latest = instance.get_asset_records([raw_key(topic)])[0].asset_entry.last_materialization_record
    assert (again.passed, again.description) == (first.passed, first.description), "the state did not change"
    assert again.target_materialization_data.storage_id == latest.storage_id != first.target_materialization_data.storage_id


def test_a_failed_landing_that_planned_freshness_leaves_it_evaluated_not_execution_failed(instance, topic, webhook):
    """A landing launched from the UI runs every check of raw/…, freshness included; when it fails, the
    failure sensor records the freshness again at once, so the UI never reads "execution failed" for it."""
    @asset(key=raw_key(topic))
    def failing_landing():
        raise RuntimeError("the broker is gone")

    result = materialize([failing_landing, freshness_check(topic)], instance=instance, raise_on_error=False)
    check = AssetCheckKey(raw_key(topic), "freshness")
    assert instance.event_log_storage.get_latest_asset_check_execution_by_key([check])[check].status.value == "PLANNED"
    context = build_run_status_sensor_context(
        sensor_name="alert_on_failed_runs", dagster_instance=instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
    ).for_run_failure()

    sensors.failed_runs_sensor(TopicCatalog((topic,)))(context, alerts=alerts_resource())

    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key([check])[check]
    assert latest.status.value in ("SUCCEEDED", "FAILED") and latest.run_id != result.run_id


def test_topic_health_judges_topics_that_landed_nothing_in_their_window_from_one_read_of_every_asset(
        broker, topic, instance, clock, monkeypatch, tmp_path):
    """A catalog of thousands of new topics must be judged within a tick: a topic whose raw asset was never
    materialized, or not since its freshness window began, fails freshness from the assets' latest materializations,
    read for every topic at once, without a query of its own."""
    quiet = topic.model_copy(update=dict(database="quiet", table="never"))
    stale = topic.model_copy(update=dict(database="stale", table="long_ago"))
    now = H.end + timedelta(days=20)
    clock(now)
    instance.report_runless_asset_event(AssetMaterialization(raw_key(stale), partition=H.partition_key))
    asked = fetches_of(instance, monkeypatch)

    result = tick(sensors.health_sensor(TopicCatalog((quiet, stale))), instance, None,
                  kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                  lake=LakeStorageResource(root=str(tmp_path / "lake")), schema_registry=SchemaRegistryResource())

    evaluations = {event.asset_key: event for event in result.asset_events if type(event).__name__ == "AssetCheckEvaluation"}
    assert not evaluations[raw_key(quiet)].passed and not evaluations[raw_key(stale)].passed
    assert f"newest landed hour {H}" in evaluations[raw_key(stale)].description
    assert asked == [], "judged from the assets' latest materializations alone"


def fetches_of(instance, monkeypatch) -> list:
    """The record filters of every `fetch_materializations` the instance is asked from now on (it still answers)."""
    fetches = []
    fetch = type(instance).fetch_materializations

    def fetched(self, records_filter, *args, **kwargs):
        fetches.append(records_filter)
        return fetch(self, records_filter, *args, **kwargs)
    monkeypatch.setattr(type(instance), "fetch_materializations", fetched)
    return fetches


def test_the_freshness_check_asks_dagster_about_its_window_of_hours_only(topic, instance, monkeypatch):
    """Given a topic landed for weeks (an hour older than the freshness window, and the hours of the window but the
    due one); the check reads the window's hours alone, whatever the history, and names the newest landed hour."""
    from platform_assets.checks import evaluate_freshness

    now = datetime.now(timezone.utc)
    due = KafkaHour.containing(now - timedelta(minutes=topic.freshness_minutes)).previous()
    old = KafkaHour.containing(now - timedelta(days=30))
    spec = topic.model_copy(update=dict(start_hour=old.start))
    for hour in (old, due.previous(), due.previous().previous()):
        instance.report_runless_asset_event(AssetMaterialization(raw_key(spec), partition=hour.partition_key))
    fetches = fetches_of(instance, monkeypatch)
    monkeypatch.setattr(type(instance), "get_materialized_partitions", None)  # every partition ever landed: not asked

    late = evaluate_freshness(instance, spec, now)

    assert not late.passed and late.missing_hours == 1 and f"newest landed hour {due.previous()}" in late.description
    asked = [records_filter.asset_partitions for records_filter in fetches]
    assert all(len(partitions) <= 7 * 24 and old.partition_key not in partitions for partitions in asked) and asked

    instance.report_runless_asset_event(AssetMaterialization(raw_key(spec), partition=due.partition_key))
    assert evaluate_freshness(instance, spec, now).passed


def test_the_newest_landed_hour_is_the_newest_hour_landed_not_the_latest_landing(topic, instance):
    """Given the due hour and the hour after it landed, then an older hour landed again (the latest materialization):
    the check and topic_health name the newest hour, where the latest landing's hour was named."""
    from platform_assets.checks import evaluate_freshness, landed_in_freshness_window

    now = datetime.now(timezone.utc)
    due = KafkaHour.containing(now - timedelta(minutes=topic.freshness_minutes)).previous()
    for hour in (due, due.next(), due.previous()):  # the older hour landed again last
        instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=hour.partition_key))

    result = evaluate_freshness(instance, topic, now)

    assert result.passed and result.description.endswith(f"newest landed hour {due.next()}"), result.description
    assert landed_in_freshness_window(instance, topic, now)[1] == due.next()


def test_a_topic_whose_catalog_entry_is_rejected_is_named_as_such_not_alerted_as_missing(broker, topic, instance, webhook,
                                                                                        tmp_path, caplog):
    from kafka_lake.topics.loader import BrokenEntry, CatalogError

    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    reported_before = json.dumps(sorted(set(KafkaCluster(kafka.consumer_config()).topics()) - {topic.topic}))
    typo = BrokenEntry(str(tmp_path / "e2e" / "orders" / "topic.yaml"), CatalogError("unknown key(s) ownr"), topic=topic.topic)
    sensor = sensors.missing_topics_sensor(TopicCatalog((), broken=(typo,)))
    context = build_sensor_context(instance=instance, cursor=reported_before, resources=dict(
        kafka=kafka, lake=LakeStorageResource(root=str(tmp_path / "lake")), alerts=alerts_resource()))
    context.log.addHandler(caplog.handler)

    with caplog.at_level("INFO"):
        result = sensor(context)

    assert topic.topic not in json.loads(result.cursor) and not any(topic.topic in alert["text"] for alert in webhook)
    assert any(r.getMessage().endswith(f"have a rejected catalog entry, not a missing one (see catalog_entries_rejected): "
                                       f"{topic.topic}") for r in caplog.records)


def test_what_a_run_still_going_landed_is_followed_up_once_the_run_has_ended(topic, instance, tmp_path):
    """A run of many topics lands them over minutes: followed up as they come, each tick would ask for a run of the
    few landed since the tick before. Given H+1 landed, then H landed by a run still going."""
    from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus
    from dagster._core.events import StepMaterializationData
    from dagster._core.test_utils import create_run_for_test

    storage = LakeStorage(str(tmp_path / "lake"))
    lake = LakeStorageResource(root=str(tmp_path / "lake"))
    sensor = sensors.follow_up_sensor(TopicCatalog((topic,)))
    start = tick(sensor, instance, lake=lake)
    land(instance, storage, topic, H.next())
    before = tick(sensor, instance, start.cursor, lake=lake)
    assert requested(before) == set(), "H+1 waits for H+2 (allowed lateness 1 h)"
    going = create_run_for_test(instance, job_name="landing", status=DagsterRunStatus.STARTED,
                                tags={"topics": f"1: {topic.topic}"})
    write_manifest(storage, topic, H, H)
    instance.report_dagster_event(DagsterEvent(
        DagsterEventType.ASSET_MATERIALIZATION.value, job_name="landing",
        event_specific_data=StepMaterializationData(AssetMaterialization(raw_key(topic), partition=H.partition_key)),
    ), run_id=going.run_id)

    while_going = tick(sensor, instance, before.cursor, lake=lake)
    assert requested(while_going) == set(), "H landed in a run still going: followed up once the run ends"
    assert while_going.skip_reason.skip_message.startswith(f"waiting for run {going.run_id[:8]} (landing, 1 topics)")

    instance.handle_run_event(going.run_id, DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name="landing"))
    after_it = tick(sensor, instance, while_going.cursor, lake=lake)
    assert requested(after_it) == {("compaction", f"compacted/{topic.name}", H.partition_key)}


def test_the_landing_sensor_makes_the_code_locations_pools_within_its_budget_and_then_no_more(broker, topic, clock,
                                                                                              monkeypatch):
    """A fresh deployment: no pool exists; the sensor makes what its budget allows, says how many are left, makes
    the rest next tick, and once all exist does not ask the instance again until the catalog's pools change."""
    from platform_assets import pools

    wanted = tuple(f"landing/db_{n}/t" for n in range(5))
    sensor = sensors.landing_sensor(TopicCatalog((topic,)), pools=wanted)
    clock(H.start)  # nothing closed: the tick only makes pools
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    with instance_for_test(overrides={"concurrency": {"pools": {"default_limit": 1}}}) as instance:
        monkeypatch.setattr(sensors, "ensure_pools", lambda inst, made: pools.ensure_pools(inst, made, budget_s=0.0))
        first = tick(sensor, instance, json.dumps({topic.topic: H.partition_key}), kafka=kafka)
        assert sensors.POOLS_MADE not in json.loads(first.cursor), "none made within no time: asked again next tick"
        monkeypatch.setattr(sensors, "ensure_pools", pools.ensure_pools)
        second = tick(sensor, instance, first.cursor, kafka=kafka)
        assert set(wanted) <= instance.event_log_storage.get_concurrency_keys()
        assert {instance.event_log_storage.get_concurrency_info(p).slot_count for p in wanted} == {1}
        asked = []
        monkeypatch.setattr(sensors, "ensure_pools", lambda *args: asked.append(args) or ([], 0))
        tick(sensor, instance, second.cursor, kafka=kafka)
        assert asked == [], "every pool made: the instance is not asked again"


def test_recent_landings_of_many_topics_tell_freshness_what_a_query_a_topic_tells(topic, instance, monkeypatch):
    """`topic_health` reads every topic's landings since the earliest due hour in one pass over the event log, and the
    freshness it judges from them is the one asked of Dagster topic by topic; a topic whose due hour is missing is
    left to its own query (which also counts the hours missing before it)."""
    from platform_assets.checks import landed_in_freshness_window, recent_landings

    other = topic.model_copy(update=dict(database="others", table="orders", topic=f"{topic.topic}.other"))
    now = H.end + timedelta(hours=3)
    for hour in (H.previous(), H, H.next()):
        instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=hour.partition_key))
    instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=H.partition_key))  # again
    instance.report_runless_asset_event(AssetMaterialization(raw_key(other), partition=H.previous().partition_key))
    for _ in range(30):  # other assets' events around them
        instance.report_runless_asset_event(AssetMaterialization(asset_key("compacted", topic), partition=H.partition_key))

    since = datetime.now(timezone.utc) - timedelta(minutes=1)
    recent = recent_landings(instance, {raw_key(topic), raw_key(other)}, since)
    assert set(recent.by_key[raw_key(topic)]) == {h.partition_key for h in (H.previous(), H, H.next())}

    # Every landing happened just now; the due hour ended long before: freshness asks Dagster about the window.
    for each in (topic, other):
        asked = landed_in_freshness_window(instance, each, now)
        assert landed_in_freshness_window(instance, each, now, recent) == asked
    # When the due hour (H+1 here) ended after `since`, the landings tell it without a query, as the query would.
    due_next = H.next().end + timedelta(minutes=70)
    asked = landed_in_freshness_window(instance, topic, due_next)
    from platform_assets import checks
    monkeypatch.setattr(checks, "_materialized", lambda *args: pytest.fail("asked Dagster about a topic"))
    told = landed_in_freshness_window(instance, topic, due_next, recent_landings(instance, {raw_key(topic)}, H.start))
    assert told == asked and told[1] == H.next()


def test_the_open_hour_of_a_topic_landed_in_increments_is_requested_every_n_minutes(broker, topic, instance, clock, caplog):
    """`open_hour: {every_minutes: 5}`: while H is open, the sensor asks for it every 5 minutes (the landing lands
    what it holds so far), saying when the next is due; each request is a run of its own."""
    topic = topic.model_copy(update={"open_hour_minutes": 5})
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    cursor = json.dumps({topic.topic: H.partition_key})

    clock(H.start + timedelta(minutes=7))
    first = tick(sensor, instance, cursor, kafka=kafka)
    [request] = first.run_requests
    assert (request.job_name, request.partition_key) == ("landing", H.partition_key)
    assert json.loads(first.cursor)[topic.topic] == H.partition_key, "the open hour is not passed over"

    clock(H.start + timedelta(minutes=9))
    context = build_sensor_context(instance=instance, cursor=first.cursor,
                                   resources={"kafka": kafka, "alerts": AlertWebhookResource()})
    context.log.addHandler(caplog.handler)
    with caplog.at_level("INFO"):
        waiting = sensor(context)
    assert not waiting.run_requests
    assert any(f"next increment of {H} due at {H.start + timedelta(minutes=12):%H:%M}Z (every 5 min)" in r.getMessage()
               for r in caplog.records)

    from dagster import DagsterRunStatus

    _run_of_request(instance, request, DagsterRunStatus.SUCCESS)
    clock(H.start + timedelta(minutes=12, seconds=30))
    [again] = tick(sensor, instance, waiting.cursor, kafka=kafka).run_requests
    assert again.partition_key == H.partition_key and again.run_key != request.run_key


def test_an_increment_is_not_asked_while_the_topics_last_one_is_still_queued_or_running(broker, topic, instance, clock,
                                                                                       caplog):
    """At most one increment of a topic in flight: while the last one's run is queued or running, the next is not asked
    for (it lands all the hour holds by then once asked), and the tick says why; the hour's close is asked regardless."""
    from dagster import DagsterRunStatus

    topic = topic.model_copy(update={"open_hour_minutes": 5})
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    clock(H.start + timedelta(minutes=7))
    first = tick(sensor, instance, json.dumps({topic.topic: H.partition_key}), kafka=kafka)
    [request] = first.run_requests
    run = _run_of_request(instance, request, DagsterRunStatus.STARTED)

    clock(H.start + timedelta(minutes=20))
    context = build_sensor_context(instance=instance, cursor=first.cursor,
                                   resources={"kafka": kafka, "alerts": AlertWebhookResource()})
    context.log.addHandler(caplog.handler)
    with caplog.at_level("INFO"):
        held = sensor(context)
    assert held.run_requests == []
    assert any(f"increment of {H} waits for the one asked before, still queued or running" in r.getMessage()
               for r in caplog.records)

    clock(H.end + timedelta(minutes=12))
    [close] = tick(sensor, instance, held.cursor, kafka=kafka).run_requests
    assert partition_keys(close)[0] == H.partition_key, "the close is asked while the increment still runs"

    instance.handle_run_event(run.run_id, _run_success_event(run))
    clock(H.start + timedelta(minutes=21))
    [next_increment] = tick(sensor, instance, held.cursor, kafka=kafka).run_requests
    assert next_increment.partition_key == H.partition_key


def _run_success_event(run):
    from dagster import DagsterEvent, DagsterEventType

    return DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name)


def test_a_closed_hour_and_the_open_one_after_it_land_in_one_run(broker, topic, instance, clock):
    topic = topic.model_copy(update={"open_hour_minutes": 5})
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    clock(H.end + timedelta(minutes=12))  # H closed by the clock, H+1 open

    [request] = tick(sensor, instance, json.dumps({topic.topic: H.partition_key}),
                     kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers)).run_requests

    assert partition_keys(request) == [H.partition_key, H.next().partition_key]


def _run_of_request(instance, request, status):
    """The run the daemon creates for `request` (its run key tag), left in `status`."""
    from dagster._core.storage.tags import RUN_KEY_TAG
    from dagster._core.test_utils import create_run_for_test

    return create_run_for_test(instance, job_name=request.job_name, status=status,
                               tags={**request.tags, RUN_KEY_TAG: request.run_key})


def _landed_in(instance, run, topic, hour) -> None:
    from dagster import DagsterEvent, DagsterEventType
    from dagster._core.events import StepMaterializationData

    instance.report_dagster_event(DagsterEvent(
        DagsterEventType.ASSET_MATERIALIZATION.value, job_name=run.job_name,
        event_specific_data=StepMaterializationData(AssetMaterialization(raw_key(topic), partition=hour.partition_key)),
    ), run_id=run.run_id)


def test_an_hour_whose_run_failed_before_it_started_is_asked_again_with_backoff_and_alerted(
        broker, topic, instance, clock, webhook):
    """Given H requested, and its run failed while queued (run monitoring's start timeout); when the sensor ticks on,
    then H is asked again at once, then with back-off, each under a run key of its own, and the alert says so; once that
    run succeeds nothing more is asked."""
    from dagster import DagsterRunStatus
    from dagster._core.storage.tags import RUN_FAILURE_REASON_TAG

    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    sensor = sensors.landing_sensor(TopicCatalog((topic,)))
    at = H.end + timedelta(minutes=12)
    clock(at)
    first = tick(sensor, instance, json.dumps({topic.topic: H.partition_key}), kafka=kafka, alerts=alerts_resource())
    [request] = first.run_requests
    run = _run_of_request(instance, request, DagsterRunStatus.NOT_STARTED)
    instance.add_run_tags(run.run_id, {RUN_FAILURE_REASON_TAG: "START_TIMEOUT"})
    instance.report_run_failed(instance.get_run_by_id(run.run_id), "not started within 900 s")

    clock(at + timedelta(minutes=1))
    again = tick(sensor, instance, first.cursor, kafka=kafka, alerts=alerts_resource())
    [alert] = webhook
    assert alert["text"].startswith("[ASKED AGAIN] land_closed_hours asks again for 1 table-hour(s)")
    assert f"{topic.name} for {H.partition_key}: run {run.run_id[:8]} failed (START_TIMEOUT): not started within 900 s; attempt 2" in alert["text"]
    [asked_again] = again.run_requests
    assert asked_again.run_key == f"{request.run_key}:again2"
    assert (asked_again.job_name, asked_again.tags["dagster/partition"]) == ("landing", H.partition_key)
    assert set(asked_again.asset_selection) == set(request.asset_selection)

    failed_again = _run_of_request(instance, asked_again, DagsterRunStatus.NOT_STARTED)
    instance.report_run_failed(failed_again, "not started within 900 s")
    clock(at + timedelta(minutes=2))
    waiting = tick(sensor, instance, again.cursor, kafka=kafka, alerts=alerts_resource())
    assert waiting.run_requests == [] and "attempt 3 requested from" in webhook[1]["text"], "then with back-off"
    clock(at + timedelta(minutes=3))
    third_tick = tick(sensor, instance, waiting.cursor, kafka=kafka, alerts=alerts_resource())
    [third] = third_tick.run_requests
    assert third.run_key == f"{request.run_key}:again3"

    _run_of_request(instance, third, DagsterRunStatus.SUCCESS)
    clock(at + timedelta(minutes=4))
    done = tick(sensor, instance, third_tick.cursor, kafka=kafka, alerts=alerts_resource())
    assert done.run_requests == [] and json.loads(done.cursor)["(asked)"] == []
    assert len(webhook) == 2


def test_a_cancelled_run_is_asked_again_for_the_tables_it_did_not_land_only(broker, topic, instance, clock, webhook):
    """Given one run landing H for two tables of one topic, cancelled after it landed one: the other alone is asked
    again. A table whose step failed for a lasting cause is not: the failed-run alert named it for a person."""
    from dagster import DagsterRunStatus

    copy = topic.model_copy(update=dict(database="copies", table="orders", time_source="kafka_time", time_field=None))
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    sensor = sensors.landing_sensor(TopicCatalog((topic, copy)))
    at = H.end + timedelta(minutes=12)
    clock(at)
    cursor = json.dumps({f"{topic.topic} {topic.name}": H.partition_key, f"{copy.topic} {copy.name}": H.partition_key})
    first = tick(sensor, instance, cursor, kafka=kafka)
    [request] = first.run_requests
    run = _run_of_request(instance, request, DagsterRunStatus.STARTED)
    _landed_in(instance, run, copy, H)
    instance.report_run_canceled(instance.get_run_by_id(run.run_id), "cancelled from the UI")

    clock(at + timedelta(minutes=5))
    [asked_again] = tick(sensor, instance, first.cursor, kafka=kafka, alerts=alerts_resource()).run_requests
    assert set(asked_again.asset_selection) == {raw_key(topic), asset_key("dead_letters", topic)}
    assert "cancelled" in webhook[0]["text"]


def test_a_follow_up_whose_run_never_appeared_is_asked_again(topic, instance, tmp_path, webhook, monkeypatch):
    """Given a compaction requested by the follow-up sensor whose run was never created (the daemon's submission lost);
    when the sensor ticks after `LOST_AFTER`, then the compaction is asked again."""
    from kafka_lake import asks

    storage = LakeStorage(str(tmp_path / "lake"))
    lake = LakeStorageResource(root=str(tmp_path / "lake"))
    sensor = sensors.follow_up_sensor(TopicCatalog((topic,)))
    start = tick(sensor, instance, lake=lake)
    land(instance, storage, topic, H)
    land(instance, storage, topic, H.next())
    asked = tick(sensor, instance, start.cursor, lake=lake)
    [compaction] = asked.run_requests
    assert compaction.job_name == "compaction"

    real_now = datetime.now(timezone.utc)
    monkeypatch.setattr(sensors, "_now", lambda: real_now + asks.LOST_AFTER + timedelta(minutes=1))
    [again] = tick(sensor, instance, asked.cursor, lake=lake, alerts=alerts_resource()).run_requests
    assert "no run was created within 15 min" in webhook[0]["text"]
    assert (again.job_name, again.run_key) == ("compaction", f"{compaction.run_key}:again2")
    assert set(again.asset_selection) == set(compaction.asset_selection)
