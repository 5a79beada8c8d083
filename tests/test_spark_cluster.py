"""Landing on a real Spark standalone cluster (a master and two workers on loopback) gives the same
rows as local mode."""

from __future__ import annotations

import os
import subprocess
import sys

from dev_services.spark_cluster import StandaloneSparkCluster
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from tests.constants import PII_TEST_KEY, REPO
from tests.landing_fixtures import (
    HOURS,
    PARTITIONS,
    build_traffic,
    lake_snapshot,
    land_on_spark,
    produce,
    unique_topic_name,
    write_test_topic,
)


def test_a_standalone_cluster_lands_the_same_rows_as_local_mode(broker, spark, tmp_path):
    kafka_topic = unique_topic_name()
    topic = write_test_topic(tmp_path / "catalog", kafka_topic, max_rows_per_task=9)
    broker.create_topic(kafka_topic, PARTITIONS)
    produce(broker.bootstrap_servers, build_traffic(topic))
    hour = HOURS[1]
    from kafka_lake.kafka.log import consumer_config
    from kafka_lake.landing.landing_settings import LandingSettings

    local_lake = str(tmp_path / "local-lake")
    land_on_spark(topic, LandingSettings(local_lake, consumer_config(broker.bootstrap_servers),
                                         pii_key=PII_TEST_KEY.encode()), spark, [hour])
    cluster_lake = str(tmp_path / "cluster-lake")

    with StandaloneSparkCluster(workers=2, state_dir=tmp_path / "cluster") as cluster:
        completed = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize",
             "--select", "raw/e2e/orders", "--partition", hour.strftime("%Y-%m-%d-%H:00"),
             "-m", "platform_assets.definitions"],
            env={**os.environ, "SPARK_MASTER": cluster.master_url, "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"),
                 "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers, "LAKE_ROOT": cluster_lake,
                 "PII_HMAC_KEY": PII_TEST_KEY, "DAGSTER_HOME": str(tmp_path)},
            cwd=REPO, capture_output=True, text=True, timeout=400,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        executor_logs = list((tmp_path / "cluster").glob("worker-*/app-*/*/stderr"))

    assert len({path.parent.parent.parent.name for path in executor_logs}) == 2, "both workers ran executors"
    [manifest] = ManifestStore(LakeStorage(cluster_lake), topic.database, topic.table).all()
    assert manifest.counts.rows > 0
    assert lake_snapshot(LakeStorage(cluster_lake), topic) == lake_snapshot(LakeStorage(local_lake), topic)
