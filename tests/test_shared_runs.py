"""Runs that carry many topics, against the real broker and Spark and a Dagster instance on disk: one run of the
`landing` job lands each topic's hour in a step of its own, a topic that fails costs its own hours only, the alert
names it, and a re-execution from failure (what the UI's button and the daemon's run retries do) runs it alone.

The runs execute in this process, as the run worker executes them (the code location's in-process executor).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from dagster import DagsterEventType, DagsterInstance, ReexecutionOptions, execute_job, reconstructable
from dagster._core.events import RunFailureReason
from dagster._core.execution.retries import auto_reexecution_should_retry_run

from deploy.instance import write_instance
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.loader import TopicCatalog
from platform_assets.checks import raw_check_keys
from platform_assets.definitions import build_definitions
from platform_assets.keys import raw_key
from platform_assets.sensors import failed_run_alert, landing_requests
from tests.constants import PII_TEST_KEY
from tests.landing_fixtures import (
    HOURS,
    PARTITIONS,
    build_traffic,
    produce,
    rows_as_readers_see_them,
    unique_topic_name,
    write_test_topic,
)

H = KafkaHour(HOURS[0])
NAMES = ("first", "second", "third")
# The test's catalog and settings, for the job the run worker reconstructs (`landing_job` below).
_TOPICS: dict[str, object] = {}


def landing_job():
    """The code location's `landing` job over the test's topics, as the run worker loads it."""
    settings = _TOPICS["settings"]
    return build_definitions(TopicCatalog(tuple(_TOPICS["topics"])), settings).resolve_job_def("landing")


@pytest.fixture
def shared_topics(tmp_path, broker, spark, monkeypatch):
    """Three topics of one catalog; the first two with traffic on the broker, the third's Kafka topic not created."""
    monkeypatch.setenv("PII_HMAC_KEY", PII_TEST_KEY)
    topics, traffic = [], {}
    for name in NAMES:
        kafka_topic = unique_topic_name()
        spec = write_test_topic(tmp_path / "catalogs" / name, kafka_topic).model_copy(update={"database": name})
        topics.append(spec)
        if name != "third":
            broker.create_topic(kafka_topic, PARTITIONS)
            traffic[name] = build_traffic(spec)
            produce(broker.bootstrap_servers, traffic[name])
    settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=str(tmp_path / "lake"),
                                spark_master="local[2]", automation=False)
    _TOPICS.update(topics=topics, settings=settings)
    # The repository's instance settings (run retries on), on SQLite under a temporary home.
    with DagsterInstance.from_config(str(write_instance(tmp_path / "home", environ={}).parent)) as instance:
        yield topics, traffic, settings, instance
    _TOPICS.clear()


def test_a_topic_failing_in_a_shared_run_costs_its_own_hour_and_a_reexecution_from_failure_runs_it_alone(
        shared_topics, broker):
    topics, traffic, settings, instance = shared_topics
    first, second, third = topics
    [request] = landing_requests({topic: [H] for topic in topics})
    assert {key for key in request.asset_selection if key.path[0] == "raw"} == {raw_key(t) for t in topics}
    assert {request.tags[f"topic/{t.topic}"] for t in topics} == {"raw"}, "each topic's runs can be found by its tag"

    # When one run carries the three topics' hour H:
    job = reconstructable(landing_job)
    with execute_job(job.get_subset(asset_selection=set(request.asset_selection),
                                    asset_check_selection=set(request.asset_check_keys)),
                     instance, tags=request.tags, raise_on_error=False) as result:
        run_id = result.run_id
        assert not result.success

    # Then the two topics with traffic committed their hour, with materializations and passing checks:
    storage = LakeStorage(settings.lake_root)
    for topic in (first, second):
        assert ManifestStore(storage, topic.database, topic.table).landed_hours() == [H]
        assert set(rows_as_readers_see_them(storage, topic)) == {
            (p.partition, p.offset) for p in traffic[topic.database].in_hours([H.start]).rows()}
        assert instance.get_materialized_partitions(raw_key(topic)) == {H.partition_key}
        executions = instance.event_log_storage.get_latest_asset_check_execution_by_key(raw_check_keys(topic))
        assert {key.name: e.evaluation.passed for key, e in executions.items()} == {
            key.name: True for key in raw_check_keys(topic)}, "every landing check of the hour passed"
    assert ManifestStore(storage, third.database, third.table).landed_hours() == []

    # and the third failed alone, its step's failure naming the topic and the hour, as the alert does:
    failures = instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE)
    assert len(failures) == 1
    step_failure = failures[0].dagster_event.step_failure_data
    alert = failed_run_alert(instance.get_run_by_id(run_id), [step_failure], None)
    assert alert.startswith(f"[FAILED] run {run_id[:8]} of landing of 3 topics {H.partition_key}: 1 failed, the others "
                            "committed:\n- "), alert
    assert f"- {third.topic} {H.partition_key}: KafkaUnavailable: topic {third.topic} is not available" in alert, alert
    assert first.topic not in alert.split("\n", 1)[1] and second.topic not in alert.split("\n", 1)[1]
    assert auto_reexecution_should_retry_run(instance, instance.get_run_by_id(run_id), RunFailureReason.STEP_FAILURE), (
        "a cause a retry can heal: the daemon retries the run")

    # When the topic exists and has traffic, and the run is re-executed from failure:
    broker.create_topic(third.topic, PARTITIONS)
    produce(broker.bootstrap_servers, build_traffic(third))
    # (the daemon's retries and the UI's button carry the run's tags over: its hour, its topics)
    with execute_job(job, instance, raise_on_error=False, tags=request.tags,
                     reexecution_options=ReexecutionOptions.from_failure(run_id, instance)) as retried:
        assert retried.success
        ran = {event.step_key for event in retried.all_events if event.event_type == DagsterEventType.STEP_START}

    # Then only the third topic's step ran, and its hour landed.
    assert ran == {f"land_third__{third.table}"}
    assert ManifestStore(storage, third.database, third.table).landed_hours() == [H]
    assert instance.get_materialized_partitions(raw_key(third)) == {H.partition_key}
    for topic in (first, second):
        assert len(instance.fetch_materializations(raw_key(topic), limit=10).records) == 1, "not landed again"


def test_a_run_whose_every_failure_is_lasting_is_not_retried(shared_topics):
    """Given a run of two topics whose hour is still open (a lasting cause: the sensors ask again when it closes)."""
    topics, _traffic, _settings, instance = shared_topics
    open_hour = KafkaHour.containing(datetime.now(timezone.utc))
    [request] = landing_requests({topic: [open_hour] for topic in topics[:2]})

    job = reconstructable(landing_job)
    with execute_job(job.get_subset(asset_selection=set(request.asset_selection),
                                    asset_check_selection=set(request.asset_check_keys)),
                     instance, tags=request.tags, raise_on_error=False) as result:
        run = instance.get_run_by_id(result.run_id)

    failures = [e.dagster_event.step_failure_data for e in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE)]
    assert [f.user_failure_data.metadata["cause"].value for f in failures] == ["HourNotClosed", "HourNotClosed"]
    assert not auto_reexecution_should_retry_run(instance, run, RunFailureReason.STEP_FAILURE)
