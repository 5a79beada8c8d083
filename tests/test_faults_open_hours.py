"""Fault suite, the open hour in increments: a landing process killed with SIGKILL during an increment and during the
close, at each point of a landing, then the next landing in a fresh process; each ends with every record of the hour
in the table exactly once, as readers read it. Real broker; the Hive layout's increments registered in Glue (moto's
server: no Glue runs here), an Iceberg table in the embedded SQL catalog.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from tests.exactly_once import assert_exactly_once
from tests.landing_driver import run_landing
from tests.landing_fixtures import PARTITIONS, build_traffic, produce, unique_topic_name, write_test_topic
from tests.test_open_hours import H, staged

pytestmark = pytest.mark.faults


def land_open_hour(topic, lake: str, broker, minutes: int, **options):
    return run_landing(topic, lake, broker.bootstrap_servers, [H.partition_key], now=H.start + timedelta(minutes=minutes),
                       open_hour=5, **options)


@pytest.mark.parametrize("kill_at, closing, table_format", [
    ("file:2", False, "hive"),       # an increment's files half written
    ("manifest:1", False, "hive"),   # an increment's files written, its manifest (the commit) not
    ("cleanup:1", False, "hive"),    # its manifest written, its partitions not registered, nothing swept
    ("manifest:1", True, "hive"),    # the close's files written, its manifest not
    ("manifest:1", False, "iceberg"),
    ("cleanup:1", False, "iceberg"),  # the increment's manifest written, its append snapshot not
    ("cleanup:1", True, "iceberg"),
])
def test_given_a_landing_of_the_open_hour_killed_when_the_next_lands_then_every_record_is_in_the_table_once(
        broker, tmp_path, glue_endpoint, kill_at, closing, table_format):
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name(), max_rows_per_task=5, table_format=table_format)
    broker.create_topic(topic.topic, PARTITIONS)
    traffic = build_traffic(topic)
    first, second, rest = staged(traffic)
    lake = str(tmp_path / "lake")
    produce(broker.bootstrap_servers, first)
    assert land_open_hour(topic, lake, broker, 25).returncode == 0
    produce(broker.bootstrap_servers, second)
    if closing:
        assert land_open_hour(topic, lake, broker, 45).returncode == 0
        produce(broker.bootstrap_servers, rest)

    killed = land_open_hour(topic, lake, broker, 75 if closing else 45, kill_at=kill_at)
    assert killed.killed, killed.output[-3000:]

    again = land_open_hour(topic, lake, broker, 76 if closing else 46)  # the dead landing's lease is taken over
    assert again.returncode == 0, again.output[-3000:]
    if not closing:
        produce(broker.bootstrap_servers, rest)
        assert land_open_hour(topic, lake, broker, 75).returncode == 0
    storage = LakeStorage(lake)
    manifest = ManifestStore(storage, topic.database, topic.table).read(H)
    assert manifest.final
    expected = traffic.in_hours([H.start]).produced
    count = assert_exactly_once(storage, topic.model_copy(update={"open_hour_minutes": 5}), expected)
    assert count.records == len(expected)
