"""`make bench-compaction`: compaction's rows a second and CPU µs a row against its ceiling, in one run.

On a fresh local broker: N page views over four closed hours and four partitions (`bench.traffic`), landed into a
local lake by the core's landing with its slices run in this process. Then, in this one process, each placement
hour is compacted (`plan_compaction` and `compact_partition`, the Spark task body: schema unified over the sources,
rows a re-landing wrote twice dropped, the offsets checksum, files of the target size), and the ceiling rewrites the
same source files the plainest way pyarrow can: read each, concatenate, write one file. CPU is this process's user
and system time (pyarrow's threads included) per row.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from bench.traffic import bench_topic, produce_page_views
from dev_services.tansu import TansuBroker
from kafka_lake.hours import KafkaHour, floor_hour
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.driver import land_hours
from kafka_lake.landing.slice_task import land_slice
from kafka_lake.topics.loader import load_catalog
from kafka_lake.upkeep.compaction import CompactionTask, compact_partition, plan_compaction
from tests.landing_fixtures import landing_settings

HOURS, PARTITIONS = 4, 4


@dataclass
class Measured:
    name: str
    rows: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_row(self) -> float:
        return self.cpu_seconds / self.rows * 1e6 if self.rows else 0.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measured(into: Measured, work, rows_of) -> None:
    cpu, started = cpu_seconds(), time.monotonic()
    result = work()
    into.seconds += time.monotonic() - started
    into.cpu_seconds += cpu_seconds() - cpu
    into.rows += rows_of(result)


def plain_rewrite(storage: LakeStorage, task: CompactionTask, target: str) -> int:
    """The ceiling: the task's sources read whole, concatenated and written as one Parquet file."""
    tables = [pq.read_table(storage.full_path(path), filesystem=storage.filesystem) for path in task.sources]
    table = pa.concat_tables(tables, promote_options="permissive")
    pq.write_table(table, target, row_group_size=256 * 1024)
    return table.num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()

    page_views = load_catalog("schema_catalog").by_name("shop", "page_views")
    # No lateness: every landed hour is due at once (hours before the first landed one, holding late events, are not).
    topic = bench_topic(page_views, "bench.page_views.compaction", page_views.max_rows_per_task).model_copy(
        update=dict(allowed_lateness_hours=0))
    now = floor_hour(time_now())
    hours = [now - (HOURS + 2 - n) * (KafkaHour(now).end - now) for n in range(HOURS)]
    work = tempfile.mkdtemp(prefix="bench-compaction-")
    try:
        with TansuBroker(log_file=os.path.join(work, "tansu.log")) as broker:
            produced = produce_page_views(broker.bootstrap_servers, topic, hours, args.records, PARTITIONS)
            settings = landing_settings(os.path.join(work, "lake"), broker.bootstrap_servers)
            started = time.monotonic()
            for _ in land_hours(topic, [KafkaHour(h) for h in hours], settings, _in_this_process):
                pass
            print(f"landed {produced.records:,} page views over {HOURS} hours in {time.monotonic() - started:.0f} s")
        storage = LakeStorage(settings.lake_root)
        tasks = [task for hour in hours for task in plan_compaction(topic, hour, storage)[0]]
        compaction, ceiling = Measured("compaction (compact_partition, one process)"), Measured("pyarrow read + concat + write")
        os.makedirs(os.path.join(work, "ceiling"))
        for n, task in enumerate(tasks):
            measured(ceiling, lambda: plain_rewrite(storage, task, os.path.join(work, "ceiling", f"{n}.parquet")), int)
            measured(compaction, lambda: compact_partition(task), lambda report: report.rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"{len(tasks)} partitions, {sum(len(t.sources) for t in tasks)} source files")
    print(f"| {'path':<48} | {'rows':>10} | {'seconds':>8} | {'rows/s':>10} | {'CPU µs/row':>10} |")
    print(f"|{'-' * 50}|{'-' * 12}|{'-' * 10}|{'-' * 12}|{'-' * 12}|")
    for row in (ceiling, compaction):
        print(f"| {row.name:<48} | {row.rows:>10,} | {row.seconds:>8.2f} | {row.rate:>10,.0f} | {row.cpu_us_per_row:>10.2f} |")
    print(f"RESULT compaction_rows_per_s={compaction.rate:.0f} ceiling_rows_per_s={ceiling.rate:.0f} "
          f"vs_ceiling={compaction.rate / ceiling.rate:.2f} cpu_us_per_row={compaction.cpu_us_per_row:.2f} "
          f"ceiling_cpu_us_per_row={ceiling.cpu_us_per_row:.2f}")


def time_now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def _in_this_process(tasks) -> Future:
    done: Future = Future()
    done.set_result([land_slice(task) for task in tasks])
    return done


if __name__ == "__main__":
    main()
