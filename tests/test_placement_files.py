"""A landing task's open files (`PlacementFiles`), on a real local lake and on the S3 server: large row groups
however the batches cut the rows, bounded memory and open files, dictionaries only where they pay."""

from __future__ import annotations

import gc
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from kafka_lake.lake.parquet_output import dictionary_columns, statistics_columns
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.slice_task import PlacementFiles
from kafka_lake.topics.loader import load_catalog

HOUR = datetime(2026, 11, 1, 13, tzinfo=timezone.utc)


@pytest.fixture
def storage(lake_root):
    return LakeStorage(lake_root)


@pytest.fixture(scope="module")
def topic():
    return load_catalog("schema_catalog").by_name("shop", "page_views")


def rows(first_offset: int, count: int) -> pa.Table:
    offsets = range(first_offset, first_offset + count)
    return pa.table({
        "view_id": [f"view-{offset:012d}" for offset in offsets],
        "country": [("fr", "de", "es")[offset % 3] for offset in offsets],
        "client": [{"ip": f"10.0.{offset // 256 % 256}.{offset % 256}", "agent": "curl"} for offset in offsets],
        "_kafka_offset": pa.array(offsets, pa.int64()),
    })


def write(files: PlacementFiles, placement: str, table: pa.Table) -> None:
    files.write(("data", placement), f"lake/{placement}", table, 1, HOUR)


def read(storage: LakeStorage, path: str) -> pq.ParquetFile:
    return pq.ParquetFile(pa.BufferReader(storage.read_bytes(path)))


def test_small_batches_become_row_groups_of_the_configured_size_in_log_order(storage, topic):
    files = PlacementFiles(storage, topic, 0, max_open=4, row_group_rows=4096)
    for first in range(0, 20_000, 1000):
        write(files, "main", rows(first, 1000))
    [landed] = files.close_all()

    parquet = read(storage, landed.path)
    sizes = [parquet.metadata.row_group(index).num_rows for index in range(parquet.metadata.num_row_groups)]
    assert sizes == [5000, 5000, 5000, 5000]  # flushed at the first batch to reach 4,096 rows
    assert (landed.rows, landed.first_offset) == (20_000, 0)
    assert parquet.read().column("_kafka_offset").to_pylist() == list(range(20_000))


def test_a_placement_getting_a_few_rows_per_batch_is_written_once_at_close(storage, topic):
    files = PlacementFiles(storage, topic, 0, max_open=4, row_group_rows=100_000)
    for first in range(0, 10_000, 1000):
        write(files, "main", rows(first, 990))
        write(files, "late", rows(first + 990, 10))
    landed = {file.path.split("/")[1]: file for file in files.close_all()}

    assert read(storage, landed["late"].path).metadata.num_row_groups == 1
    assert read(storage, landed["late"].path).read().num_rows == 100


def test_held_rows_are_written_out_once_the_buffer_is_full(storage, topic):
    batch = rows(0, 1000)
    files = PlacementFiles(storage, topic, 0, max_open=8, row_group_rows=1_000_000, buffer_bytes=int(batch.nbytes * 2.5))
    for first in range(0, 6000, 1000):
        write(files, f"p{first // 1000 % 2}", rows(first, 1000))
    landed = files.close_all()

    groups = [read(storage, file.path).metadata.num_row_groups for file in landed]
    assert sum(groups) > len(landed), "the buffer forced row groups out before the files closed"
    assert sum(file.rows for file in landed) == 6000


def test_a_few_rows_sliced_from_large_tables_count_the_memory_they_hold(storage, topic):
    # A slice keeps its whole table's buffers alive: ten rows of a 5,000-row batch hold the batch.
    files = PlacementFiles(storage, topic, 0, max_open=8, row_group_rows=1_000_000,
                           buffer_bytes=int(rows(0, 5000).nbytes * 2.5))
    for first in range(0, 30_000, 5000):
        write(files, "late", rows(first, 5000).slice(0, 10))
    landed = files.close_all()

    assert [file.rows for file in landed] == [60]
    assert read(storage, landed[0].path).metadata.num_row_groups > 1, "the held slices were written out early"


def test_at_most_max_open_files_and_the_least_recently_used_closes_first(storage, topic):
    files = PlacementFiles(storage, topic, 0, max_open=2)
    write(files, "a", rows(0, 10))
    write(files, "b", rows(10, 10))
    write(files, "a", rows(20, 10))
    write(files, "c", rows(30, 10))  # b is the least recently used

    assert [file.path.split("/")[1] for file in files.closed] == ["b"]
    assert storage.exists(files.closed[0].path)
    landed = files.close_all()
    assert sorted((file.path.split("/")[1], file.rows) for file in landed) == [("a", 20), ("b", 10), ("c", 10)]


def test_an_aborted_task_leaves_no_file(storage, topic):
    files = PlacementFiles(storage, topic, 0, max_open=4, row_group_rows=1000)
    write(files, "a", rows(0, 1500))  # a row group is already written
    write(files, "b", rows(1500, 10))  # held only
    files.abort()

    # Not even a hidden temporary: on S3 an unfinished upload is still sent once its stream is collected.
    gc.collect()
    selector = pafs.FileSelector(storage.full_path("lake"), recursive=True, allow_not_found=True)
    assert [info.path for info in storage.filesystem.get_file_info(selector) if info.type == pafs.FileType.File] == []


def test_dictionaries_only_for_columns_whose_values_repeat(storage, topic):
    table = rows(0, 5000)
    assert dictionary_columns(table) == ["country", "client.agent"]

    files = PlacementFiles(storage, topic, 0, max_open=4)
    write(files, "main", table)
    [landed] = files.close_all()
    chunks = read(storage, landed.path).metadata.row_group(0)
    encodings = {chunks.column(i).path_in_schema: chunks.column(i).encodings for i in range(chunks.num_columns)}
    assert "RLE_DICTIONARY" in encodings["country"] and "RLE_DICTIONARY" in encodings["client.agent"]
    assert "RLE_DICTIONARY" not in encodings["view_id"] and "RLE_DICTIONARY" not in encodings["client.ip"]
    assert "RLE_DICTIONARY" not in encodings["_kafka_offset"]


def test_statistics_only_for_columns_whose_min_and_max_can_prune():
    table = rows(0, 100).append_column("seen", pa.array([[offset] for offset in range(100)], pa.list_(pa.int64())))
    assert statistics_columns(table.schema) == ["_kafka_offset", "seen.list.element"]


def test_landing_files_keep_statistics_for_numbers_and_times_only(storage, topic):
    files = PlacementFiles(storage, topic, 0, max_open=4)
    write(files, "main", rows(100, 500))
    [landed] = files.close_all()

    chunks = read(storage, landed.path).metadata.row_group(0)
    stats = {chunks.column(i).path_in_schema: chunks.column(i).statistics for i in range(chunks.num_columns)}
    assert (stats["_kafka_offset"].min, stats["_kafka_offset"].max) == (100, 599)
    assert stats["view_id"] is None and stats["client.ip"] is None


def test_list_and_map_items_keep_their_dictionary():
    table = pa.table({
        "tags": pa.array([[f"t{i}"] for i in range(100)]),
        "attributes": pa.array([[("k", f"v{i}")] for i in range(100)], pa.map_(pa.string(), pa.string())),
    })
    assert dictionary_columns(table) == ["tags.list.element", "attributes.key_value.key", "attributes.key_value.value"]
