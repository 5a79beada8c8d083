"""Copy-on-write by key range, on a real Iceberg table (the embedded SQL catalog of a local lake): a merge reads and
rewrites only the files whose key ranges hold its changes, keeps the ranges apart, never lets an older change replace
a newer row, and the check finds a key held twice."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import AlwaysFalse
from pyiceberg.table.snapshots import Operation

from kafka_lake.current import key_ranges
from kafka_lake.current.apply import current_state_check
from kafka_lake.current.changes import CHANGE, DELETES, SOURCE, with_source
from kafka_lake.current.key_ranges import merge_by_key_range, range_files
from kafka_lake.current.state_table import ensure_current_table
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
from kafka_lake.tables.iceberg.files import commit_files, rows_schema, unpartitioned_data_file
from tests.change_topics import write_change_topic

ROWS_PER_FILE = 500


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A current-state table whose files hold about 500 rows each, so a few thousand keys make several files."""
    topic = write_change_topic(tmp_path / "catalog", "e2e.customers.merge")
    storage = LakeStorage(str(tmp_path / "lake"))
    table = ensure_current_table(open_catalog(IcebergCatalogConfig(storage.root)), storage, topic)
    sample = _changes(table, list(range(1000)), 0)
    monkeypatch.setattr(key_ranges, "FILE_BYTES", ROWS_PER_FILE * sample.nbytes // sample.num_rows)
    return topic, storage, table


def _changes(table, keys: list[int], first_offset: int, deletes: bool = False, name: str = "n") -> pa.Table:
    count = len(keys)
    schema = rows_schema(table)
    columns = {"id": pa.array(keys, pa.int32()), "first_name": pa.array([f"{name}{k}" for k in keys]),
               "email": pa.nulls(count, pa.string()), "phone": pa.nulls(count, pa.string()),
               "_kafka_key_id": pa.array(keys, pa.int32()), "_kafka_partition": pa.array([0] * count, pa.int32()),
               "_kafka_offset": pa.array(range(first_offset, first_offset + count), pa.int64()),
               "_kafka_timestamp": pa.array([datetime(2026, 11, 1, tzinfo=timezone.utc)] * count, schema.field("_kafka_timestamp").type)}
    rows = pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)
    return with_source(rows, CHANGE, deletes)


def _merge(topic, storage, table, changes):
    return merge_by_key_range(table.refresh(), storage, topic, changes, {"kafka-lake.action": "merge"})


def _rows(table) -> dict[int, str]:
    return {row["_kafka_key_id"]: row["first_name"] for row in table.refresh().scan().to_arrow().to_pylist()}


def test_a_merge_rewrites_only_the_files_whose_ranges_hold_its_keys(state):
    topic, storage, table = state
    loaded = _merge(topic, storage, table, _changes(table, list(range(1, 3001)), 0))
    files = range_files(table.refresh(), "_kafka_key_id")
    assert len(files) >= 5 and all(a.high < b.low for a, b in zip(files, files[1:])), [(f.low, f.high) for f in files]
    assert loaded.inserts == 3000

    updated = _merge(topic, storage, table, _changes(table, list(range(10, 21)), 5000, name="u"))
    appended = _merge(topic, storage, table, _changes(table, [9000, 9001], 6000, name="a"))

    assert (updated.updates, len(updated.files_removed)) == (11, 1)
    assert updated.files_removed == (files[0].data_file.file_path,) and updated.bytes_read == files[0].data_file.file_size_in_bytes
    assert (appended.inserts, appended.files_removed) == (2, (files[-1].data_file.file_path,))
    after = range_files(table.refresh(), "_kafka_key_id")
    assert {f.data_file.file_path for f in files[1:-1]} <= {f.data_file.file_path for f in after}, "untouched files stay"
    rows = _rows(table)
    assert rows[15] == "u15" and rows[16] == "u16" and rows[9001] == "a9001" and rows[500] == "n500" and len(rows) == 3002


def test_an_older_change_leaves_the_newer_row_and_commits_nothing(state):
    topic, storage, table = state
    _merge(topic, storage, table, _changes(table, [1, 2, 3], 100, name="new"))

    stale = _merge(topic, storage, table, _changes(table, [1, 2], 50, name="old"))
    deleted_late = _merge(topic, storage, table, _changes(table, [3], 40, deletes=True))

    assert stale.snapshot_id is None and deleted_late.snapshot_id is None
    assert _rows(table) == {1: "new1", 2: "new2", 3: "new3"}


def test_deleting_every_key_of_a_file_removes_it_and_a_file_left_small_takes_in_a_small_neighbour(state):
    topic, storage, table = state
    _merge(topic, storage, table, _changes(table, list(range(1, 3001)), 0))
    files = range_files(table.refresh(), "_kafka_key_id")

    emptied = _merge(topic, storage, table, _changes(table, list(range(files[0].low, files[0].high + 1)), 9000, deletes=True))
    _merge(topic, storage, table, _changes(table, list(range(files[2].low, files[2].high - 9)), 20000, deletes=True))
    joined = _merge(topic, storage, table, _changes(table, list(range(files[1].low, files[1].high - 9)), 30000, deletes=True))

    assert emptied.deletes == files[0].data_file.record_count and not emptied.files_added
    assert (len(joined.files_removed), len(joined.files_added)) == (2, 1), joined
    after = range_files(table.refresh(), "_kafka_key_id")
    assert (after[0].low, after[0].high) == (files[1].high - 9, files[2].high)
    assert after[0].data_file.record_count == 20 and len(after) == len(files) - 2, "one emptied, two joined"
    assert all(a.high < b.low for a, b in zip(after, after[1:]))


def test_the_check_fails_when_a_file_holds_a_key_another_file_holds(state):
    topic, storage, table = state
    _merge(topic, storage, table, _changes(table, list(range(1, 1200)), 0))
    hour = KafkaHour(datetime(2026, 11, 1, 10, tzinfo=timezone.utc))
    assert current_state_check(topic, storage, table.refresh(), hour).passed

    rogue = "e2e/customers_current/data/rogue.parquet"
    with storage.open_output(rogue) as stream:
        pq.write_table(_changes(table, [700], 99999).drop_columns([SOURCE, DELETES]), stream)
    commit_files(table.refresh(), Operation.APPEND, [], [unpartitioned_data_file(table.refresh(), storage, rogue)], {},
                 AlwaysFalse())

    outcome = current_state_check(topic, storage, table.refresh(), hour)
    assert not outcome.passed and "overlapping key ranges" in outcome.description, outcome.description


def test_a_schema_version_added_later_adds_its_column_and_the_rows_set_before_it_hold_null(tmp_path):
    """Given a table made from schema version 1 alone, holding rows; when the catalog gains version 2 (a `phone`), then
    the table gains the column, before the key's, the earlier rows read null in it, and a change of version 2 sets it."""
    storage = LakeStorage(str(tmp_path / "lake"))
    catalog = open_catalog(IcebergCatalogConfig(storage.root))
    only_v1 = write_change_topic(tmp_path / "v1", "e2e.customers.evolving", versions=1)
    table = ensure_current_table(catalog, storage, only_v1)
    assert "phone" not in rows_schema(table).names
    old_rows = rows_schema(table)
    merge_by_key_range(table, storage, only_v1, with_source(pa.Table.from_pylist([
        {"id": 1, "first_name": "ann", "email": None, "_kafka_key_id": 1, "_kafka_partition": 0, "_kafka_offset": 0,
         "_kafka_timestamp": datetime(2026, 11, 1, tzinfo=timezone.utc)}], schema=old_rows), CHANGE, False), {})

    both = write_change_topic(tmp_path / "v2", "e2e.customers.evolving")
    evolved = ensure_current_table(catalog, storage, both)
    merge_by_key_range(evolved, storage, both, _changes(evolved, [2], 1), {})

    assert [f.name for f in evolved.schema().fields][:5] == ["id", "first_name", "email", "phone", "_kafka_key_id"]
    rows = {row["_kafka_key_id"]: row for row in evolved.refresh().scan().to_arrow().to_pylist()}
    assert rows[1]["phone"] is None and rows[1]["first_name"] == "ann" and rows[2]["first_name"] == "n2"
