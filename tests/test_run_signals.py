"""What a landing run tells the operator, against the real broker and Spark, through Dagster: the alert of a
range that fails on an hour not closed yet names every hour it did not land, the hours landed before and when it can
land; an hour whose earlier landing stands stays landed, with its checks' results, and an hour never landed reads not
judged, never passed; a run launched as the UI launches it says what it lands in its tags.

The hour is held open by the topic's idle timeout (`close_grace_minutes` of years): no record follows the
test traffic's last hour, so only the clock could close it.
"""

from __future__ import annotations

import logging

import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckSeverity,
    AssetRecordsFilter,
    Definitions,
    build_run_status_sensor_context,
    instance_for_test,
)
from dagster._core.event_api import PartitionKeyFilter

from kafka_lake.hours import KafkaHour
from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.loader import TopicCatalog
from platform_assets import sensors
from platform_assets.assets import raw_landing_asset
from platform_assets.checks import freshness_check
from platform_assets.definitions import platform_resources
from platform_assets.keys import raw_key
from tests.landing_fixtures import RAW_HOURS, topic_with_traffic

# The hours of the range: the second and third of the traffic land; the fourth (its closing records) is not closed,
# though it was landed before by a topic of a shorter idle timeout; the fifth holds no record and was never landed.
RANGE = [KafkaHour(hour).partition_key for hour in RAW_HOURS[1:]] + [KafkaHour(RAW_HOURS[-1]).next().partition_key]
HELD_OPEN, NEVER_LANDED = RANGE[-2:]
LANDING_CHECKS = ("slices_contiguous", "counts_balance", "dead_letter_rate", "boundaries_confirmed")
RANGE_TAGS = {sensors.PARTITION_RANGE_START: RANGE[0], sensors.PARTITION_RANGE_END: RANGE[-1]}


@pytest.fixture(scope="module")
def traffic_topic(broker, tmp_path_factory):
    """Given a topic with traffic, an idle timeout of years and a freshness SLA, and a lake for it."""
    tmp = tmp_path_factory.mktemp("run-signals")
    topic, _ = topic_with_traffic(broker, tmp / "catalog")
    settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=str(tmp / "lake"))
    return topic.model_copy(update=dict(close_grace_minutes=10 ** 7, freshness_minutes=60)), settings


def launched_from_the_asset_page(topic, settings, instance, **options):
    """As the UI launches a materialization of the raw asset: the implicit asset job, the asset selected with every
    check of it."""
    definitions = Definitions(assets=[raw_landing_asset(topic)], asset_checks=[freshness_check(topic)],
                              resources=platform_resources(settings))
    return definitions.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=[raw_key(topic)], raise_on_error=False, **options)


@pytest.fixture(scope="module")
def failed_range(traffic_topic, spark):
    """A run of the range over the topic's last hour and the one after it, the last hour landed before (when the clock
    had closed it) and now held open: its re-landing is refused."""
    topic, settings = traffic_topic
    with instance_for_test() as instance:
        closed = launched_from_the_asset_page(topic.model_copy(update=dict(close_grace_minutes=10)), settings, instance,
                                              partition_key=HELD_OPEN)
        assert closed.success
        yield topic, instance, launched_from_the_asset_page(topic, settings, instance, tags=RANGE_TAGS)


@pytest.fixture(scope="module")
def hour_landed(traffic_topic, spark):
    """A run of one closed hour, in an instance of its own."""
    topic, settings = traffic_topic
    with instance_for_test() as instance:
        yield topic, instance, launched_from_the_asset_page(topic, settings, instance, partition_key=RANGE[0])


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
    landed = RANGE[:-2]
    assert f" of raw/e2e/orders {RANGE[0]}...{RANGE[-1]}: " in alert, "the run's hours, not the first alone"
    assert f"HourNotClosed: {topic.topic} hour {HELD_OPEN} is not closed: partition(s) 0, 1, 2 have no record" in alert
    assert "It can land once they do, and at the latest from " in alert, "when the hour can land"
    assert (f"Hour {HELD_OPEN} did not land, nor {NEVER_LANDED} after it; this run landed {', '.join(landed)} before "
            f"it. The earlier landing of {HELD_OPEN} stands.") in alert, alert
    assert "Nothing was landed" not in alert
    assert instance.get_run_by_id(result.run_id).tags["hours"] == f"{RANGE[0]}...{RANGE[-1]}", "the Runs list shows it"


def test_an_hour_whose_earlier_landing_stands_stays_landed_with_its_checks_after_its_relanding_is_refused(failed_range):
    """Dagster shows a partition as failed once the latest run that planned it failed: the hour landed before read
    Failed on the Partitions page, though its data and its manifest stand."""
    topic, instance, result = failed_range
    keys = [AssetCheckKey(raw_key(topic), name) for name in LANDING_CHECKS]

    # What Dagster derives the partitions' failed state from: the latest planned attempt of each, and no landing since.
    failed = instance.event_log_storage.get_latest_asset_partition_materialization_attempts_without_materializations(
        raw_key(topic))
    [restated] = instance.fetch_materializations(AssetRecordsFilter(asset_key=raw_key(topic), asset_partitions=[HELD_OPEN]),
                                                 limit=1).records
    history = {key.name: instance.event_log_storage.get_asset_check_execution_history(
        key, limit=3, partition_filter=PartitionKeyFilter(key=HELD_OPEN)) for key in keys}

    assert set(failed) == {NEVER_LANDED}, f"only the hour never landed reads failed: {failed}"
    assert restated.run_id == result.run_id and "it stands: this run did not land the hour" in (
        restated.asset_materialization.metadata["standing_landing"].value)
    assert restated.asset_materialization.metadata["rows"].value > 0, "the standing landing's own counts"
    for name, (now, before, *_) in history.items():
        assert now.run_id == result.run_id and before.run_id != result.run_id, name
        assert (now.evaluation.passed, now.evaluation.severity) == (before.evaluation.passed, before.evaluation.severity)
        assert now.evaluation.description.startswith("the standing landing's result, restated: "), name
        assert now.evaluation.target_materialization_data.storage_id == restated.storage_id, "current, not outdated"


def test_the_checks_of_an_hour_never_landed_read_not_judged_as_a_warning_never_passed(failed_range):
    """The UI judges a partitioned check by every hour's latest result: the failed hour's planned one read "execution
    failed" and turned every landing check of the asset red, though every landed hour had passed them; a passing result
    read "Passed" for an hour nothing of which was judged."""
    topic, instance, result = failed_range
    keys = [AssetCheckKey(raw_key(topic), name) for name in LANDING_CHECKS]

    infos = instance.event_log_storage.get_asset_check_partition_info(keys, partition_keys=RANGE)
    [never] = instance.event_log_storage.get_asset_check_execution_history(
        keys[0], limit=1, partition_filter=PartitionKeyFilter(key=NEVER_LANDED))

    assert {(info.check_key.name, info.partition_key): info.latest_execution_status.value for info in infos} == {
        (name, hour): "FAILED" if hour == NEVER_LANDED else "SUCCEEDED" for name in LANDING_CHECKS for hour in RANGE}
    assert never.run_id == result.run_id and never.evaluation.severity == AssetCheckSeverity.WARN
    assert never.evaluation.description.startswith(
        f"not evaluated: hour {NEVER_LANDED} did not land, nothing of it to judge until it does (the run stopped at hour "
        f"{HELD_OPEN}: HourNotClosed: "), never.evaluation.description


def test_a_run_launched_from_the_asset_page_is_tagged_with_its_layer_topic_and_asset(hour_landed):
    """The Runs list shows a run's tags; Dagster's implicit asset job gives none, and its target reads
    "partition: … · 5 checks" without the asset's name."""
    topic, instance, result = hour_landed
    assert result.success

    tags = instance.get_run_by_id(result.run_id).tags

    assert {name: tags.get(name) for name in ("layer", "topic", "asset")} == {
        "layer": "raw", "topic": topic.topic, "asset": "raw/e2e/orders"}


def test_a_landing_run_yields_every_check_it_evaluated(hour_landed):
    """Dagster logs a check it expected and did not see yielded; each landing check was evaluated for the hour."""
    _, instance, result = hour_landed

    said = [record.user_message for record in instance.all_logs(result.run_id) if record.user_message]

    assert {e.check_name for e in result.get_asset_check_evaluations()} >= set(LANDING_CHECKS)
    assert not [line for line in said if "did not yield or return expected outputs" in line], said


def test_a_landing_leaves_freshness_evaluated_against_the_hour_it_landed(hour_landed):
    """The UI shows a freshness result as current only against the newest landing; the landing's own freshness step
    never runs (it waits for an output the landing does not yield), and topic_health comes by every 5 minutes."""
    topic, instance, result = hour_landed
    key = AssetCheckKey(raw_key(topic), "freshness")

    shown = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]

    landed = instance.get_asset_records([raw_key(topic)])[0].asset_entry.last_materialization_record
    assert shown.status.value in ("SUCCEEDED", "FAILED"), shown.status
    assert shown.evaluation.target_materialization_data.storage_id == landed.storage_id and landed.run_id == result.run_id
