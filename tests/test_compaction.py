"""Compaction on real landed data (real broker, Spark, local lake and S3): one file per small hour,
the exact same rows, crash safety mid-swap, and late data making an hour due again."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow.parquet as pq
import pytest

from kafka_lake.hours import KafkaHour, hour_key
from kafka_lake.lake import layout
from kafka_lake.lake.compaction_manifest import read_compaction
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import HourManifest, LandedFile, ManifestStore, PartitionLanding
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_state import partition_location, storage_partitions
from kafka_lake.tables.catalogs.hive_metastore import HiveCatalog
from kafka_lake.tables.hive_layout import HiveTables
from kafka_lake.tables.table_format import TableAccess
from kafka_lake.upkeep.compaction import (
    CompactionNotDue,
    CompactionResult,
    commit_compaction,
    compact_hour,
    compact_partition,
    generation_checksum,
    generations_hold_their_sources,
    plan_compaction,
)
from spark_jobs.compaction_job import run_compactions_on_spark
from tests.landing_fixtures import (
    HOURS,
    PARTITIONS,
    RAW_HOURS,
    Produced,
    land_on_spark,
    produce,
    read_lake,
    rows_as_readers_see_them,
    write_test_topic,
)


def run_on(spark):
    return lambda tasks: run_compactions_on_spark(spark, tasks)


def test_compaction_leaves_one_file_per_small_hour_and_the_same_rows(landed, spark):
    topic, _, _, storage = landed
    before = rows_as_readers_see_them(storage, topic)
    published = []

    for hour in HOURS[:2]:
        result = compact_hour(topic, hour, storage, run_on(spark), published.extend)
        assert result.manifests, "the hour had many small files"
        for manifest in result.manifests:
            assert len(manifest.files) == 1
            assert generation_checksum(storage, manifest) == manifest.offsets_checksum
            assert partition_location(storage, topic.database, topic.table, manifest.partition) == manifest.location
            assert not any(storage.exists(path) for path in manifest.sources)

    assert rows_as_readers_see_them(storage, topic) == before
    assert {m.partition for m in published} == {p for p in storage_partitions(storage, "e2e", "orders") if p.hour in HOURS[:2]}


def test_compaction_is_refused_while_raw_hours_can_still_add_rows(landed):
    topic, _, _, storage = landed
    with pytest.raises(CompactionNotDue, match="raw hours 2026-11-01-14:00"):
        plan_compaction(topic, HOURS[-1], storage)


def test_a_crash_after_the_commit_is_finished_by_the_rerun_with_the_same_rows(landed, spark):
    topic, _, _, storage = landed
    before = rows_as_readers_see_them(storage, topic)
    tasks, _ = plan_compaction(topic, HOURS[1], storage)
    assert len(tasks) >= 2, "the landed hour holds two partitions to compact: one committed, one left uncommitted"
    # The run dies after writing one generation and committing it, before publishing or deleting.
    manifest = commit_compaction(storage, compact_partition(tasks[0]))
    # …and another dies after writing a generation it never committed.
    orphan_generation = compact_partition(tasks[-1])
    assert all(storage.exists(path) for path in manifest.sources)
    published = []

    result = compact_hour(topic, HOURS[1], storage, run_on(spark), published.extend)

    assert manifest.partition in {m.partition for m in published}
    assert not any(storage.exists(path) for path in manifest.sources)
    assert rows_as_readers_see_them(storage, topic) == before
    [redone] = [m for m in result.manifests if m.partition == orphan_generation.task.partition]
    assert redone.generation == orphan_generation.task.generation
    assert [f.path for f in redone.files] == [f.path for f in orphan_generation.files]


@pytest.mark.parametrize("lake_root", ["local"], indirect=True)  # the Hive table on S3 needs hadoop-aws, not here
def test_a_run_finishing_an_interrupted_switch_checks_the_generations_it_switches_to(landed, spark, no_test_table_in_hive):
    """Given runs that died between committing every generation of an hour and switching readers to them, when the
    next run finishes each switch, then `row_set_unchanged` recomputes what those generations hold: it names them
    and passes, and it fails where a generation's files lost a row since its commit. Before, it said "0 generation(s)
    hold exactly their sources' offsets" and passed without reading a file."""
    topic, _, _, storage = landed
    tables = HiveTables(TableAccess(storage, hive_catalog=lambda: HiveCatalog(spark),
                                    run_compactions=lambda tasks, description: run_compactions_on_spark(spark, tasks)))
    committed = {}
    for hour in HOURS[:2]:
        tasks, _ = plan_compaction(topic, hour, storage)
        committed[hour] = [commit_compaction(storage, compact_partition(task)) for task in tasks]
    [*_, damaged] = committed[HOURS[1]]
    path = storage.full_path(damaged.files[0].path)
    rows = pq.read_table(path, filesystem=storage.filesystem)
    pq.write_table(rows.slice(0, rows.num_rows - 1), path, filesystem=storage.filesystem)

    intact, broken = (tables.compact_hour(topic, hour) for hour in HOURS[:2])

    assert intact.check.passed, intact.check.description
    assert intact.check.metadata["switched"] == len(committed[HOURS[0]]) > 0
    assert f"{len(committed[HOURS[0]])} switched to now" in intact.check.description
    assert not broken.check.passed and broken.check.severity == "error"
    assert f"{damaged.partition} generation 1: files hold {rows.num_rows - 1}:" in broken.check.description
    for hour in HOURS[:2]:
        assert all(partition_location(storage, topic.database, topic.table, m.partition) == m.location
                   for m in committed[hour])


def test_a_generation_that_does_not_hold_its_sources_rows_is_not_switched_to_and_its_sources_stay(landed, spark):
    """Given a compaction whose new generation loses a row between its task's report and the switch (a file cut short,
    as a storage fault leaves it), when the hour compacts, then that generation is not committed nor switched to, its
    sources stay where readers read them, `row_set_unchanged` fails naming it, and the next run compacts the hour with
    every row. Before: the check failed, but the sources were deleted all the same and readers lost the row."""
    topic, _, _, storage = landed
    before = rows_as_readers_see_them(storage, topic)
    published, damaged = [], []

    def cut_short(tasks):
        reports = run_compactions_on_spark(spark, tasks)
        damaged.append(reports[0])
        path = storage.full_path(reports[0].files[0].path)
        rows = pq.read_table(path, filesystem=storage.filesystem)
        pq.write_table(rows.slice(0, rows.num_rows - 1), path, filesystem=storage.filesystem)
        return reports

    result = compact_hour(topic, HOURS[0], storage, cut_short, published.extend)
    outcome = generations_hold_their_sources(storage, topic, result)

    [report] = damaged
    partition = report.task.partition
    assert not outcome.passed and outcome.severity == "error"
    assert f"{partition} generation {report.task.generation}: files hold {report.rows - 1}:" in outcome.description
    assert "not switched to, its sources kept" in outcome.description
    assert partition not in {m.partition for m in published}
    assert read_compaction(storage, topic.database, topic.table, partition) is None
    assert all(storage.exists(path) for path in report.task.sources)
    assert not storage.list_files(partition.compacted_directory(topic.database, topic.table, report.task.generation))
    assert rows_as_readers_see_them(storage, topic) == before

    again = compact_hour(topic, HOURS[0], storage, run_on(spark), published.extend)

    assert generations_hold_their_sources(storage, topic, again).passed
    assert partition in {m.partition for m in again.manifests}
    assert rows_as_readers_see_them(storage, topic) == before


def landed_manifest(storage: LakeStorage, topic, kafka_hour: KafkaHour, placed: list[tuple[datetime, int]]) -> None:
    """A landed hour whose manifest names a data file of `rows` rows in each placement hour of `placed`."""
    files = tuple(LandedFile(f"{layout.data_directory(topic.database, topic.table, 1, hour)}/{topic.topic}+0+{n:019d}"
                             ".parquet", "data", 0, n, rows, 100, 1, hour_key(hour))
                  for n, (hour, rows) in enumerate(placed))
    ManifestStore(storage, topic.database, topic.table).write(HourManifest(
        topic.database, topic.table, topic.topic, kafka_hour.partition_key,
        (PartitionLanding(0, 0, sum(rows for _, rows in placed), LandingCounts(records=sum(r for _, r in placed),
                                                                                rows=sum(r for _, r in placed))),),
        files, "2026-11-01T16:00:00Z"))


def test_a_compaction_of_an_hour_no_row_is_placed_in_passes_saying_the_manifests_place_none(tmp_path):
    """Given a quiet placement hour whose lateness has passed: the landed hours that feed it placed their rows in other
    hours; when its compaction's check is evaluated, then it passes saying so: the empty row set is unchanged (the demo's
    empty hours of a routed table read FAILED with no reason before)."""
    topic = write_test_topic(tmp_path / "catalog", "e2e.quiet", allowed_lateness_hours=1)
    storage = LakeStorage(str(tmp_path / "lake"))
    quiet = HOURS[0]
    for kafka_hour in (KafkaHour(quiet), KafkaHour(quiet).next()):
        landed_manifest(storage, topic, kafka_hour, [(kafka_hour.start + timedelta(hours=3), 5)])

    outcome = generations_hold_their_sources(storage, topic, CompactionResult(quiet, (), (), (), ()))

    assert outcome.passed, outcome.description
    assert outcome.description.startswith("placement hour 2026-11-01-10:00 of e2e.quiet holds no row, and the landed "
                                          "hours that can place rows in it (2026-11-01-10:00, 2026-11-01-11:00) place "
                                          "none")


def test_a_compaction_that_finds_nothing_where_the_manifests_placed_rows_fails_naming_them(tmp_path):
    """Given landed hours whose manifests place rows in a placement hour whose files are gone; when the compaction that
    found nothing to examine is checked, then it fails (an error), naming the hours and the rows; unless the hour has
    expired, its files removed by retention."""
    topic = write_test_topic(tmp_path / "catalog", "e2e.vanished", allowed_lateness_hours=0)
    storage = LakeStorage(str(tmp_path / "lake"))
    landed_manifest(storage, topic, KafkaHour(HOURS[0]), [(HOURS[0], 7)])

    outcome = generations_hold_their_sources(storage, topic, CompactionResult(HOURS[0], (), (), (), ()))

    assert not outcome.passed and outcome.severity == "error"
    assert outcome.description == ("examined nothing: placement hour 2026-11-01-10:00 of e2e.vanished has no generation "
                                   "and no committed file to compact, but the manifests of landed hours "
                                   "2026-11-01-10:00 place 7 row(s) in it")
    expired = topic.model_copy(update={"retention_days": 1})  # retention removed its files: nothing lost
    assert generations_hold_their_sources(storage, expired, CompactionResult(HOURS[0], (), (), (), ())).passed


@pytest.mark.own_landing
def test_late_data_in_a_compacted_hour_makes_it_due_again(landed, spark, broker):
    topic, traffic, settings, storage = landed
    compact_hour(topic, HOURS[0], storage, run_on(spark), lambda manifests: None)
    tasks, up_to_date = plan_compaction(topic, HOURS[0], storage)
    assert tasks == [] and up_to_date
    # A very late event of hour 10:00 arrives at 15:xx Kafka time, and that raw hour lands.
    late_hour = RAW_HOURS[-1] + timedelta(hours=1)
    v2 = topic.version(2)
    from decimal import Decimal

    from kafka_lake.hours import to_millis
    from kafka_lake.kafka.framing import encode_confluent

    record = {"event_id": 10**6, "user_id": "late-user", "meta": {"occurred_at": "2026-11-01T10:30:00Z"},
              "amount": Decimal("9.99"), "quantity": 3, "tags": ["late"], "channel": "APP"}
    closing = dict(record, event_id=10**6 + 1, meta={"occurred_at": "2026-11-01T16:00:01Z"})
    late = type(traffic)(topic, [
        Produced(0, to_millis(late_hour + timedelta(minutes=5)), b"late", encode_confluent(v2.registry_id, v2.parsed, record), "row", record, 2),
        *[Produced(p, to_millis(late_hour + timedelta(hours=1, seconds=1)), None,
                   encode_confluent(v2.registry_id, v2.parsed, closing), "row", closing, 2) for p in range(PARTITIONS)],
    ])
    produce(broker.bootstrap_servers, late)
    land_on_spark(topic, settings, spark, [late_hour])

    tasks, _ = plan_compaction(topic, HOURS[0], storage)
    assert [t.partition.schema_version for t in tasks] == [2]
    compact_hour(topic, HOURS[0], storage, run_on(spark), lambda manifests: None)

    manifest = read_compaction(storage, topic.database, topic.table, tasks[0].partition)
    assert manifest.generation == 2 and len(manifest.files) == 1
    ids = [r.row["event_id"] for r in read_lake(storage, manifest.location)]
    assert ids.count(10**6) == 1 and len(ids) == len(set(ids))


def test_files_landed_before_and_after_the_headers_column_compact_into_one_schema_with_every_row(tmp_path):
    """Given a placement hour holding a file in an older release's form (non-nullable fields, no `_kafka_headers`)
    and one in today's, as an hour landed before an upgrade and its late events after it leave it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafka_lake.kafka.records import KAFKA_HEADERS_TYPE
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.lake.table_partition import TablePartition
    from kafka_lake.schemas.landed_schema import LandedSchema
    from kafka_lake.upkeep.compaction import CompactionTask
    from tests.landing_fixtures import write_test_topic

    topic = write_test_topic(tmp_path / "catalog", "e2e.orders.upgrade")
    storage = LakeStorage(str(tmp_path / "lake"))
    partition = TablePartition(1, HOURS[0])
    kafka = {"_kafka_partition": pa.array([0], pa.int32()), "_kafka_offset": pa.array([0], pa.int64())}
    old = pa.table({"id": pa.array([1], pa.int64()), **kafka},
                   schema=pa.schema([pa.field(name, pa.int64() if name != "_kafka_partition" else pa.int32(), False)
                                     for name in ("id", "_kafka_partition", "_kafka_offset")]))
    new = pa.table({"id": pa.array([2], pa.int64()), "_kafka_partition": pa.array([0], pa.int32()),
                    "_kafka_offset": pa.array([1], pa.int64()),
                    "_kafka_headers": pa.array([[{"key": "k", "value": b"v"}]], KAFKA_HEADERS_TYPE)})
    sources = []
    for name, table in (("old", old), ("new", new)):
        path = f"{partition.raw_directory(topic.database, topic.table)}/{name}.parquet"
        with storage.open_output(path) as stream:
            pq.write_table(table, stream)
        sources.append(path)

    report = compact_partition(CompactionTask(topic, partition, 1, tuple(sources), storage.root, 1 << 20))

    [written] = report.files
    rows = pq.read_table(storage.full_path(written.path), filesystem=storage.filesystem)
    assert rows.column_names[:2] == [f.name for f in LandedSchema(topic).value_fields][:2], "led by the table's columns"
    rows = rows.select(["id", "_kafka_partition", "_kafka_offset", "_kafka_headers"])
    assert rows.to_pylist() == [{"id": 1, "_kafka_partition": 0, "_kafka_offset": 0, "_kafka_headers": None},
                                {"id": 2, "_kafka_partition": 0, "_kafka_offset": 1,
                                 "_kafka_headers": [{"key": "k", "value": b"v"}]}]
    assert all(field.nullable for field in rows.schema)


def test_placement_hours_at_the_ends_of_the_years_a_datetime_holds_plan_without_overflowing(tmp_path):
    """Event times of 9999-12-31 (a producer's "never") and 0001-01-01 land in those hours; the hours that feed
    them, the sensor's due hours and the erasure's committed files must not run past the ends."""
    from datetime import datetime, timezone

    from kafka_lake.automation import due_for_compaction
    from kafka_lake.hours import KafkaHour
    from kafka_lake.lake.manifests import ManifestStore
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.upkeep.compaction import committed_raw_files, raw_hours_that_feed
    from tests.landing_fixtures import write_test_topic

    topic = write_test_topic(tmp_path / "catalog", "e2e.orders.ends", allowed_lateness_hours=3)
    last, first = datetime(9999, 12, 31, 23, tzinfo=timezone.utc), datetime(1, 1, 1, tzinfo=timezone.utc)
    storage = LakeStorage(str(tmp_path / "lake"))

    assert raw_hours_that_feed(topic, last) == [KafkaHour(last)]
    assert len(raw_hours_that_feed(topic, first)) == 4
    landed = KafkaHour(HOURS[0])
    assert due_for_compaction(topic, landed, [KafkaHour(last), KafkaHour(first)], lambda hour: hour == landed) == []
    for hour in (first, last):
        assert committed_raw_files(storage, topic, ManifestStore(storage, "e2e", "orders"), hour) == set()


def test_files_landed_with_debezium_times_as_times_of_day_compact_with_those_landed_as_counts(tmp_path):
    """Given a placement hour holding a file landed when Debezium's MicroTime landed as a time of day (Parquet TIME, at
    the top level and inside the change's row) and one landed since, as a count of microseconds (which also holds
    MySQL's TIME outside one day), when it compacts, then both files' rows are in the generation, every value a count
    of microseconds. Before the times became counts, the two files' schemas did not unify."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.lake.table_partition import TablePartition
    from kafka_lake.upkeep.compaction import CompactionTask
    from tests.test_decoding import write_topic

    row = {"type": "record", "name": "Row", "fields": [
        {"name": "opens", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTime"}}]}
    schema = {"type": "record", "name": "Shift", "fields": [
        {"name": "opens", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTime"}},
        {"name": "after", "type": ["null", row], "default": None}]}
    topic = write_topic(tmp_path, [schema], time_partitioning={"source": "kafka_time"})
    storage = LakeStorage(str(tmp_path / "lake"))
    partition = TablePartition(1, HOURS[0])
    kafka = {"_kafka_partition": pa.array([0], pa.int32())}
    old = pa.table({"opens": pa.array([5], pa.time64("us")),
                    "after": pa.array([{"opens": 5}], pa.struct([("opens", pa.time64("us"))])),
                    **kafka, "_kafka_offset": pa.array([0], pa.int64())})
    late = 27 * 3600_000_000
    new = pa.table({"opens": pa.array([late], pa.int64()), "after": pa.array([{"opens": late}], pa.struct([("opens", pa.int64())])),
                    **kafka, "_kafka_offset": pa.array([1], pa.int64())})
    sources = []
    for name, table in (("old", old), ("new", new)):
        path = f"{partition.raw_directory(topic.database, topic.table)}/{name}.parquet"
        with storage.open_output(path) as stream:
            pq.write_table(table, stream)
        sources.append(path)

    report = compact_partition(CompactionTask(topic, partition, 1, tuple(sources), storage.root, 1 << 20))

    [written] = report.files
    rows = pq.read_table(storage.full_path(written.path), filesystem=storage.filesystem).select(["opens", "after"])
    assert rows.schema.field("opens").type == pa.int64()
    assert rows.to_pylist() == [{"opens": 5, "after": {"opens": 5}}, {"opens": late, "after": {"opens": late}}]
