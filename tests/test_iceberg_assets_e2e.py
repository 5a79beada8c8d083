"""Iceberg tables through the Dagster assets, end to end: a topic of `TABLE_FORMAT=iceberg` landed by `raw/…` on the
real Tansu broker and Spark, compacted by `compacted/…`, registered by `catalog/…` (which commits an hour whose
landing died before its commit), erased and expired by `retention/…`, on a local lake (embedded SQLite catalog) and
on the SeaweedFS S3 server (a SQL catalog named by `ICEBERG_CATALOG_URI`). pyiceberg and DuckDB read back exactly the
landed rows after each step, and time travel reads the rows an erasure removed.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from dagster import AssetKey, DagsterInstance, materialize
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from kafka_lake.hours import KafkaHour, floor_hour
from kafka_lake.lake.audit import read_audit
from kafka_lake.lake.layout import ERASURE_REQUESTS_PREFIX
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
from kafka_lake.tables.table_format import TableAccess
from platform_assets.assets import raw_landing_asset
from platform_assets.catalog_assets import catalog_asset
from platform_assets.compaction_assets import compacted_asset
from platform_assets.definitions import platform_resources
from platform_assets.retention_assets import retention_asset
from tests.constants import PII_TEST_KEY
from tests.landing_fixtures import (
    HOURS,
    RAW_HOURS,
    in_this_process,
    land,
    landing_settings,
    pseudonym,
    topic_with_traffic,
)
from tests.test_iceberg_tables import (
    _keys,
    _StopsBeforeTheTableCommit,
    duckdb_rows,
    pyiceberg_rows,
    topic_deleted_after,
)


def run(assets, settings, partition_key=None, hours=None):
    """One run, every check of it passing."""
    tags = {ASSET_PARTITION_RANGE_START_TAG: KafkaHour(hours[0]).partition_key,
            ASSET_PARTITION_RANGE_END_TAG: KafkaHour(hours[-1]).partition_key} if hours else None
    result = materialize(assets, partition_key=partition_key, tags=tags, resources=platform_resources(settings),
                         instance=DagsterInstance.ephemeral())
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [c.description for c in checks]
    return result, {c.check_name for c in checks}


def metadata_of(result, key: AssetKey) -> list[dict]:
    return [{name: value.value for name, value in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events() if e.asset_key == key]


@pytest.fixture
def iceberg_topic(broker, spark, tmp_path, lake_root, monkeypatch):
    """Given an Iceberg topic's traffic on the broker (allowed lateness 2 h, kept ten years: the real clock must not
    expire it), and the deployment's Iceberg catalog: embedded beside a local lake, `ICEBERG_CATALOG_URI` on S3."""
    if LakeStorage(lake_root).is_s3:
        monkeypatch.setenv("ICEBERG_CATALOG_URI", f"sqlite:///{tmp_path}/iceberg_catalog.db")
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog", table_format="iceberg", max_rows_per_task=7,
                                        allowed_lateness_hours=2, retention_days=3650, dead_letter_retention_days=3650)
    settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=lake_root,
                                table_format="iceberg")
    with topic_deleted_after(broker, SimpleNamespace(topic=topic)):
        yield topic, traffic, settings


def test_landing_compaction_registration_and_retention_through_dagster_keep_the_iceberg_table_exact(iceberg_topic):
    topic, traffic, settings = iceberg_topic
    storage = LakeStorage(settings.lake_root)
    table_key = lambda layer: AssetKey([layer, topic.database, topic.table])
    produced = sorted((p.partition, p.offset) for p in traffic.rows())

    # raw/…: every hour but the last through Dagster, each its own snapshot, shown in its materialization.
    landed, checks = run([raw_landing_asset(topic)], settings, hours=RAW_HOURS[:-1])
    assert "table_matches_landing" in checks
    config = IcebergCatalogConfig.from_settings(dataclasses.replace(PlatformSettings.from_env(), lake_root=settings.lake_root))
    table = open_catalog(config).load_table((topic.database, topic.table))
    shown = [m["iceberg_snapshot_id"] for m in metadata_of(landed, table_key("raw"))]
    assert len(shown) == len(RAW_HOURS) - 1 and shown == [s.snapshot_id for s in table.snapshots()]

    # The last hour landed by a run that died after its manifest, before its commit: not in the table yet.
    stops = _StopsBeforeTheTableCommit(TableAccess(storage, config))
    land(topic, RAW_HOURS[-1:], landing_settings(settings.lake_root, settings.kafka_bootstrap_servers), in_this_process,
         table_formats=lambda table: stops)
    assert _keys(pyiceberg_rows(table.refresh())) != produced

    # compacted/…: the first placement hour rewritten in one replace snapshot.
    compacted, _ = run([compacted_asset(topic)], settings, partition_key=KafkaHour(HOURS[0]).partition_key)
    [compaction] = metadata_of(compacted, table_key("compacted"))
    table = table.refresh()
    assert compaction["iceberg_snapshot_ids"] and table.current_snapshot().summary.operation.value == "replace"

    # catalog/…: every placement hour checked; the hour whose commit is missing committed from its manifest.
    placements = sorted({floor_hour(hour) for hour in RAW_HOURS} | {floor_hour(HOURS[0])})
    registered, checks = run([catalog_asset(topic)], settings, hours=[placements[0], placements[-1]])
    assert checks == {"table_matches_landing"}
    registration = metadata_of(registered, table_key("catalog"))[-1]
    assert registration["kafka_hours_committed"] == [KafkaHour(RAW_HOURS[-1]).partition_key]
    table = table.refresh()
    assert _keys(pyiceberg_rows(table)) == _keys(duckdb_rows(table)) == produced
    before_erasure = table.current_snapshot().snapshot_id

    # retention/…: a subject's rows erased in one snapshot, audited; time travel still reads them.
    subject = next(p.record["user_id"] for p in traffic.rows() if p.record["user_id"])
    storage.write_bytes(f"{ERASURE_REQUESTS_PREFIX}/dsr-1.json", json.dumps({"subject_ids": [subject]}).encode())
    hidden = pseudonym(subject, PII_TEST_KEY)
    erased = {(p.partition, p.offset) for p in traffic.rows() if p.record["user_id"] == subject}
    assert erased
    retained, _ = run([retention_asset(topic)], settings)
    [retention] = metadata_of(retained, table_key("retention"))
    assert retention["erased_rows"] == len(erased)
    table = table.refresh()
    for rows in (pyiceberg_rows(table), duckdb_rows(table)):
        assert _keys(rows) == sorted(set(produced) - erased) and hidden not in rows.column("user_id").to_pylist()
    assert _keys(duckdb_rows(table, snapshot_id=before_erasure)) == produced
    assert [e.action for e in read_audit(storage, topic)] == ["erase"]

    # retention/… once the topic keeps a day: every placement hour (of 2026-11-01) expired, audited.
    run([retention_asset(topic.model_copy(update=dict(retention_days=1)))], settings)
    table = table.refresh()
    assert pyiceberg_rows(table).num_rows == 0 == duckdb_rows(table).num_rows
    assert [e.action for e in read_audit(storage, topic)] == ["erase", "expire"]
    assert _keys(duckdb_rows(table, snapshot_id=before_erasure)) == produced  # until the snapshot expires


def test_a_topic_landed_in_the_hive_layout_becomes_an_iceberg_table_by_registering_its_landed_hours(broker, tmp_path):
    """The README's migration: the topic switched to `table_format: iceberg`, `catalog/…` commits every hour the Hive
    layout landed (not compacted) from its manifest, and readers get exactly the landed rows. Slices run in this
    process."""
    from kafka_lake.tables.iceberg.tables import IcebergTables
    from tests.test_log_boundaries import land_in_process

    lake_root = str(tmp_path / "lake")
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog", allowed_lateness_hours=2)
    with topic_deleted_after(broker, SimpleNamespace(topic=topic)):
        assert topic.table_format == "hive"
        land_in_process(topic, landing_settings(lake_root, broker.bootstrap_servers), RAW_HOURS, RAW_HOURS[-1] + timedelta(hours=2))

        iceberg = topic.model_copy(update=dict(table_format="iceberg"))
        tables = IcebergTables(TableAccess(LakeStorage(lake_root)))
        done = tables.register(iceberg, sorted({floor_hour(hour) for hour in RAW_HOURS}))

        assert done.check.passed, done.check.description
        assert done.metadata["kafka_hours_committed"] == [KafkaHour(hour).partition_key for hour in RAW_HOURS]
        table = tables.table(iceberg)
        assert _keys(pyiceberg_rows(table)) == _keys(duckdb_rows(table)) == sorted((p.partition, p.offset) for p in traffic.rows())
