"""The current-state layer through Dagster: `current/<db>/<table>` of SPEC materialized from the CLI with its check and
per-hour metadata, and the sensor that applies every landed hour of a change topic."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterEventType,
    DagsterInstance,
    EventRecordsFilter,
    build_sensor_context,
    instance_for_test,
)

from kafka_lake.hours import KafkaHour
from kafka_lake.settings import PlatformSettings
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
from kafka_lake.topics.loader import TopicCatalog
from platform_assets import sensors
from platform_assets.keys import raw_key
from resources import AlertWebhookResource, LakeStorageResource
from tests.change_topics import change_topic_with_traffic, write_change_topic
from tests.conftest import PII_TEST_KEY, REPO
from tests.landing_fixtures import HOURS, unique_topic_name
from tests.test_current_state_e2e import pyiceberg_state

CURRENT = AssetKey(["current", "e2e", "customers"])


def test_the_dagster_cli_applies_a_range_of_landed_hours_each_with_its_counts_and_check(broker, tmp_path):
    """Given hours landed by `dagster asset materialize --select raw/… --partition-range`; when `current/…` is
    materialized for the same range (one run applying them in order), then the table is the producer's state after the
    last hour, and each hour's materialization says what it did and its check passed."""
    _, traffic = change_topic_with_traffic(broker, tmp_path / "catalog", unique_topic_name())
    lake, home = tmp_path / "lake", tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"), "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "LAKE_ROOT": str(lake), "PII_HMAC_KEY": PII_TEST_KEY, "SPARK_MASTER": "local[1]", "DAGSTER_HOME": str(home)}
    first, last = (KafkaHour(hour).partition_key for hour in (HOURS[0], HOURS[-1]))

    def materialize(asset: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize", "--select", asset,
             "--partition-range", f"{first}...{last}", "-m", "platform_assets.definitions"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=600)

    landed = materialize("raw/e2e/customers")
    assert landed.returncode == 0, landed.stderr[-3000:]
    completed = materialize("current/e2e/customers")

    assert completed.returncode == 0, completed.stderr[-3000:]
    table = open_catalog(IcebergCatalogConfig.from_settings(PlatformSettings(lake_root=str(lake)))).load_table(
        ("e2e", "customers_current"))
    assert pyiceberg_state(table) == traffic.state_after(HOURS[-1])
    with DagsterInstance.from_config(str(home)) as instance:
        shown = {}
        for hour in HOURS:
            key = KafkaHour(hour).partition_key
            [record] = instance.fetch_materializations(AssetRecordsFilter(asset_key=CURRENT, asset_partitions=[key]),
                                                       limit=1).records
            shown[key] = {name: value.value for name, value in record.asset_materialization.metadata.items()}
        evaluations = [record.event_log_entry.dagster_event.event_specific_data for record in instance.get_event_records(
            EventRecordsFilter(DagsterEventType.ASSET_CHECK_EVALUATION))]
    changed = sum(m["inserts"] + m["updates"] + m["deletes"] for m in shown.values())
    assert changed > 0 and shown[last]["dagster/row_count"] == len(traffic.state_after(HOURS[-1]))
    assert all(m["iceberg_snapshot_id"] for m in shown.values())
    judged = [e for e in evaluations if e.asset_key == CURRENT and e.check_name == "current_state_matches_landing"]
    assert len(judged) == len(HOURS) and all(e.passed for e in judged), judged


def test_each_landing_of_a_change_topic_asks_for_the_hour_to_be_applied(tmp_path):
    topic = write_change_topic(tmp_path / "catalog", unique_topic_name())
    sensor = sensors.current_state_sensor(TopicCatalog((topic,)))
    job = "current_state"
    hours = [KafkaHour(datetime(2026, 11, 20, h, tzinfo=timezone.utc)) for h in (10, 11, 12)]
    with instance_for_test() as instance:
        lake = LakeStorageResource(root=str(tmp_path / "lake"))
        start = sensor(build_sensor_context(instance=instance, resources={"lake": lake, "alerts": AlertWebhookResource()}))
        assert not start.run_requests

        for hour in hours:
            instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=hour.partition_key))
        landed = sensor(build_sensor_context(instance=instance, cursor=start.cursor, resources={"lake": lake, "alerts": AlertWebhookResource()}))
        instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=hours[0].partition_key))
        relanded = sensor(build_sensor_context(instance=instance, cursor=landed.cursor, resources={"lake": lake, "alerts": AlertWebhookResource()}))

    [run] = landed.run_requests
    assert (run.job_name, run.tags[sensors.PARTITION_RANGE_START], run.tags[sensors.PARTITION_RANGE_END]) == (
        job, hours[0].partition_key, hours[-1].partition_key), "consecutive hours: one run applying them in order"
    [again] = relanded.run_requests
    assert (again.job_name, again.partition_key) == (job, hours[0].partition_key), "a landing again: applied again"
