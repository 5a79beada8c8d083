"""Erasure that holds: a Debezium-shaped change stream on the real broker, landed on Spark into the Hive layout, each
hour applied to its current-state table; erasure requests on `subject_field: [after.id, before.id]` remove a subject's
every row, a delete event's `before` image included, and nothing after a request is accepted brings the subject back:
landing an hour again, compacting it, applying it to the current-state table, or rewriting a partition twice.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from kafka_lake.current.apply import apply_landed_hours
from kafka_lake.current.state_table import current_table_name
from kafka_lake.current.upkeep import retain_current_state
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.layout import ERASURE_REQUESTS_PREFIX
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_state import storage_partitions
from kafka_lake.tables.formats import table_format
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
from kafka_lake.tables.table_format import TableAccess
from kafka_lake.upkeep.compaction import compact_hour, generations_hold_their_sources
from kafka_lake.upkeep.retention import apply_retention
from spark_jobs.compaction_job import run_compactions_on_spark
from tests.change_topics import CLOSING, change_topic_with_traffic
from tests.landing_fixtures import HOURS, land_on_spark, landing_settings, read_lake

EARLY = [HOURS[0] - timedelta(hours=n) for n in (2, 1)]  # empty: the placement hours of the first late events are due
RAW_HOURS = [*EARLY, *HOURS, CLOSING]
RETAINED_AT = datetime(2026, 11, 2, 6, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def _landed_template(broker, spark, tmp_path_factory):
    """The change stream landed once for the module, every hour on Spark, into a lake no test touches."""
    catalog = tmp_path_factory.mktemp("erasure-catalog")
    topic, traffic = change_topic_with_traffic(broker, catalog, f"e2e.customers.{uuid.uuid4().hex[:8]}",
                                               subject_field=["after.id", "before.id"])
    lake = str(tmp_path_factory.mktemp("erasure-template") / "lake")
    land_on_spark(topic, landing_settings(lake, broker.bootstrap_servers), spark, RAW_HOURS)
    return topic, traffic, LakeStorage(lake)


class ChangeLake:
    """A copy of the landed template: the raw table in the Hive layout, its current-state table, the broker."""

    def __init__(self, template, lake_root: str, tmp_path, broker, spark):
        self.topic, self.traffic, landed = template
        self.storage, self.spark = LakeStorage(lake_root), spark
        for stored in landed.list_files(""):
            self.storage.write_bytes(stored.path, landed.read_bytes(stored.path))
        self.settings = landing_settings(lake_root, broker.bootstrap_servers)
        sql = f"sqlite:///{tmp_path}/iceberg.db" if self.storage.is_s3 else None
        self.catalog = open_catalog(IcebergCatalogConfig(lake_root, sql_uri=sql))
        self.raw = table_format(self.topic, TableAccess(self.storage))
        self.manifests = ManifestStore(self.storage, self.topic.database, self.topic.table)

    def run_tasks(self, tasks):
        return run_compactions_on_spark(self.spark, tasks)

    def land(self, hours):
        return land_on_spark(self.topic, self.settings, self.spark, hours)

    def apply(self, hours):
        return list(apply_landed_hours(self.topic, self.storage, self.catalog, self.raw, [KafkaHour(h) for h in hours]))

    def compact(self, hour):
        return compact_hour(self.topic, hour, self.storage, self.run_tasks, lambda manifests: None)

    def request_erasure(self, name: str, subjects) -> None:
        self.storage.write_bytes(f"{ERASURE_REQUESTS_PREFIX}/{name}.json", json.dumps(
            {"subject_ids": [str(s) for s in subjects], "requested_at": "2026-11-02T05:00:00Z"}).encode())

    def retain(self):
        raw = apply_retention(self.storage, self.topic, RETAINED_AT, None, self.run_tasks, lambda manifests: None,
                              lambda partitions: None)
        return raw, retain_current_state(self.topic, self.storage, self.catalog, RETAINED_AT, None)

    def current_state(self) -> dict[int, dict]:
        rows = self.catalog.load_table(tuple(current_table_name(self.topic).split("."))).scan().to_arrow()
        return {row["_kafka_key_id"]: row for row in rows.to_pylist()}

    def raw_rows(self) -> list[tuple[str, dict]]:
        """(partition, row) of every row of the raw table as its readers see it: at each partition's location."""
        found = []
        for partition, location in storage_partitions(self.storage, self.topic.database, self.topic.table).items():
            found += [(str(partition), lake_row.row) for lake_row in read_lake(self.storage, location)
                      if lake_row.path.rsplit("/", 1)[0] == location]
        return found


def subject_of(row: dict) -> set:
    return {(row.get(side) or {}).get("id") for side in ("after", "before")} - {None}


def holding(rows: list[tuple[str, dict]], subject: int) -> list[dict]:
    return [row for _, row in rows if subject in subject_of(row)]


def files_hold(storage: LakeStorage, paths, subject: int) -> list[dict]:
    return [lake_row.row for folder in sorted({path.rsplit("/", 1)[0] for path in paths})
            for lake_row in read_lake(storage, folder) if lake_row.path in paths and subject in subject_of(lake_row.row)]


def by_offset(rows: list[tuple[str, dict]]) -> dict[tuple[int, int], dict]:
    return {(row["_kafka_partition"], row["_kafka_offset"]): row for _, row in rows}


@pytest.fixture
def changes(_landed_template, lake_root, tmp_path, broker, spark):
    return ChangeLake(_landed_template, lake_root, tmp_path, broker, spark)


def deleted_subject(traffic) -> int:
    """A customer with a Debezium delete event (`op: d`, `after` null, the row in `before`), deleted at the end."""
    final = traffic.state_after(CLOSING)
    return next(c.key for c in traffic.changes
                if c.produced.record and c.produced.record["op"] == "d" and c.produced.record["after"] is None
                and c.key not in final)


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_a_subject_field_of_several_paths_erases_a_delete_events_before_image_too(changes):
    """Given `subject_field: [after.id, before.id]` and a customer whose rows include a delete event, whose `after` is
    null; when an erasure request names it and retention runs, then no row of the raw table holds it in `after` or in
    `before`, every other row stays as it was, and the current-state table holds no row of it. Before: `subject_field`
    took one path, and with `after.id` (the docs' example) the delete event kept the customer's email and name in
    `before`."""
    changes.apply(RAW_HOURS)
    subject = deleted_subject(changes.traffic)
    before = changes.raw_rows()
    theirs = holding(before, subject)
    assert any(row["after"] is None for row in theirs), "the subject's delete event holds it in `before` alone"
    state_before = changes.current_state()
    changes.request_erasure("forget-one", [subject])

    raw, _ = changes.retain()

    after = changes.raw_rows()
    assert holding(after, subject) == []
    assert raw.erased_rows == len(theirs)
    assert by_offset(after) == {key: row for key, row in by_offset(before).items() if subject not in subject_of(row)}
    assert changes.current_state() == {key: row for key, row in state_before.items() if key != subject}


@pytest.mark.parametrize("lake_root", ["local", "s3"], indirect=True)
def test_an_accepted_erasure_holds_for_every_application_compaction_and_landing_after_it(changes):
    """Given every hour landed and an erasure request accepted, before any retention run: when the hours are applied to
    the current-state table, then it holds no row of the subjects; when the placement hours are compacted, then no
    generation readers see holds one; when retention has run and the hours are landed again from Kafka (which still
    holds the subjects' records), then no landed file holds one and the counts balance (their records counted as
    erased), compacting again and applying again bring none back, and every other row is as it was. Before: each of
    them wrote the subjects' rows again, until the next retention run after it."""
    final = changes.traffic.state_after(CLOSING)
    subjects = [deleted_subject(changes.traffic), sorted(final)[0]]
    changes.request_erasure("forget-two", subjects)

    changes.apply(RAW_HOURS)

    assert sorted(changes.current_state()) == sorted(key for key in final if key not in subjects)

    for hour in [*EARLY, *HOURS[:2]]:
        compacted = changes.compact(hour)
        assert generations_hold_their_sources(changes.storage, changes.topic, compacted).passed, hour
        assert compacted.manifests, f"placement hour {hour} holds rows to compact"
        for manifest in compacted.manifests:
            for subject in subjects:
                assert files_hold(changes.storage, {f.path for f in manifest.files}, subject) == []

    changes.retain()
    kept = by_offset(changes.raw_rows())
    assert not any(subject_of(row) & set(subjects) for row in kept.values())

    relanded = changes.land(RAW_HOURS)

    data_files = {f.path for result in relanded for f in result.manifest.files if f.kind == "data"}
    for subject in subjects:
        assert files_hold(changes.storage, data_files, subject) == []
    assert sum(result.manifest.counts.erased for result in relanded) > 0
    assert all(result.manifest.counts.accounted == result.manifest.counts.records for result in relanded)
    for hour in [*EARLY, *HOURS[:2]]:
        assert generations_hold_their_sources(changes.storage, changes.topic, changes.compact(hour)).passed, hour
    assert by_offset(changes.raw_rows()) == kept
    changes.apply(list(reversed(RAW_HOURS)))
    assert sorted(changes.current_state()) == sorted(key for key in final if key not in subjects)


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)
def test_an_hour_whose_partition_two_erasures_rewrote_applies_lands_and_compacts_again(changes):
    """Given two erasure requests accepted a day apart, each applied by a retention run, the second rewriting a
    partition the first rewrote; when every hour is applied to the current-state table again, landed again, the
    partition's placement hour compacted again and the hours applied once more, then each run succeeds and no row of
    either subject comes back. Before: applying an hour that landed into that partition again failed with
    FileNotFoundError on its landed file, which the first erasure had consumed and the second generation no longer
    named (an hour rewritten once, or never, applied again fine)."""
    changes.apply(RAW_HOURS)
    due = {hour for hour in [*EARLY, *HOURS[:2]]}
    held: dict[str, set] = {}
    for partition, row in changes.raw_rows():
        held.setdefault(partition, set()).update(subject_of(row))
    placement = max((p for p in storage_partitions(changes.storage, changes.topic.database, changes.topic.table)
                     if p.hour in due), key=lambda p: len(held.get(str(p), ())))
    first, second = sorted(held[str(placement)])[:2]
    changes.request_erasure("first", [first])
    changes.retain()
    changes.request_erasure("second", [second])

    raw, _ = changes.retain()

    assert placement in raw.erased_partitions
    changes.apply(RAW_HOURS)
    state = changes.current_state()
    assert first not in state and second not in state

    changes.land(RAW_HOURS)
    compacted = changes.compact(placement.hour)

    assert generations_hold_their_sources(changes.storage, changes.topic, compacted).passed
    rows = changes.raw_rows()
    assert holding(rows, first) == [] and holding(rows, second) == []
    changes.apply(RAW_HOURS)
    assert changes.current_state() == state
