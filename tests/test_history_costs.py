"""The work of landing and compacting one hour does not grow with the table's history: on the real S3 server, behind
a proxy that counts every request, an hour lands and compacts with the same S3 requests, kind by kind, on a table
holding 1,100 older hours as on one holding 12; and the files of a crashed attempt are swept from every placement
hour it wrote into, found through the hour's attempt journal.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta

import pytest

from bench.history import RequestCounter, StageCost, compact, land, write_history, year_before
from kafka_lake.hours import KafkaHour
from kafka_lake.lake import layout
from kafka_lake.lake.manifests import AttemptJournal, ManifestStore
from kafka_lake.lake.storage import LakeStorage
from tests.exactly_once import assert_exactly_once
from tests.landing_fixtures import (
    HOURS,
    build_traffic,
    in_this_process,
    landing_settings,
    produce,
    unique_topic_name,
    write_test_topic,
)
from tests.landing_fixtures import land as land_hours_in_this_process
from tests.s3_fault_proxy import S3FaultProxy

FEW, MANY = 12, 1100  # a few hours of history, and more than S3 lists in one request of every kind


@pytest.fixture
def counted(s3_server):
    """Every request of the lake's S3 clients goes through a proxy that counts them by kind."""
    counter = RequestCounter()
    with S3FaultProxy(s3_server.endpoint_url, counter) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint_url
        try:
            yield counter
        finally:
            os.environ["AWS_ENDPOINT_URL"] = s3_server.endpoint_url


def test_given_many_hours_of_history_when_an_hour_lands_and_compacts_then_it_makes_the_requests_it_makes_with_a_few(
        broker, tmp_path, s3_server, counted):
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name(), allowed_lateness_hours=0)
    broker.create_topic(topic.topic, 3)
    produce(broker.bootstrap_servers, build_traffic(topic))
    hour = KafkaHour(HOURS[0])
    costs = {}
    for hours in (FEW, MANY):
        prefix = uuid.uuid4().hex[:12]
        write_history(s3_server.s3_client(timeout=60), "lake", prefix, topic, year_before(hour, hours))
        root = f"s3://lake/{prefix}"
        landing, compaction = StageCost(), StageCost()
        with counted.stage(landing):
            land(topic, hour, landing_settings(root, broker.bootstrap_servers))
        with counted.stage(compaction):
            compact(topic, hour, LakeStorage(root))
        assert ManifestStore(LakeStorage(root), topic.database, topic.table).read(hour) is not None
        costs[hours] = {"landing": dict(landing.requests), "compaction": dict(compaction.requests)}

    assert costs[MANY] == costs[FEW], f"requests by kind with {FEW} and {MANY} hours of history: {costs}"
    assert costs[FEW]["landing"]["LIST"] > 0  # the proxy saw the lake's listings


def test_given_an_attempt_that_crashed_after_writing_into_hours_the_final_landing_does_not_place_in_when_the_hour_commits_then_its_files_are_gone(
        broker, tmp_path, lake_root):
    """A crashed attempt placed records elsewhere than the attempt that commits (a catalog fixed in between, or other
    boundaries): its files lie in placement hours the final manifest names none of, and only its journal leads there."""
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    broker.create_topic(topic.topic, 3)
    traffic = build_traffic(topic)
    produce(broker.bootstrap_servers, traffic)
    settings = landing_settings(lake_root, broker.bootstrap_servers)
    storage = LakeStorage(lake_root)
    hour = KafkaHour(HOURS[0])

    [first] = land_hours_in_this_process(topic, [hour], settings, in_this_process)
    # Given the crashed attempt's file: a copy of a landed data file of the hour's offsets, in a placement hour a day
    # before any the hour placed records in, recorded in the hour's journal before it was written, as a task does.
    landed = next(f for f in first.manifest.files if f.kind == "data")
    elsewhere = layout.data_directory(topic.database, topic.table, landed.schema_version, hour.start - timedelta(days=2))
    assert all(not f.path.startswith(elsewhere) for f in first.manifest.files)
    AttemptJournal(storage, topic.database, topic.table, hour).record(elsewhere)
    crashed = f"{elsewhere}/{landed.path.rsplit('/', 1)[1]}"
    storage.write_bytes(crashed, storage.read_bytes(landed.path))
    assert storage.exists(crashed)

    [again] = land_hours_in_this_process(topic, [hour], settings, in_this_process)

    assert crashed in again.orphans_removed and not storage.exists(crashed)
    assert_exactly_once(storage, topic, traffic.in_hours([hour.start]).produced)


def test_the_nearest_landed_hours_found_by_listings_of_one_name_are_those_of_the_whole_list(tmp_path, monkeypatch):
    """Given landed hours with random gaps, when the neighbours of any hour are looked up, then they are the nearest
    landed hours of the whole list, each found in listings as many as the gap to it has binary digits, or so."""
    import random

    from kafka_lake.hours import FIRST_HOUR, LAST_HOUR, ONE_HOUR

    storage = LakeStorage(str(tmp_path / "lake"))
    manifests = ManifestStore(storage, "e2e", "orders")
    rng = random.Random(7)
    start = HOURS[0]
    landed = sorted({KafkaHour(start + rng.randrange(20_000) * ONE_HOUR) for _ in range(300)})
    for hour in landed:
        storage.write_marker(layout.manifest_path("e2e", "orders", hour))
    listings = []
    monkeypatch.setattr(storage, "list_names", lambda *a, _list=storage.list_names, **k: listings.append(k) or _list(*a, **k))

    for _ in range(500):
        hour = KafkaHour(start + rng.randrange(-100, 20_100) * ONE_HOUR)
        listings.clear()
        before = manifests.nearest_before(hour)
        assert before == max((h for h in landed if h < hour), default=None)
        gap = (hour.start - before.start) // ONE_HOUR if before else 1
        assert len(listings) <= 2 * gap.bit_length() + 2 and all(k.get("limit") == 1 for k in listings)
        assert manifests.landed_in(hour, KafkaHour(hour.start + 99 * ONE_HOUR)) == [h for h in landed if hour <= h < KafkaHour(hour.start + 100 * ONE_HOUR)]
    assert manifests.nearest_before(KafkaHour(FIRST_HOUR)) is None
    assert manifests.nearest_before(KafkaHour(LAST_HOUR)) == landed[-1]
