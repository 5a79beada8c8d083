"""Fault suite, crashes: a landing process killed with SIGKILL at each point of a landing, then run again
in a fresh process, and two landings of the same hours at once; each ends with the exactly-once check.

Real broker, real S3 server, and Spark where the killed process is a Spark driver.
"""

from __future__ import annotations

import time

import pytest

from kafka_lake.hours import KafkaHour
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from tests.exactly_once import assert_exactly_once
from tests.landing_driver import finish_landing, run_landing, start_landing
from tests.landing_fixtures import HOURS, topic_with_traffic

pytestmark = pytest.mark.faults

HOUR_KEYS = [KafkaHour(hour).partition_key for hour in HOURS]


@pytest.fixture
def table_format() -> str:
    return "hive"


@pytest.fixture
def orders(broker, tmp_path, lake_root, table_format, monkeypatch):
    """Given three hours of traffic on three partitions, sliced five offsets per task (many files), kept in
    `table_format`; an Iceberg table of an S3 lake in a SQL catalog the landing processes find by
    `ICEBERG_CATALOG_URI`."""
    if table_format == "iceberg" and LakeStorage(lake_root).is_s3:
        monkeypatch.setenv("ICEBERG_CATALOG_URI", f"sqlite:///{tmp_path}/iceberg_catalog.db")
    return topic_with_traffic(broker, tmp_path / "catalog", max_rows_per_task=5, table_format=table_format)


@pytest.mark.parametrize(
    "kill_at, runner, lake_root, table_format",
    [
        ("read:7", "inline", "s3", "hive"),      # mid-slice: files open, a multipart upload in flight
        ("read:7", "inline", "local", "hive"),   # mid-slice: hidden temporary files half written
        ("file:7", "inline", "local", "hive"),   # between two files of the second hour's slices
        ("file:7", "inline", "s3", "hive"),
        ("manifest:2", "spark", "s3", "hive"),   # the Spark driver dies after the second hour's tasks, before its commit
        ("read:7", "inline", "s3", "iceberg"),   # the same points with the hours committed to an Iceberg table
        ("file:7", "inline", "local", "iceberg"),
        ("cleanup:2", "inline", "local", "iceberg"),    # the second hour's manifest written, its snapshot not
        ("committed:2", "inline", "s3", "iceberg"),     # its snapshot committed, its folders not cleaned
    ],
    indirect=["lake_root"],
)
def test_given_a_landing_killed_at_a_point_when_run_again_then_every_record_is_in_the_lake_once(
    broker, orders, lake_root, kill_at, runner, table_format,
):
    topic, traffic = orders

    killed = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS, runner=runner, kill_at=kill_at)
    assert killed.killed, killed.output[-3000:]
    manifests = ManifestStore(LakeStorage(lake_root), topic.database, topic.table)
    assert len(manifests.landed_hours()) < len(HOUR_KEYS), "the kill came after every commit: it proves nothing"

    again = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS)

    assert again.returncode == 0, again.output[-3000:]
    count = assert_exactly_once(LakeStorage(lake_root), topic, traffic.in_hours(HOURS).produced)
    assert count.records == len(traffic.in_hours(HOURS).produced)


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_given_a_relanding_killed_after_its_commit_before_cleanup_when_run_again_then_replaced_files_go(
    broker, orders, lake_root, tmp_path,
):
    """The re-landing cuts other slices (new files); killed between its manifest and removing the old files."""
    topic, traffic = orders
    assert run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS).returncode == 0
    topic_file = tmp_path / "catalog" / "e2e" / "orders" / "topic.yaml"
    topic_file.write_text(topic_file.read_text().replace("max_rows_per_task: 5", "max_rows_per_task: 1000"))

    killed = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS, kill_at="cleanup:1")
    assert killed.killed, killed.output[-3000:]
    with pytest.raises(AssertionError, match="more than once"):
        assert_exactly_once(LakeStorage(lake_root), topic, traffic.in_hours(HOURS).produced)  # the old files are still there

    again = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS)

    assert again.returncode == 0, again.output[-3000:]
    assert_exactly_once(LakeStorage(lake_root), topic, traffic.in_hours(HOURS).produced)


@pytest.mark.parametrize("lake_root, table_format", [("local", "hive"), ("s3", "hive"), ("local", "iceberg")],
                         indirect=["lake_root"])
def test_given_two_landings_of_the_same_hours_at_once_then_every_record_is_in_the_lake_once(
        broker, orders, lake_root, tmp_path, table_format):
    """Both runs are held at their first commit until both reach it, then let go together (local and S3; an Iceberg
    table on a local lake, where the later manifest's landing is the hour's snapshot and the other's files go)."""
    topic, traffic = orders
    signals = [tmp_path / f"run-{n}" for n in (1, 2)]
    runs = []
    for signal_dir in signals:
        signal_dir.mkdir()
        runs.append(start_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS, pause_at="manifest:1", signal_dir=signal_dir))
    deadline = time.monotonic() + 120
    while not all((d / "reached").exists() for d in signals):
        ended = [finish_landing(r).output[-3000:] for r in runs if r.poll() is not None]
        assert time.monotonic() < deadline and not ended, f"a run never reached its commit: {ended}"
        time.sleep(0.05)
    for signal_dir in signals:
        (signal_dir / "go").touch()

    finished = [finish_landing(run) for run in runs]

    assert [f.returncode for f in finished] == [0, 0], [f.output[-2000:] for f in finished]
    assert all(sorted(f.landed) == HOUR_KEYS for f in finished)
    count = assert_exactly_once(LakeStorage(lake_root), topic, traffic.in_hours(HOURS).produced)
    assert count.unheld_files == frozenset()  # both landings finished: nothing is left for the orphan sweep
