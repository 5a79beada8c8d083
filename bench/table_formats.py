"""Landing the same records into the Hive layout and into an Iceberg table, in one run.

`python -m bench.table_formats --records 1000000` (`make bench-table-formats N=…`): the page views of `make bench`
are produced to two brokers of their own (Tansu's memory storage slows with every request it serves, so each
format reads from a fresh one), then landed by `land_hours` on Spark `local[2]` as a backfill run lands them: once
as the Hive layout, once committing each hour to an Iceberg table in the embedded SQLite catalog, both on a local
lake. Per format: records a second, CPU µs a record (every process of the measure, the broker and Spark included),
and the seconds each hour's commit took (manifest, table commit and cleanup: `driver._commit`). The formats take
turns over `--rounds` (hive first, then iceberg first, …): the first landing of a Spark application pays for the
JVM's warm-up, which would otherwise count against one format only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta

from bench.run import HOURS, PARTITIONS, PII_KEY, Measured, cpu_seconds, machine, spark_session
from bench.traffic import bench_topic, produce_page_views
from dev_services.demo_traffic import last_closed_hours
from dev_services.tansu import TansuBroker
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.log import consumer_config
from kafka_lake.landing import driver
from kafka_lake.landing.landing_settings import LandingSettings
from kafka_lake.topics.loader import load_catalog

FORMATS = ("hive", "iceberg")


class CommitClock:
    """Times every hour's commit of the landing (`driver._commit`, looked up at each call)."""

    def __init__(self):
        self.seconds: list[float] = []
        self._commit = driver._commit

    def __enter__(self):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return self._commit(*args, **kwargs)
            finally:
                self.seconds.append(time.perf_counter() - started)

        driver._commit = timed
        return self

    def __exit__(self, *exc):
        driver._commit = self._commit


def land_as(spark, bootstrap: str, topic, hours, lake_root: str) -> tuple[Measured, list[float]]:
    from spark_jobs.landing_job import SlicesOnSpark

    settings = LandingSettings(lake_root=lake_root, kafka_config=consumer_config(bootstrap), pii_key=PII_KEY)
    with CommitClock() as commits:
        started, used = time.monotonic(), cpu_seconds()
        results = list(driver.land_hours(topic, [KafkaHour(hour) for hour in hours], settings,
                                          SlicesOnSpark(spark, topic.topic), now=hours[-1] + timedelta(hours=3)))
        measured = Measured(f"{topic.table_format}: landing on Spark local[2], end to end",
                            sum(r.manifest.counts.records for r in results), time.monotonic() - started,
                            f"{len(hours)} hours in one run", cpu_seconds() - used)
    snapshots = [r.table_commit.get("iceberg_snapshot_id") for r in results if r.table_commit]
    if topic.table_format == "iceberg":
        assert len(snapshots) == len(hours) and all(snapshots), snapshots  # each hour its own snapshot
    return measured, commits.seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.table_formats", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=int(os.environ.get("N") or 1_000_000))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)

    print(f"machine: {machine()}", flush=True)
    page_views = load_catalog("schema_catalog").by_name("shop", "page_views")
    hours = last_closed_hours(HOURS + 2)[:HOURS]
    work = tempfile.mkdtemp(prefix="kafka-lake-bench-formats-")
    measured: dict[str, list[tuple[Measured, list[float]]]] = {name: [] for name in FORMATS}
    spark = None
    try:
        for table_format in [name for turn in range(args.rounds) for name in (FORMATS if turn % 2 == 0 else FORMATS[::-1])]:
            topic = bench_topic(page_views, "bench.page_views", page_views.max_rows_per_task).model_copy(
                update=dict(table_format=table_format))
            with TansuBroker(log_file=os.path.join(work, f"tansu-{table_format}.log")) as broker:
                produced = produce_page_views(broker.bootstrap_servers, topic, hours, args.records, PARTITIONS)
                print(f"{table_format}: produced {produced.records:,} page views in {produced.seconds:.0f} s", flush=True)
                if spark is None:
                    spark, _ = spark_session()
                row, commits = land_as(spark, broker.bootstrap_servers, topic, hours,
                                       os.path.join(work, f"lake-{table_format}-{len(measured[table_format])}"))
                measured[table_format].append((row, commits))
                print(f"{row.name}: {row.rate:,.0f} records/s, commits {', '.join(f'{s:.3f}' for s in commits)} s",
                      flush=True)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"| {'table format':<12} | {'round':>5} | {'records':>10} | {'seconds':>8} | {'records/s':>10} "
          f"| {'CPU µs/record':>13} | {'commit s/hour (median, max)':>28} |")
    print(f"|{'-' * 14}|{'-' * 7}|{'-' * 12}|{'-' * 10}|{'-' * 12}|{'-' * 15}|{'-' * 30}|")
    for table_format, runs in measured.items():
        for turn, (row, commits) in enumerate(runs, 1):
            print(f"| {table_format:<12} | {turn:>5} | {row.records:>10,} | {row.seconds:>8.1f} | {row.rate:>10,.0f} | "
                  f"{row.cpu_us_per_record:>13} | {statistics.median(commits):>19.3f}, {max(commits):>6.3f} |")
    rate = {name: statistics.median(row.rate for row, _ in runs) for name, runs in measured.items()}
    commit = {name: statistics.median(s for _, commits in runs for s in commits) for name, runs in measured.items()}
    print(f"RESULT hive_rows_per_s={rate['hive']:.0f} iceberg_rows_per_s={rate['iceberg']:.0f} "
          f"iceberg_vs_hive={rate['iceberg'] / rate['hive']:.2f} "
          f"hive_commit_s={commit['hive']:.3f} iceberg_commit_s={commit['iceberg']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
