"""Fault suite, services: the broker stopped mid-run, the S3 server stopped mid-write and restarted,
transient S3 errors; each ends with the exactly-once check after the re-run.

The broker and S3 server these tests stop are their own instances, never the session's shared ones.
"""

from __future__ import annotations

import time
import uuid
from urllib.parse import unquote

import pytest

from dev_services.seaweedfs import SeaweedS3
from dev_services.tansu import TansuBroker
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.log import KafkaUnavailable, SliceReadError
from kafka_lake.lake import layout
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.slice_task import land_slice
from spark_jobs.landing_job import run_slices_on_spark
from tests.exactly_once import assert_exactly_once
from tests.landing_driver import finish_landing, run_landing, start_landing
from tests.landing_fixtures import HOURS, land, landing_settings, produce, topic_with_traffic
from tests.s3_fault_proxy import S3FaultProxy

pytestmark = pytest.mark.faults

HOUR = KafkaHour(HOURS[1])


def land_inline(tasks):
    return [land_slice(task) for task in tasks]


def test_given_the_broker_stopped_mid_run_then_the_run_fails_clearly_commits_nothing_and_the_rerun_lands_once(
    spark, tmp_path,
):
    """Tansu keeps records in memory only: the restarted broker is given the same records again, at the
    same offsets, as a broker that keeps its log on disk would still hold them."""
    lake = str(tmp_path / "lake")
    own = TansuBroker().start()
    try:
        topic, traffic = topic_with_traffic(own, tmp_path / "catalog", max_rows_per_task=5)
        landed_slices = []

        def stop_broker_after_first_slice(tasks):
            landed_slices.append(land_slice(tasks[0]))
            own.stop()
            return landed_slices + land_inline(tasks[1:])

        started = time.monotonic()
        with pytest.raises((SliceReadError, KafkaUnavailable)) as failed:
            land(topic, [HOUR], landing_settings(lake, own.bootstrap_servers), stop_broker_after_first_slice)
        failed_after = time.monotonic() - started

        assert topic.topic in str(failed.value) and "partition" in str(failed.value)
        assert failed_after < 60, "a stopped broker must fail the run, not hang it"
        assert landed_slices, "the broker was stopped mid-run, after a slice had landed"
        assert ManifestStore(LakeStorage(lake), topic.database, topic.table).landed_hours() == []

        own.start()  # same port
        offsets = [p.offset for p in traffic.produced]
        own.create_topic(topic.topic, 3)
        produce(own.bootstrap_servers, traffic)
        assert [p.offset for p in traffic.produced] == offsets
        land(topic, [HOUR], landing_settings(lake, own.bootstrap_servers), lambda tasks: run_slices_on_spark(spark, tasks))
    finally:
        own.stop()

    assert_exactly_once(LakeStorage(lake), topic, traffic.in_hours([HOURS[1]]).produced)


@pytest.fixture
def own_s3(tmp_path, monkeypatch):
    """An S3 server of this test's own, which it may stop; the lake's client is pointed at it."""
    with SeaweedS3(data_dir=tmp_path / "seaweedfs") as server:
        server.create_bucket("lake")
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server


def test_given_the_s3_server_down_from_mid_write_until_the_run_gives_up_then_nothing_is_committed_and_the_rerun_lands_once(
    broker, own_s3, tmp_path,
):
    """An outage the retries cannot outlast: the server stays down until the run has ended. (An outage the
    retries do outlast is the next test's: every write's first attempt fails.)"""
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog", max_rows_per_task=5)
    lake = f"s3://lake/faults-{uuid.uuid4().hex[:12]}"
    hours = [KafkaHour(hour).partition_key for hour in HOURS]
    signals = tmp_path / "signals"
    signals.mkdir()
    run = start_landing(topic, lake, broker.bootstrap_servers, hours, pause_at="file:3", signal_dir=signals)
    deadline = time.monotonic() + 120
    while not (signals / "reached").exists():
        assert run.poll() is None and time.monotonic() < deadline, "the landing never wrote its third file"
        time.sleep(0.05)

    own_s3.stop()
    (signals / "go").touch()
    interrupted = finish_landing(run)
    own_s3.start()

    assert interrupted.returncode != 0, "a run whose lake is unreachable cannot succeed"
    assert "bucket 'lake'" in interrupted.error or "AWS Error" in interrupted.error, interrupted.output[-3000:]
    storage = LakeStorage(lake)
    assert len(ManifestStore(storage, topic.database, topic.table).landed_hours()) < len(hours), "the hour it was writing is uncommitted"
    again = run_landing(topic, lake, broker.bootstrap_servers, hours)
    assert again.returncode == 0, again.output[-3000:]
    assert_exactly_once(storage, topic, traffic.in_hours(HOURS).produced)


def _first_attempt_of_every_write(method: str, path: str, attempts: int) -> bool:
    return method in ("PUT", "POST") and attempts == 0


def test_given_transient_s3_errors_then_every_write_is_retried_and_the_hour_lands_once(broker, s3_server, tmp_path, monkeypatch):
    """Every write's first attempt answers 503 SlowDown (through a proxy in front of the real S3 server)."""
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog")
    lake = f"s3://lake/faults-{uuid.uuid4().hex[:12]}"
    with S3FaultProxy(s3_server.endpoint_url, _first_attempt_of_every_write) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint_url)
        [result] = land(topic, [HOUR], landing_settings(lake, broker.bootstrap_servers), land_inline)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)

    written = {unquote(path) for _, path in proxy.log.failed}
    assert all(proxy.log.forwarded[key] >= 1 for key in proxy.log.failed), "a failed write was never retried"
    # Every data file and the manifest, each written to a hidden temporary key and copied to its name: both
    # writes failed once. (Folder markers that pyarrow puts behind a deleted temporary are left out.)
    # The attempt journal's, the placement index's and the change log's markers are empty objects written in one
    # request, and retried too.
    named = {path for path in written if not path.endswith("/") and not path.rsplit("/", 1)[-1].startswith(".")}
    root = f"/{lake[len('s3://'):]}"
    storage = LakeStorage(lake)
    markers = {f"{root}/{stored.path}" for folder in ("_attempts", "_placed")
               for stored in storage.list_files(f"{layout.manifest_prefix(topic.database, topic.table)}/{folder}")}
    # The manifest change log's marker too (one per manifest written): the metrics server learns of the hour from it.
    markers |= {f"{root}/{stored.path}" for stored in storage.list_files(layout.MANIFEST_CHANGES_PREFIX)}
    assert markers and named == {f"{root}/{f.path}" for f in result.manifest.files} | {f"{root}/{result.manifest_path}"} | markers
    assert len([path for path in written if path.rsplit("/", 1)[-1].startswith(".")]) == len(named - markers)
    assert_exactly_once(LakeStorage(lake), topic, traffic.in_hours([HOURS[1]]).produced)


def test_given_s3_refusing_every_write_then_the_run_fails_naming_the_object_and_commits_nothing(broker, s3_server, tmp_path, monkeypatch):
    topic, _ = topic_with_traffic(broker, tmp_path / "catalog")
    lake = f"s3://lake/faults-{uuid.uuid4().hex[:12]}"
    with S3FaultProxy(s3_server.endpoint_url, lambda method, path, attempts: method in ("PUT", "POST")) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint_url)
        started = time.monotonic()
        with pytest.raises(OSError) as failed:
            land(topic, [HOUR], landing_settings(lake, broker.bootstrap_servers), land_inline)
        gave_up_after = time.monotonic() - started
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)

    assert "in bucket 'lake'" in str(failed.value) and "SLOW_DOWN" in str(failed.value)
    [(attempts)] = proxy.log.failed.values()
    assert attempts == 8  # the lake's retry budget, spent with growing pauses
    pauses = [b - a for a, b in zip(proxy.log.failed_at, proxy.log.failed_at[1:])]
    assert sum(pauses[-3:]) > sum(pauses[:3]), f"no backoff between attempts: {pauses}"
    assert gave_up_after < 120
    assert ManifestStore(LakeStorage(lake), topic.database, topic.table).landed_hours() == []


def test_given_transient_s3_errors_then_an_iceberg_hour_is_committed_once(broker, s3_server, tmp_path, monkeypatch):
    """Every write's first attempt answers 503 SlowDown, the table's own metadata files (written by pyiceberg
    through the lake's S3 client) included; the Iceberg catalog is SQLite beside the test."""
    monkeypatch.setenv("ICEBERG_CATALOG_URI", f"sqlite:///{tmp_path}/iceberg_catalog.db")
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog", table_format="iceberg")
    lake = f"s3://lake/faults-{uuid.uuid4().hex[:12]}"
    settings = landing_settings(lake, broker.bootstrap_servers)
    with S3FaultProxy(s3_server.endpoint_url, _first_attempt_of_every_write) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint_url)
        [result] = land(topic, [HOUR], settings, land_inline)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)

    assert result.table_commit["iceberg_snapshot_id"]
    failed = [unquote(path) for _, path in proxy.log.failed]
    assert all(proxy.log.forwarded[key] >= 1 for key in proxy.log.failed), "a failed write was never retried"
    assert any(path.endswith(".metadata.json") for path in failed) and any(path.endswith(".avro") for path in failed), failed
    assert_exactly_once(LakeStorage(lake), topic, traffic.in_hours([HOURS[1]]).produced)
