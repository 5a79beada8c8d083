"""Fault suite, crashes: a landing process killed with SIGKILL at each point of a landing, then run again
in a fresh process, and two landings of the same hours at once; each ends with the exactly-once check. A change
topic's current-state table under the same: its raw landing killed, its application killed at each point, and two
applications at once; each ends with the table equal to the state the producer kept.

Real broker, real S3 server, and Spark where the killed process is a Spark driver.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from kafka_lake.current.apply import current_state_check
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.tables.iceberg.catalog import open_catalog
from tests.change_topics import change_topic_with_traffic
from tests.exactly_once import assert_exactly_once
from tests.landing_driver import finish_landing, run_landing, start_landing
from tests.landing_fixtures import HOURS, landing_settings, topic_with_traffic, unique_topic_name
from tests.test_current_state_e2e import pyiceberg_state

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

    finished = held_and_released_together(tmp_path, [
        lambda signal_dir: start_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS, pause_at="manifest:1",
                                         signal_dir=signal_dir)] * 2)

    assert [f.returncode for f in finished] == [0, 0], [f.output[-2000:] for f in finished]
    assert all(sorted(f.landed) == HOUR_KEYS for f in finished)
    count = assert_exactly_once(LakeStorage(lake_root), topic, traffic.in_hours(HOURS).produced)
    assert count.unheld_files == frozenset()  # both landings finished: nothing is left for the orphan sweep


def held_and_released_together(tmp_path, starts) -> list:
    """Starts each run (given its signal folder) paused at its point, lets them all go once every one reached it, and
    waits for them to end."""
    signals, runs = [], []
    for n, start in enumerate(starts, start=1):
        signals.append(tmp_path / f"run-{n}")
        signals[-1].mkdir()
        runs.append(start(signals[-1]))
    deadline = time.monotonic() + 120
    while not all((d / "reached").exists() for d in signals):
        ended = [finish_landing(r).output[-3000:] for r in runs if r.poll() is not None]
        assert time.monotonic() < deadline and not ended, f"a run never reached its pause: {ended}"
        time.sleep(0.05)
    for signal_dir in signals:
        (signal_dir / "go").touch()
    return [finish_landing(run) for run in runs]


# --- a change topic and its current-state table -------------------------------------------------------------------


@pytest.fixture
def customers(broker, tmp_path, lake_root, table_format, monkeypatch):
    """Given the Debezium-shaped change stream of `tests.change_topics` (creates, updates, deletes and their tombstones,
    broken records) on three partitions, its raw table kept in `table_format`, its current-state table in the SQL
    catalog the processes find by `ICEBERG_CATALOG_URI` on an S3 lake."""
    if LakeStorage(lake_root).is_s3:
        monkeypatch.setenv("ICEBERG_CATALOG_URI", f"sqlite:///{tmp_path}/iceberg_catalog.db")
    return change_topic_with_traffic(broker, tmp_path / "catalog", unique_topic_name(), table_format=table_format,
                                     max_rows_per_task=5)


def assert_current_state_is_the_producers(topic, traffic, lake_root, hours) -> None:
    """The current-state table holds the producer's state after the last hour, row by row and value by value, and the
    check passes for every hour; every data file of its folder no snapshot holds is of a killed application."""
    storage = LakeStorage(lake_root)
    table = open_catalog(landing_settings(lake_root, "").iceberg_catalog).load_table((topic.database, "customers_current"))
    assert pyiceberg_state(table) == traffic.state_after(KafkaHour.from_partition_key(hours[-1]).start)
    for hour in hours:
        outcome = current_state_check(topic, storage, table, KafkaHour.from_partition_key(hour))
        assert outcome.passed, outcome.description


def raw_expected(traffic) -> list:
    """What the landed hours hold: the change topic keeps its tombstones as rows."""
    return [replace(p, kind="row") if p.kind == "tombstone" else p for p in traffic.in_hours(HOURS).produced]


@pytest.mark.parametrize(
    "kill_at, lake_root, table_format",
    [
        ("file:4", "local", "hive"),         # the raw landing killed between two files of the first hour
        ("manifest:2", "s3", "hive"),        # its second hour's files written, its manifest not
        ("cleanup:2", "local", "iceberg"),   # an Iceberg raw table: the second hour's manifest written, its snapshot not
    ],
    indirect=["lake_root"],
)
def test_given_a_change_topics_landing_killed_when_run_again_and_applied_then_its_current_state_is_the_producers(
        broker, customers, lake_root, kill_at, table_format):
    topic, traffic = customers

    killed = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS, kill_at=kill_at)
    assert killed.killed, killed.output[-3000:]
    again = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS)
    assert again.returncode == 0, again.output[-3000:]
    assert_exactly_once(LakeStorage(lake_root), topic, raw_expected(traffic))

    applied = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS, current=True)

    assert applied.returncode == 0, applied.output[-3000:]
    assert_current_state_is_the_producers(topic, traffic, lake_root, HOUR_KEYS)


@pytest.mark.parametrize(
    "kill_at, lake_root",
    [
        ("deletions:2", "local"),   # the second hour's deletions recorded, the table not changed
        ("state-file:2", "local"),  # between two data files of the table
        ("merge:2", "s3"),          # the second hour's files written, its snapshot not committed
        ("merged:2", "local"),      # its snapshot committed, the application not recorded
    ],
    indirect=["lake_root"],
)
def test_given_a_current_state_application_killed_at_a_point_when_run_again_then_the_table_is_the_producers(
        broker, customers, lake_root, kill_at):
    topic, traffic = customers
    assert run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS).returncode == 0

    killed = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS, kill_at=kill_at, current=True)
    assert killed.killed, killed.output[-3000:]
    assert len(killed.landed) < len(HOUR_KEYS), "the kill came after every application: it proves nothing"
    again = run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS, current=True)

    assert again.returncode == 0, again.output[-3000:]
    assert_current_state_is_the_producers(topic, traffic, lake_root, HOUR_KEYS)


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_given_two_applications_at_once_in_opposite_orders_then_the_table_is_the_producers(broker, customers, lake_root,
                                                                                         tmp_path):
    """Both are held at their first commit until both reach it, then let go together: one commits, the other meets
    its key ranges changed, plans again on the new table, and both finish."""
    topic, traffic = customers
    assert run_landing(topic, lake_root, broker.bootstrap_servers, HOUR_KEYS).returncode == 0

    finished = held_and_released_together(tmp_path, [
        lambda signal_dir, hours=hours: start_landing(topic, lake_root, broker.bootstrap_servers, hours, pause_at="merge:1",
                                                      signal_dir=signal_dir, current=True)
        for hours in (HOUR_KEYS, list(reversed(HOUR_KEYS)))])

    assert [f.returncode for f in finished] == [0, 0], [f.output[-2000:] for f in finished]
    assert max(hour["attempts"] for f in finished for hour in f.landed.values()) > 1, "the two never met"
    assert_current_state_is_the_producers(topic, traffic, lake_root, HOUR_KEYS)
