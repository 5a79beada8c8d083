"""`make bench-current-state`: what applying an hour of changes to a current-state table costs as the table grows, in
one run: a table of 1M rows and one of 10M, each merged with an hour of 100k changes, and each rebuilt from raw.

The change topic is the sample catalog's `crm/customers` (Debezium's envelope, key `customer_id`). Its raw hours are
written as a landing writes them (Parquet files in their placement folder, the hour's manifest), without a broker:
what is measured is the application of landed hours (`kafka_lake.current.apply`), into the embedded Iceberg catalog of
a local lake. A table of N rows is built by applying N/1M hours of 1M new customers each; then two hours of 100k
changes are applied to it, measured:
- clustered: 40k new customers, 50k updates and 10k deletes of the 200k customers created last (the rows a shop
  changes are mostly its recent ones),
- scattered: 50k updates and 10k deletes drawn from every customer, 40k new ones.
"Rebuild" is every raw hour applied in order to an empty table. Bytes read are the data files an hour's merge
rewrote, bytes written the files it wrote; CPU is this process's user and system time, the steadier measure on a
machine shared with other work (the ratio to the smallest table is given for both).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.hours import KafkaHour, hour_key
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import HourManifest, LandedFile, ManifestStore, PartitionLanding
from kafka_lake.lake.parquet_output import ParquetOutput
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import load_topic

REPO = Path(__file__).resolve().parent.parent
FIRST_HOUR = datetime(2026, 11, 1, tzinfo=timezone.utc)
LOAD_ROWS = 1_000_000  # new customers per building hour
HOT_ROWS = 200_000  # the customers created last, which clustered changes touch


@dataclass
class Applied:
    label: str
    table_rows: int
    seconds: float
    cpu_seconds: float
    files_rewritten: int
    bytes_read: int
    bytes_written: int
    inserts: int
    updates: int
    deletes: int


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class RawHours:
    """Raw hours of the change topic written into a lake as a landing leaves them: one Kafka partition, one file."""

    def __init__(self, topic: TableSpec, storage: LakeStorage, seed: int):
        from kafka_lake.decoding.key_columns import trailing_columns
        from kafka_lake.schemas.arrow_mapping import arrow_schema_for

        self.topic, self.storage = topic, storage
        self.version = topic.schema_versions[-1]
        self.schema = pa.schema([*arrow_schema_for(self.version, topic.pii_fields, topic.columns_by_field),
                                 *trailing_columns(topic)])
        self.hours: list[KafkaHour] = []
        self.next_offset = 0
        self.next_customer = 1
        self.rng = np.random.default_rng(seed)

    def write_hour(self, customers: np.ndarray, operations: np.ndarray) -> KafkaHour:
        """One Kafka hour of changes, in order: `operations` c, u or d for each of `customers`."""
        hour = KafkaHour(FIRST_HOUR + timedelta(hours=len(self.hours)))
        rows = self._rows(hour, customers, operations)
        placement = TablePartition(self.version.version, hour.start)
        name = f"{self.topic.topic}+0+{self.next_offset:019d}.parquet"
        path = f"{placement.raw_directory(self.topic.database, self.topic.table)}/{name}"
        output = ParquetOutput(self.storage, path, rows.schema)
        output.write(rows, row_group_size=128 * 1024)
        size = output.close()
        end = self.next_offset + rows.num_rows
        counts = LandingCounts(records=rows.num_rows, rows=rows.num_rows)
        manifest = HourManifest(
            self.topic.database, self.topic.table, self.topic.topic, hour.partition_key,
            (PartitionLanding(0, self.next_offset, end, counts),),
            (LandedFile(path, "data", 0, self.next_offset, rows.num_rows, size, self.version.version, hour_key(hour.start)),),
            landed_at=datetime.now(timezone.utc).isoformat(), run_id="bench")
        ManifestStore(self.storage, self.topic.database, self.topic.table).write(manifest)
        self.next_offset = end
        self.hours.append(hour)
        return hour

    def new_customers(self, count: int) -> np.ndarray:
        first, self.next_customer = self.next_customer, self.next_customer + count
        return np.arange(first, first + count, dtype=np.int64)

    def _rows(self, hour: KafkaHour, customers: np.ndarray, operations: np.ndarray) -> pa.Table:
        count = len(customers)
        ids = pa.array(customers)
        text = pc.cast(ids, pa.string())
        stamps_ms = hour.start_ms + np.sort(self.rng.integers(0, 3_599_000, count))
        tiers = pa.array(np.array(["bronze", "silver", "gold"])[self.rng.integers(0, 3, count)])
        after = pa.StructArray.from_arrays(
            [ids, pc.binary_join_element_wise("customer", text, "@example.com", ""),
             pc.binary_join_element_wise("Customer", text, " "), tiers,
             pa.array(np.array(["DE", "SE", "FR", "NL"])[self.rng.integers(0, 4, count)]),
             pa.array(stamps_ms * 1000, pa.timestamp("us", tz="UTC")),
             pa.array(self.rng.integers(0, 2, count).astype(bool))],
            fields=list(self.schema.field("after").type), mask=pa.array(operations == "d"))
        source = pa.StructArray.from_arrays(
            [pa.array(["postgresql"] * count), pa.array(["crm"] * count), pa.array(["customers"] * count),
             pa.array(stamps_ms - 100), pa.array(stamps_ms)], fields=list(self.schema.field("source").type))
        offsets = np.arange(self.next_offset, self.next_offset + count, dtype=np.int64)
        columns = {
            "before": pa.nulls(count, self.schema.field("before").type), "after": after, "source": source,
            "op": pa.array(operations), "ts_ms": pa.array(stamps_ms),
            "_kafka_topic": pa.array([self.topic.topic] * count), "_kafka_partition": pa.array(np.zeros(count, np.int32)),
            "_kafka_offset": pa.array(offsets), "_kafka_timestamp": pa.array(stamps_ms, pa.timestamp("ms", tz="UTC")),
            "_kafka_key": pc.cast(text, pa.binary()), "_kafka_headers": pa.nulls(count, self.schema.field("_kafka_headers").type),
            "_kafka_key_customer_id": ids, "_kafka_tombstone": pa.array(np.zeros(count, dtype=bool)),
        }
        return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in self.schema], schema=self.schema)


def change_hour(raw: RawHours, changes: int, scattered: bool) -> tuple[np.ndarray, np.ndarray]:
    """40% new customers, 50% updates, 10% deletes: of the customers created last, or of all of them."""
    rng = raw.rng
    existing = raw.next_customer - 1
    touched = int(changes * 0.6)
    pool_start = 1 if scattered else max(1, existing - HOT_ROWS + 1)
    old = rng.choice(np.arange(pool_start, existing + 1, dtype=np.int64), size=touched, replace=False)
    operations = np.where(np.arange(touched) < int(changes * 0.5), "u", "d")
    customers = np.concatenate([old, raw.new_customers(changes - touched)])
    operations = np.concatenate([operations, np.full(changes - touched, "c")])
    order = rng.permutation(len(customers))
    return customers[order], operations[order]


def bench_size(table_rows: int, changes: int, work_dir: Path) -> list[Applied]:
    from kafka_lake.current.apply import apply_landed_hours
    from kafka_lake.tables.formats import table_format
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
    from kafka_lake.tables.table_format import TableAccess

    lake = work_dir / f"lake-{table_rows}"
    storage = LakeStorage(str(lake))
    topic = load_topic(REPO / "schema_catalog" / "crm" / "customers" / "topic.yaml")
    raw = RawHours(topic, storage, seed=table_rows)
    per_hour = min(LOAD_ROWS, table_rows)
    print(f"{table_rows:,} rows: writing {table_rows // per_hour} raw hour(s) of {per_hour:,} new customers and two of "
          f"{changes:,} changes …", flush=True)
    for _ in range(table_rows // per_hour):
        raw.write_hour(raw.new_customers(per_hour), np.full(per_hour, "c"))
    labels = {raw.write_hour(*change_hour(raw, changes, scattered=False)): "clustered",
              raw.write_hour(*change_hour(raw, changes, scattered=True)): "scattered"}
    config = IcebergCatalogConfig(str(lake))
    catalog = open_catalog(config)
    formats = table_format(topic, TableAccess(storage, iceberg_catalog=config))
    results = []
    rebuild_started, rebuild_cpu = time.monotonic(), cpu_seconds()
    rows_before = 0
    for hour in raw.hours:
        started, cpu = time.monotonic(), cpu_seconds()
        [applied] = apply_landed_hours(topic, storage, catalog, formats, [hour])
        results.append(Applied(labels.get(hour, "load"), rows_before, time.monotonic() - started, cpu_seconds() - cpu,
                               applied.files_rewritten, applied.bytes_read, applied.bytes_written,
                               applied.inserts, applied.updates, applied.deletes))
        rows_before = applied.rows
        if hour not in labels:
            print(f"  load hour {hour}: {applied.rows:,} rows in {results[-1].seconds:.1f} s", flush=True)
    results.append(Applied("rebuild", rows_before, time.monotonic() - rebuild_started, cpu_seconds() - rebuild_cpu,
                           sum(r.files_rewritten for r in results), sum(r.bytes_read for r in results),
                           sum(r.bytes_written for r in results), sum(r.inserts for r in results),
                           sum(r.updates for r in results), sum(r.deletes for r in results)))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.current_state", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="table sizes in rows, comma-separated")
    parser.add_argument("--changes", type=int, default=100_000, help="changes in each measured hour")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    work_dir = Path(tempfile.mkdtemp(prefix="bench-current-state-"))
    try:
        measured = {size: bench_size(size, args.changes, work_dir) for size in sizes}
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(f"\nApplying an hour of {args.changes:,} changes to a current-state table (copy-on-write of the files holding "
          f"the changed keys), and rebuilding it from raw:")
    print(f"{'table rows':>11} {'hour':>10} {'seconds':>8} {'CPU s':>7} {'files':>6} {'MB read':>8} {'MB written':>10} "
          f"{'ins/upd/del':>20} {'× smallest':>10} {'CPU ×':>6}")
    smallest = min(sizes)
    baseline = {r.label: r for r in measured[smallest]}
    for size in sizes:
        for result in measured[size]:
            if result.label == "load":
                continue
            base = baseline[result.label]
            ratio = result.seconds / base.seconds if base.seconds else 0.0
            cpu_ratio = result.cpu_seconds / base.cpu_seconds if base.cpu_seconds else 0.0
            print(f"{size:>11,} {result.label:>10} {result.seconds:>8.2f} {result.cpu_seconds:>7.2f} "
                  f"{result.files_rewritten:>6} {result.bytes_read / 2**20:>8.1f} {result.bytes_written / 2**20:>10.1f} "
                  f"{f'{result.inserts}/{result.updates}/{result.deletes}':>20} {ratio:>10.2f} {cpu_ratio:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
