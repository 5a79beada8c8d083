"""Iceberg commit cost: seconds to commit one landed hour to a table already holding 1, 100, 1,000 … hours, and
what adding landed files as they lie costs against rewriting them as Iceberg-written files.

`python -m bench.iceberg_commits --hours 1000` (local lake, embedded SQLite catalog; `--s3` starts the SeaweedFS S3
server and uses it). Each hour's files are written by the landing's Parquet writer (`ParquetOutput`) into their
placement folders, four Kafka partitions, each with its hour and a late hour, and committed with
`commit_landed_hour`, as the landing commit will.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from pyiceberg.table.snapshots import Operation

from kafka_lake.hours import KafkaHour
from kafka_lake.lake import layout
from kafka_lake.lake.manifests import HourManifest, LandedFile, PartitionLanding
from kafka_lake.lake.parquet_output import ParquetOutput
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.schemas.arrow_mapping import arrow_schema_for
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog, table_location
from kafka_lake.tables.iceberg.commits import commit_landed_hour, landed_hour_matches_table
from kafka_lake.tables.iceberg.files import commit_files, landed_data_files, read_rows, write_rows
from kafka_lake.tables.iceberg.maintenance import compact_placement_hour, expire_snapshots
from kafka_lake.tables.iceberg.schema import ensure_table
from kafka_lake.topics.loader import load_catalog

REPO = Path(__file__).resolve().parent.parent
FIRST_HOUR = datetime(2026, 1, 1, tzinfo=timezone.utc)
PARTITIONS = 4


def column(kind: pa.DataType, rows: int, start: int) -> pa.Array:
    """Plausible values of any landed type: distinct numbers and texts, empty maps and lists."""
    if pa.types.is_struct(kind):
        return pa.StructArray.from_arrays([column(kind.field(i).type, rows, start) for i in range(kind.num_fields)],
                                          fields=list(kind))
    if pa.types.is_map(kind):
        return pa.array([[]] * rows, kind)
    if pa.types.is_list(kind):
        return pa.array([[]] * rows, kind)
    if pa.types.is_timestamp(kind):
        return pa.array([FIRST_HOUR + timedelta(milliseconds=start + i) for i in range(rows)], kind)
    if pa.types.is_integer(kind):
        return pa.array(range(start, start + rows), kind)
    if pa.types.is_binary(kind):
        return pa.array([b"k%d" % (start + i) for i in range(rows)], kind)
    return pa.array([f"value-{start + i}" for i in range(rows)], pa.string()).cast(kind)


def landed_hour(storage: LakeStorage, topic, schema: pa.Schema, index: int, rows_per_file: int,
                next_offsets: dict[int, int]) -> HourManifest:
    """One Kafka hour's files: per partition, a file in its own placement hour and one of late events an hour back."""
    hour = FIRST_HOUR + timedelta(hours=index)
    files, partitions = [], []
    for partition in range(PARTITIONS):
        start = next_offsets.get(partition, 0)
        offset = start
        for placement, count in ((hour, rows_per_file), (hour - timedelta(hours=1), max(1, rows_per_file // 10))):
            values = {f.name: column(f.type, count, offset) for f in schema}
            values["_kafka_partition"] = pa.array([partition] * count, pa.int32())
            values["_kafka_topic"] = pa.array([topic.topic] * count)
            rows = pa.table(values, schema=schema)
            path = f"{layout.data_directory(topic.database, topic.table, 2, placement)}/" \
                   f"{layout.data_file_name(topic.topic, partition, offset)}"
            output = ParquetOutput(storage, path, schema)
            output.write(rows)
            size = output.close()
            files.append(LandedFile(path, "data", partition, offset, count, size, 2, layout.hour_directory(placement)))
            offset += count
        next_offsets[partition] = offset
        partitions.append(PartitionLanding(partition, start, offset, records=offset - start, rows=offset - start))
    return HourManifest(topic.database, topic.table, topic.topic, KafkaHour(hour).partition_key, tuple(partitions),
                        tuple(files), landed_at=datetime.now(timezone.utc).isoformat(timespec="microseconds"),
                        run_id=uuid.uuid4().hex)


def timed(action) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=int, default=1000)
    parser.add_argument("--rows-per-file", type=int, default=2000)
    parser.add_argument("--rewrite-rows", type=int, default=200_000, help="rows of the hour the two options commit")
    parser.add_argument("--s3", action="store_true", help="a SeaweedFS S3 lake instead of a local one")
    parser.add_argument("--keep-snapshots", type=int, default=0,
                        help="expire older snapshots once a day of hours (24 commits), as retention would; 0: keep all")
    arguments = parser.parse_args()
    checkpoints = sorted({1, 10, 100, 1000, arguments.hours} & set(range(1, arguments.hours + 1)))
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as services:
        if arguments.s3:
            from dev_services.seaweedfs import SeaweedS3

            server = services.enter_context(SeaweedS3(data_dir=Path(scratch) / "seaweedfs"))
            server.create_bucket("lake")
            os.environ.update(server.env())
            lake_root = f"s3://lake/{uuid.uuid4().hex[:8]}"
        else:
            lake_root = f"{scratch}/lake"
        run(lake_root, f"sqlite:///{scratch}/catalog.db", arguments, checkpoints)


def run(lake_root: str, catalog_uri: str, arguments, checkpoints: list[int]) -> None:
    storage = LakeStorage(lake_root)
    topic = load_catalog(REPO / "schema_catalog").by_name("shop", "page_views").model_copy(update=dict(topic="shop.page_views.bench"))
    schema = arrow_schema_for(topic.version(2), topic.pii_fields)
    catalog = open_catalog(IcebergCatalogConfig(lake_root, sql_uri=catalog_uri))
    table = ensure_table(catalog, topic, table_location(storage, topic.database, topic.table))
    offsets: dict[int, int] = {}
    kept = f", snapshots older than the newest {arguments.keep_snapshots} expired daily" if arguments.keep_snapshots else ""
    print(f"lake {lake_root}{kept}: {arguments.hours} hours, {PARTITIONS * 2} files and "
          f"{PARTITIONS * (arguments.rows_per_file + arguments.rows_per_file // 10)} rows an hour")
    print(f"{'hours in table':>14} | {'append s':>8} | {'median of last 10 s':>19} | {'re-land s':>9} | "
          f"{'check s':>7} | {'compact s':>9} | metadata.json KiB")
    recent: list[float] = []
    for index in range(arguments.hours):
        manifest = landed_hour(storage, topic, schema, index, arguments.rows_per_file, offsets)
        seconds, _ = timed(lambda: commit_landed_hour(table.refresh(), storage, manifest, None))
        recent = (recent + [seconds])[-10:]
        if arguments.keep_snapshots and (index + 1) % 24 == 0:
            kept = sorted(s.timestamp_ms for s in table.refresh().snapshots())[-arguments.keep_snapshots:]
            expire_snapshots(table, storage, datetime.fromtimestamp(kept[0] / 1000, tz=timezone.utc))
        if index + 1 in checkpoints:
            again = replace(manifest, landed_at=datetime.now(timezone.utc).isoformat(timespec="microseconds"))
            reland, _ = timed(lambda: commit_landed_hour(table.refresh(), storage, again, manifest))
            check, outcome = timed(lambda: landed_hour_matches_table(table.refresh(), storage, again))
            assert outcome.passed, outcome.description
            placement = TablePartition(2, FIRST_HOUR + timedelta(hours=index - 1)) if index else None
            compact = timed(lambda: compact_placement_hour(table.refresh(), storage, placement))[0] if placement else float("nan")
            metadata_kib = storage.filesystem.get_file_info(table.refresh().metadata_location.split("://", 1)[-1]
                                                            if storage.is_s3 else table.metadata_location[len("file://"):]).size / 1024
            print(f"{index + 1:>14} | {seconds:>8.3f} | {statistics.median(recent):>19.3f} | {reland:>9.3f} | "
                  f"{check:>7.3f} | {compact:>9.3f} | {metadata_kib:.0f}", flush=True)
    compare_options(catalog, storage, topic, schema, arguments.rewrite_rows)


def compare_options(catalog, storage: LakeStorage, topic, schema: pa.Schema, rows: int) -> None:
    """One hour of `rows` rows committed two ways: landed files added as they lie (footers read), or read and
    rewritten by pyiceberg (field ids and placement columns in the files)."""
    for name, rewrite in (("add as they lie", False), ("rewrite", True)):
        other = topic.model_copy(update=dict(table=f"page_views_{'rewritten' if rewrite else 'added'}"))
        table = ensure_table(catalog, other, table_location(storage, other.database, other.table))
        manifest = landed_hour(storage, other, schema, 0, rows // PARTITIONS, {})
        if rewrite:
            def commit():
                added = landed_data_files(table, storage, manifest.files)
                staged = commit_files(table, Operation.APPEND, [], added, {}, conflicts=_nothing())  # to read them back
                rewritten = write_rows(staged, storage, read_rows(staged, added))
                return commit_files(staged, Operation.REPLACE, added, rewritten, {}, conflicts=_nothing())
        else:
            def commit():
                return commit_landed_hour(table, storage, manifest, None)
        seconds, _ = timed(commit)
        landed_bytes = sum(f.bytes for f in manifest.files)
        print(f"{name}: {sum(f.rows for f in manifest.files):,} rows, {landed_bytes / 2**20:.1f} MiB landed: {seconds:.2f} s")


def _nothing():
    from pyiceberg.expressions import AlwaysFalse
    return AlwaysFalse()


if __name__ == "__main__":
    main()
