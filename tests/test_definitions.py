"""The code location: every asset spec snapshotted, topics added by folder, and the CLI of SPEC working."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from dagster import AssetKey

from kafka_lake.catalog import load_catalog
from kafka_lake.settings import PlatformSettings
from kafka_lake.storage import LakeStorage
from kafka_lake.manifests import ManifestStore
from platform_assets.definitions import build_definitions
from tests.conftest import PII_TEST_KEY, REPO
from tests.landing_fixtures import HOURS, PARTITIONS, build_traffic, produce, unique_topic_name, write_test_topic

SNAPSHOT = REPO / "tests" / "snapshots" / "asset_specs.json"


def describe_definitions(catalog_dir) -> dict:
    definitions = build_definitions(load_catalog(catalog_dir), PlatformSettings())
    graph = definitions.resolve_asset_graph()
    described = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        partitions = node.partitions_def
        described[key.to_user_string()] = {
            "group": node.group_name,
            "deps": sorted(dep.to_user_string() for dep in node.parent_keys),
            "partitions": f"{type(partitions).__name__} from {partitions.start.isoformat()} {partitions.timezone}"
            if partitions else None,
            "checks": sorted(check.name for check in node.check_keys),
            "kinds": sorted(node.kinds),
            "pools": sorted(node.pools or []),
            "backfill": str(node.backfill_policy) if node.backfill_policy else None,
            "freshness": repr(node.freshness_policy) if node.freshness_policy else None,
        }
    described["sensors"] = sorted(s.name for s in definitions.sensors)
    described["schedules"] = sorted(f"{s.name} {s.cron_schedule}" for s in definitions.schedules)
    return described


def test_the_asset_specs_match_the_reviewed_snapshot():
    described = describe_definitions(REPO / "schema_catalog")
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(described, indent=2, sort_keys=True) + "\n")
    assert described == json.loads(SNAPSHOT.read_text()), (
        "asset keys, partitions or checks changed: review, then rerun with UPDATE_SNAPSHOTS=1"
    )


def test_adding_a_topic_is_adding_a_folder(catalog_copy):
    shutil.copytree(catalog_copy / "shop" / "page_views", catalog_copy / "shop" / "checkouts")
    topic_file = catalog_copy / "shop" / "checkouts" / "topic.yaml"
    text = topic_file.read_text().replace("topic: shop.page_views", "topic: shop.checkouts")
    topic_file.write_text(text.replace("registry_id: 100", "registry_id: 500"))

    keys = build_definitions(load_catalog(catalog_copy), PlatformSettings()).resolve_asset_graph().get_all_asset_keys()

    assert AssetKey(["raw", "shop", "checkouts"]) in keys
    assert AssetKey(["dead_letters", "shop", "checkouts"]) in keys


def test_the_dagster_cli_materializes_one_topic_hour(broker, tmp_path):
    kafka_topic = unique_topic_name()
    topic = write_test_topic(tmp_path / "catalog", kafka_topic)
    broker.create_topic(kafka_topic, PARTITIONS)
    traffic = build_traffic(topic, per_partition_per_hour=4)
    produce(broker.bootstrap_servers, traffic)
    lake = tmp_path / "lake"
    (tmp_path / "home").mkdir()
    env = {
        **os.environ,
        "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"),
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "LAKE_ROOT": str(lake),
        "PII_HMAC_KEY": PII_TEST_KEY,
        "SPARK_MASTER": "local[1]",
        "DAGSTER_HOME": str(tmp_path / "home"),
    }
    partition = HOURS[1].strftime("%Y-%m-%d-%H:00")

    completed = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize", "--select", "raw/e2e/orders",
         "--partition", partition, "-m", "platform_assets.definitions"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    [manifest] = ManifestStore(LakeStorage(str(lake)), "e2e", "orders").all()
    assert manifest.hour == partition
    assert manifest.totals()["rows"] == len(traffic.in_hours([HOURS[1]]).rows())
