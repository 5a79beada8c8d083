"""Failures an operator can act on: a lasting cause fails once, before Spark, its cause the first line of
the run's log and of the alert; a worker's exception is named on the driver, not buried under Spark's."""

from __future__ import annotations

from datetime import timezone

from dagster import DagsterEventType, DagsterInstance, materialize
from dagster._core.events import RunFailureReason
from dagster._core.execution.retries import auto_reexecution_should_retry_run

from deploy.instance import write_instance
from kafka_lake.decoding.pii import MissingPiiKey
from kafka_lake.hours import KafkaHour
from kafka_lake.settings import PlatformSettings
from platform_assets.assets import hours_landed_before_failing, raw_landing_asset
from platform_assets.definitions import platform_resources
from platform_assets.failures import cause_line, is_lasting
from platform_assets.sensors import failure_cause
from spark_jobs.tasks import SparkTaskFailed, run_on_spark
from tests.landing_fixtures import HOURS, unique_topic_name, write_test_topic


def test_a_missing_pii_key_fails_the_landing_once_before_spark_with_its_cause_first(tmp_path, monkeypatch):
    """Given a topic with pii_fields and no PII_HMAC_KEY, on the repository's instance settings (run retries on)."""
    monkeypatch.delenv("PII_HMAC_KEY", raising=False)
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    assert topic.pii_fields
    instance = DagsterInstance.from_config(str(write_instance(tmp_path / "home", environ={}).parent))
    settings = PlatformSettings(kafka_bootstrap_servers="127.0.0.1:9", lake_root=str(tmp_path / "lake"))

    result = materialize([raw_landing_asset(topic)], partition_key=KafkaHour(HOURS[0].astimezone(timezone.utc)).partition_key,
                         resources=platform_resources(settings), instance=instance, raise_on_error=False)

    assert not result.success
    events = result.all_events
    assert not [e for e in events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY], "a missing secret is not retried"
    [failure] = [e for e in events if e.is_step_failure]
    cause = failure_cause(failure.step_failure_data)
    assert cause.startswith(f"MissingPiiKey: topic {topic.topic} declares pii_fields but PII_HMAC_KEY is not set")
    errors = [record.user_message for record in instance.all_logs(result.run_id) if record.level >= 40 and record.user_message]
    assert errors[0] == cause, "the cause heads the run's log"
    run = instance.get_run_by_id(result.run_id)
    assert not auto_reexecution_should_retry_run(instance, run, RunFailureReason.STEP_FAILURE), "nor is the run"
    assert not (tmp_path / "lake").exists(), "nothing started: no Spark task, no file"


def test_an_exception_raised_in_a_spark_task_is_named_on_the_driver(spark):
    def lands_without_key(_):
        raise MissingPiiKey("shop.page_views")

    try:
        run_on_spark(spark, [1], lands_without_key, "land shop.page_views 2026-11-20-10:00")
    except SparkTaskFailed as error:
        failed = error
    assert failed.error_type == "kafka_lake.decoding.pii.MissingPiiKey"
    assert cause_line(failed).startswith("MissingPiiKey: topic shop.page_views declares pii_fields but PII_HMAC_KEY is not set")
    assert "land shop.page_views 2026-11-20-10:00" in str(failed), "names the job it ran in"
    assert is_lasting(failed), "a lasting cause raised in a worker is not retried either"
    assert not is_lasting(SparkTaskFailed("land", "kafka_lake.kafka.log.KafkaUnavailable", "broker gone")), "this one heals"


def test_a_failed_range_names_the_hours_it_did_not_land_and_never_an_hour_that_committed():
    """Given the hours of a failed range and those it committed (in order): the sentence after the alert's cause."""
    hours = ["2026-11-25-22:00", "2026-11-25-23:00", "2026-11-26-00:00"]

    mid_way = hours_landed_before_failing(hours, hours[:1], standing=hours[1:2])
    none = hours_landed_before_failing(hours, [])
    all_committed = hours_landed_before_failing(hours[1:], hours[1:])  # it failed recording the last hour's checks

    assert mid_way == (f"Hour {hours[1]} did not land, nor {hours[2]} after it; this run landed {hours[0]} before it. "
                       f"The earlier landing of {hours[1]} stands.")
    assert none == f"Hour {hours[0]} did not land, nor {hours[1]}, {hours[2]} after it; this run landed none of its hours."
    assert all_committed == f"Every hour of the run committed before it failed: {hours[1]}, {hours[2]}."
    assert "did not land" not in all_committed
    assert hours_landed_before_failing(hours[:1], hours[:1]) == "", "a run of one hour: its cause says it all"
