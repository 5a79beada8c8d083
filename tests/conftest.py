"""Shared real components for the tests: a Tansu broker, a SeaweedFS S3 server and one Spark session.

Each is started once per test session on free loopback ports and stopped by process id.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from dev_services.seaweedfs import SeaweedS3
from dev_services.tansu import TansuBroker

REPO = Path(__file__).resolve().parent.parent
PII_TEST_KEY = "test-pii-key-not-a-secret"


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
