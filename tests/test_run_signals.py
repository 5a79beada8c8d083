"""What a landing run tells the operator, against the real broker and Spark, through Dagster: the alert of a
range that fails on an hour not closed yet names that hour, the hours landed before it and when it can land.

The hour is held open by the topic's idle timeout (`close_grace_minutes` of years): no record follows the
test traffic's last hour, so only the clock could close it.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from dagster import Definitions, build_run_status_sensor_context, instance_for_test

from kafka_lake.catalog import TopicCatalog
from kafka_lake.hours import KafkaHour
from kafka_lake.settings import PlatformSettings
from platform_assets import sensors
from platform_assets.assets import raw_landing_asset
from platform_assets.definitions import platform_resources
from platform_assets.keys import raw_key
from tests.landing_fixtures import RAW_HOURS, topic_with_traffic

# The hours of the range: the second and third of the traffic land, the fourth (its closing records) is not closed.
RANGE = [KafkaHour(hour).partition_key for hour in RAW_HOURS[1:]]
RANGE_TAGS = {sensors.PARTITION_RANGE_START: RANGE[0], sensors.PARTITION_RANGE_END: RANGE[-1]}


@pytest.fixture(scope="module")
def failed_range(broker, spark, tmp_path_factory):
    """Given a topic with traffic and an idle timeout of years, a run of the range that ends on its last hour."""
    tmp = tmp_path_factory.mktemp("run-signals")
    topic, _ = topic_with_traffic(broker, tmp / "catalog")
    topic = replace(topic, close_grace_minutes=10 ** 7)
    settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=str(tmp / "lake"))
    with instance_for_test() as instance:
        # As the UI launches it: the implicit asset job, the raw asset selected with its checks, over a range.
        job = Definitions(assets=[raw_landing_asset(topic)], resources=platform_resources(settings)
                          ).resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(instance=instance, tags=RANGE_TAGS, asset_selection=[raw_key(topic)],
                                        raise_on_error=False)
        yield topic, instance, result


def test_a_range_failing_on_an_hour_not_closed_is_alerted_naming_that_hour_the_hours_landed_before_and_when(
        failed_range, caplog):
    topic, instance, result = failed_range
    assert not result.success
    context = build_run_status_sensor_context(
        sensor_name="alert_on_failed_runs", dagster_instance=instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
    ).for_run_failure()

    with caplog.at_level(logging.WARNING, logger="resources.alerts"):
        sensors.failed_runs_sensor(TopicCatalog((topic,)))(context, alerts=platform_resources(PlatformSettings())["alerts"])

    [alert] = [record.getMessage() for record in caplog.records if record.getMessage().startswith("ALERT")]
    failed, landed = RANGE[-1], RANGE[:-1]
    assert f" of raw/e2e/orders {RANGE[0]}...{RANGE[-1]}: " in alert, "the run's hours, not the first alone"
    assert f"HourNotClosed: {topic.topic} hour {failed} is not closed: partition(s) 0, 1, 2 have no record" in alert
    assert "It can land once they do, and at the latest from " in alert, "when the hour can land"
    assert f"Hour {failed} did not land; this run landed {', '.join(landed)} before it." in alert
    assert "Nothing was landed" not in alert
