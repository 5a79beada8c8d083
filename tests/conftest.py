"""Shared real components for the tests: a Tansu broker, a SeaweedFS S3 server and one Spark session.

Each is started once per test session on free loopback ports and stopped by process id.
"""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from dev_services.seaweedfs import SeaweedS3
from dev_services.tansu import TansuBroker
from tests.constants import PII_TEST_KEY, REPO


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    with TansuBroker(log_file=tmp_path_factory.mktemp("broker") / "tansu.log") as running:
        yield running


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The S3 server, started before Spark so Spark's Python workers inherit its credentials."""
    with SeaweedS3(data_dir=tmp_path_factory.mktemp("seaweedfs")) as server:
        server.create_bucket("lake")
        saved = {name: os.environ.get(name) for name in server.env()}
        os.environ.update(server.env())
        yield server
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def spark(s3_server, tmp_path_factory):
    from pyspark.sql import SparkSession

    from resources.spark import spark_config, use_this_python_for_workers

    use_this_python_for_workers()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    os.environ["PII_HMAC_KEY"] = PII_TEST_KEY
    builder = SparkSession.builder
    config = spark_config(
        "local[2]",
        {
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={tmp_path_factory.mktemp('derby')}",
        },
    )
    for key, value in config.items():
        builder = builder.config(key, value)
    session = builder.enableHiveSupport().getOrCreate()  # the embedded Derby metastore, under tmp
    yield session
    session.stop()


@pytest.fixture(scope="module")
def glue_endpoint(s3_server):
    """moto's Glue (its server mode: no Glue runs on this machine) on a loopback port, reached the way production
    reaches Glue: boto3 with AWS_ENDPOINT_URL_GLUE; credentials and region from the S3 server's environment. moto keeps
    one backend per process, so its state is reset first: each test module starts with an empty Glue."""
    import urllib.request

    from moto.server import ThreadedMotoServer

    from dev_services.ports import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).close()
    saved = os.environ.get("AWS_ENDPOINT_URL_GLUE")
    os.environ["AWS_ENDPOINT_URL_GLUE"] = endpoint
    try:
        yield endpoint
    finally:
        server.stop()
        if saved is None:
            os.environ.pop("AWS_ENDPOINT_URL_GLUE", None)
        else:
            os.environ["AWS_ENDPOINT_URL_GLUE"] = saved


@pytest.fixture
def no_test_table_in_hive(spark):
    """The embedded metastore lives for the whole session and every test topic is table e2e.orders:
    a test that registers it starts and ends without it (dropping an external table keeps its files)."""
    spark.sql("DROP TABLE IF EXISTS `e2e`.`orders`")
    yield
    spark.sql("DROP TABLE IF EXISTS `e2e`.`orders`")


@pytest.fixture(params=["local", "s3"])
def lake_root(request, tmp_path):
    """A fresh lake per test: a local directory, or a prefix on the S3 server."""
    if request.param == "local":
        return str(tmp_path / "lake")
    request.getfixturevalue("s3_server")
    return f"s3://lake/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def catalog_copy(tmp_path):
    """A writable copy of the sample catalog, for tests that rename topics or add entries."""
    target = tmp_path / "schema_catalog"
    shutil.copytree(REPO / "schema_catalog", target)
    return target


@pytest.fixture(scope="module")
def _landings_of_module():
    """The lakes `landed` landed in this module, by (lake kind, retention days): landed once, copied per test."""
    return {}


@pytest.fixture
def landed(request, broker, spark, tmp_path, lake_root, _landings_of_module, tmp_path_factory):
    """Given four raw hours landed on Spark with late events, tombstones and dead letters
    (allowed lateness 2 h, retention 1 day unless the test is marked `retention_days(n)`, which then holds for
    dead letters too).

    The hours are landed once per module, lake kind and retention, into a lake no test touches, and each test gets
    its own copy of that lake: tests change their lake, never the topic. A test that produces to the topic
    is marked `own_landing` and lands a topic of its own."""
    from kafka_lake.kafka.log import consumer_config
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.landing.landing_settings import LandingSettings

    marker = request.node.get_closest_marker("retention_days")
    retention = (marker.args[0], marker.args[0]) if marker else (1, None)  # (the topic's, its dead letters')
    settings_for = lambda root: LandingSettings(
        lake_root=root, kafka_config=consumer_config(broker.bootstrap_servers), pii_key=PII_TEST_KEY.encode())
    if request.node.get_closest_marker("own_landing"):
        topic, traffic = _land_test_topic(broker, spark, tmp_path / "catalog", settings_for(lake_root), retention)
        return topic, traffic, settings_for(lake_root), LakeStorage(lake_root)
    key = (lake_root.startswith("s3://"), retention)
    if key not in _landings_of_module:
        template = (f"s3://lake/template-{uuid.uuid4().hex[:12]}" if key[0]
                    else str(tmp_path_factory.mktemp("landed-template") / "lake"))
        catalog = tmp_path_factory.mktemp("landed-catalog")
        _landings_of_module[key] = (*_land_test_topic(broker, spark, catalog, settings_for(template), retention),
                                    LakeStorage(template))
    topic, traffic, template = _landings_of_module[key]
    storage = LakeStorage(lake_root)
    for stored in template.list_files(""):
        storage.write_bytes(stored.path, template.read_bytes(stored.path))
    return topic, traffic, settings_for(lake_root), storage


def _land_test_topic(broker, spark, catalog_dir, settings, retention):
    from tests.landing_fixtures import (
        PARTITIONS,
        RAW_HOURS,
        build_traffic,
        land_on_spark,
        produce,
        unique_topic_name,
        write_test_topic,
    )

    kafka_topic = unique_topic_name()
    topic = write_test_topic(catalog_dir, kafka_topic, max_rows_per_task=7, allowed_lateness_hours=2,
                             retention_days=retention[0], dead_letter_retention_days=retention[1])
    broker.create_topic(kafka_topic, PARTITIONS)
    traffic = build_traffic(topic)
    produce(broker.bootstrap_servers, traffic)
    land_on_spark(topic, settings, spark, RAW_HOURS)
    return topic, traffic


# What each shared component's fixture marks a test with, so that `-m` selects by what a test needs.
SERVICE_MARKERS = {"broker": "kafka", "mock_cluster": "kafka", "s3_server": "s3", "own_s3": "s3", "spark": "spark",
                   "glue_endpoint": "glue"}
# Parameters that choose a component the test then starts (a lake on S3, the Hive or Glue catalog).
PARAM_MARKERS = {"s3": "s3", "hive": "spark", "glue": "glue"}


# The modules of minutes each (a demo, Dagster runs in subprocesses, kills and restarts), started first: parallel
# workers (`make test` runs `pytest -n`, a module to a worker) then end together instead of waiting on one of them.
LONG_MODULES = ("test_ui.py", "test_faults_crashes.py", "test_backfill.py", "test_control_plane.py", "test_definitions.py",
                "test_docs_readers.py", "test_faults_services.py", "test_history_costs.py", "test_secrets_and_pii.py",
                "test_deployment.py",
                "test_spark_cluster.py", "test_faults_log_changes.py", "test_current_state_dagster.py",
                "test_faults_open_hours.py", "test_open_hours.py", "test_shared_runs.py", "test_dev_services.py")


def pytest_collection_modifyitems(config, items):
    """Marks each test with the components it uses, read from the fixtures it requests (directly or through other
    fixtures) and from the parameters that choose one; any of them also marks it `services`. `make test-fast` runs the rest.
    Orders the long modules first."""
    first = {name: rank for rank, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))
    for item in items:
        needs = {marker for fixture, marker in SERVICE_MARKERS.items() if fixture in item.fixturenames}
        params = item.callspec.params.values() if getattr(item, "callspec", None) is not None else ()
        needs |= {PARAM_MARKERS[p] for p in params if isinstance(p, str) and p in PARAM_MARKERS}
        needs |= {name for name in ("kafka", "s3", "spark", "glue", "ui", "faults") if item.get_closest_marker(name)}
        for name in sorted(needs):
            item.add_marker(name)
        if needs or item.get_closest_marker("services"):
            item.add_marker("services")
