"""A backfill launched the way the UI launches it: the webserver's GraphQL `launchPartitionBackfill`,
then the daemon, the run queue with deploy/dagster.yaml, and Spark runs in their own processes.

Two backfills of the same hours launched together: each lands its hours in one run (one Spark
application), the topic's pool queues the second run until the first has finished, every record is
in the lake exactly once, and each hour has its own materialization with its own metadata.
"""

import os
import time
from pathlib import Path

import pytest
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, RunsFilter

from deploy.instance import write_instance
from dev_services.ports import LOOPBACK, free_port
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from platform_assets.pools import ensure_pools
from tests.constants import PII_TEST_KEY
from tests.dagster_servers import VENV_BIN, graphql, loaded_location, log_tail, serving
from tests.landing_fixtures import RAW_HOURS, rows_as_readers_see_them, topic_with_traffic

LAUNCH = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on UnauthorizedError { message }
  }
}
"""
DONE = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}


@pytest.fixture
def landed_topic(tmp_path, broker):
    """A topic with traffic, in the catalog the code location will load."""
    return topic_with_traffic(broker, tmp_path / "catalog")


@pytest.fixture
def dagster_dev(tmp_path, broker, landed_topic, monkeypatch):
    """`dagster dev` (webserver, daemon, code server) on a fresh instance rendered as a deployment renders it:
    deploy/dagster.yaml, and the topic's pool created at its limit as the landing sensor makes it (automation is off
    here)."""
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("SCHEMA_CATALOG_DIR", str(tmp_path / "catalog"))
    write_instance(home, environ={})
    with DagsterInstance.from_config(str(home)) as instance:
        assert ensure_pools(instance, ["landing/e2e/orders"]) == (["landing/e2e/orders"], 0)
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"),
        "LAKE_ROOT": str(tmp_path / "lake"),
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "PII_HMAC_KEY": PII_TEST_KEY,
        "SPARK_MASTER": "local[2]",
        "PLATFORM_AUTOMATION": "off",  # only the backfill runs: no sensor lands hours of its own
    }
    log = tmp_path / "dagster_dev.log"
    command = [str(VENV_BIN / "dagster"), "dev", "-m", "platform_assets.definitions", "-h", LOOPBACK, "-p", str(port)]
    with serving(command, port, log, env, tmp_path, "dagster dev"):
        loaded_location(port, "platform_assets.definitions", log)
        yield port, home, log


def launch_backfill(port: int, keys: list[AssetKey], partitions: list[str], log: Path) -> str:
    params = {"assetSelection": [{"path": key.path} for key in keys], "partitionNames": partitions}
    launched = graphql(port, LAUNCH, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", f"the backfill was not launched: {launched}\n{log_tail(log)}"
    return launched["backfillId"]


def test_a_backfill_launched_like_the_ui_lands_every_hour_once_in_multi_hour_runs(dagster_dev, landed_topic, tmp_path):
    port, home, log = dagster_dev
    topic, traffic = landed_topic
    keys = [AssetKey(["raw", topic.database, topic.table]), AssetKey(["dead_letters", topic.database, topic.table])]
    hours = [KafkaHour(h).partition_key for h in RAW_HOURS]

    backfills = [launch_backfill(port, keys, hours, log), launch_backfill(port, keys, hours, log)]

    instance = DagsterInstance.from_config(str(home))
    deadline = time.monotonic() + 420
    while not all(instance.get_backfill(b).status.value in DONE for b in backfills):
        assert time.monotonic() < deadline, f"backfills not done: {[instance.get_backfill(b).status for b in backfills]}\n{log_tail(log)}"
        time.sleep(2)
    assert [instance.get_backfill(b).status.value for b in backfills] == ["COMPLETED_SUCCESS"] * 2, log_tail(log)

    records = instance.get_run_records(RunsFilter(tags={"dagster/backfill": backfills}))
    assert len(records) == 2, "each backfill lands its hours in one run"
    for record in records:
        tags = record.dagster_run.tags
        assert (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]) == (hours[0], hours[-1])
    first, second = sorted(records, key=lambda r: r.start_time)
    assert first.end_time <= second.start_time, "the topic's landing pool let two runs land the same hours at once"

    storage = LakeStorage(str(tmp_path / "lake"))
    assert [h.partition_key for h in ManifestStore(storage, topic.database, topic.table).landed_hours()] == hours
    landed = set(rows_as_readers_see_them(storage, topic))
    assert landed == {(p.partition, p.offset) for p in traffic.rows()}, "every record exactly once"
    materialized = instance.get_materialized_partitions(keys[0])
    assert materialized == set(hours)
    # Each hour's own materialization and metadata, as a run of that hour alone would give it.
    manifests = {m.hour: m for m in ManifestStore(storage, topic.database, topic.table).all()}
    for hour in hours:
        [record] = instance.fetch_materializations(AssetRecordsFilter(asset_key=keys[0], asset_partitions=[hour]), limit=1).records
        metadata = record.asset_materialization.metadata
        assert metadata["rows"].value == manifests[hour].counts.rows
        assert metadata["offset_ranges"].value == {str(p.partition): [p.start, p.end] for p in manifests[hour].partitions}
