"""The downstream assets through Dagster on real Spark and the embedded Hive metastore: compaction
publishes its generation, the catalog matches storage, and retention erases a subject, with
every asset check passing and SQL by table name returning exactly the rows in the lake."""

from __future__ import annotations

import json

import pytest
from dagster import AssetCheckKey, DagsterInstance, instance_for_test, materialize
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG, BACKFILL_ID_TAG

from kafka_lake.hours import KafkaHour
from kafka_lake.lake.audit import read_audit
from kafka_lake.lake.compaction_manifest import read_compaction
from kafka_lake.lake.layout import ERASURE_REQUESTS_PREFIX
from kafka_lake.lake.table_state import storage_partitions
from kafka_lake.settings import PlatformSettings
from platform_assets.catalog_assets import catalog_asset
from platform_assets.compaction_assets import compacted_asset
from platform_assets.definitions import platform_resources
from platform_assets.keys import asset_key
from platform_assets.retention_assets import retention_asset
from tests.constants import PII_TEST_KEY
from tests.landing_fixtures import HOURS, pseudonym, rows_as_readers_see_them


def run(asset, settings, partition_key=None, tags=None):
    result = materialize([asset], partition_key=partition_key, tags=tags, resources=platform_resources(settings),
                         instance=DagsterInstance.ephemeral())
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [c.description for c in checks]
    return result


def sql_rows(spark, topic) -> set[tuple[int, int]]:
    table = f"`{topic.database}`.`{topic.table}`"
    spark.sql(f"REFRESH TABLE {table}")
    return {(r[0], r[1]) for r in spark.sql(f"SELECT _kafka_partition, _kafka_offset FROM {table}").collect()}


@pytest.mark.retention_days(3650)  # the real clock decides expiry here: keep the 2026-11-01 test data
@pytest.mark.parametrize("lake_root", ["local"], indirect=True)  # Spark here cannot read s3:// (no hadoop-aws)
def test_compaction_catalog_and_retention_through_dagster(landed, spark, lake_root, no_test_table_in_hive):
    topic, traffic, _landing, storage = landed
    settings = PlatformSettings(kafka_bootstrap_servers="unused:9092", lake_root=lake_root)
    hours = sorted({p.hour for p in storage_partitions(storage, topic.database, topic.table)})

    run(compacted_asset(topic), settings, KafkaHour(HOURS[0]).partition_key)
    run(catalog_asset(topic), settings, tags={
        ASSET_PARTITION_RANGE_START_TAG: KafkaHour(hours[0]).partition_key,
        ASSET_PARTITION_RANGE_END_TAG: KafkaHour(hours[-1]).partition_key,
    })

    compacted = [p for p in storage_partitions(storage, topic.database, topic.table) if p.hour == HOURS[0]]
    assert compacted and all(read_compaction(storage, topic.database, topic.table, p) for p in compacted)
    expected = rows_as_readers_see_them(storage, topic)
    assert sql_rows(spark, topic) == set(expected)

    subject = next(p.record["user_id"] for p in traffic.rows() if p.record["user_id"])
    storage.write_bytes(f"{ERASURE_REQUESTS_PREFIX}/dsr-1.json", json.dumps({"subject_ids": [subject]}).encode())
    hidden = pseudonym(subject, PII_TEST_KEY)
    erased = {key for key, (_, row) in expected.items() if hidden in row}
    assert erased

    result = run(retention_asset(topic), settings)

    assert sql_rows(spark, topic) == set(expected) - erased
    [materialization] = result.asset_materializations_for_node(f"retention__{topic.database}__{topic.table}")
    assert materialization.metadata["erased_rows"].value == len(erased)
    assert [e.action for e in read_audit(storage, topic)] == ["erase"]


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_a_compaction_backfill_over_an_hour_not_due_compacts_the_others_and_skips_it_naming_why(landed, spark, lake_root):
    """Given raw hours 10:00 to 13:00 landed and an allowed lateness of 2 h, a backfill of 10:00 to 12:00: 12:00 waits
    for 14:00. The due hours compact, 12:00 is skipped with its reason, and the run and the checks stay green."""
    topic, _, _, storage = landed
    settings = PlatformSettings(kafka_bootstrap_servers="unused:9092", lake_root=lake_root)
    keys = [KafkaHour(hour).partition_key for hour in HOURS]
    with instance_for_test() as instance:
        result = materialize([compacted_asset(topic)], resources=platform_resources(settings), instance=instance,
                             raise_on_error=False, tags={ASSET_PARTITION_RANGE_START_TAG: keys[0],
                                                         ASSET_PARTITION_RANGE_END_TAG: keys[-1]})

        assert result.success, "an hour not due is no failure"
        assert [e.partition for e in result.get_asset_materialization_events()] == keys[:2]
        assert not [e for e in result.all_events if e.event_type_value == "ASSET_FAILED_TO_MATERIALIZE"]
        [skipped] = [e.event_specific_data.asset_observation for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
        assert skipped.partition == keys[-1]
        assert "raw hours 2026-11-01-14:00 can still add rows" in skipped.metadata["not_due"].value
        check = AssetCheckKey(asset_key("compacted", topic), "row_set_unchanged")
        statuses = {info.partition_key: info.latest_execution_status.value
                    for info in instance.event_log_storage.get_asset_check_partition_info([check])}
        # The hour skipped keeps the check planned by a run that succeeded: the UI shows it skipped, not failed.
        assert statuses == {keys[0]: "SUCCEEDED", keys[1]: "SUCCEEDED", keys[2]: "PLANNED"}, statuses
        said = [record.user_message for record in instance.all_logs(result.run_id) if record.user_message]
        assert not [line for line in said if "did not yield or return expected outputs" in line]

        # When the same hours are a backfill's (launched from the UI): Dagster counts each hour the backfill's runs did
        # not materialize as failed, so the hour skipped is recorded as a materialization saying it was not compacted.
        backfill = materialize([compacted_asset(topic)], resources=platform_resources(settings), instance=instance,
                               tags={ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1],
                                     BACKFILL_ID_TAG: "compaction-backfill"})
        [*_, recorded] = backfill.get_asset_materialization_events()
        assert [e.partition for e in backfill.get_asset_materialization_events()] == keys
        assert recorded.materialization.metadata["compacted"].value.startswith("no: not due yet")
        assert "raw hours 2026-11-01-14:00 can still add rows" in recorded.materialization.metadata["not_due"].value
        skipped_partitions = [p for p in storage_partitions(storage, topic.database, topic.table) if p.hour == HOURS[-1]]
        assert skipped_partitions and not [p for p in skipped_partitions
                                           if read_compaction(storage, topic.database, topic.table, p)], "not compacted"
