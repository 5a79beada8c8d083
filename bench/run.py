"""`make bench`: raw landing measured against the physical ceiling of this machine, in one run.

(a) one confluent-kafka consumer reading the values only: the ceiling; (b) the naive valve: per-record fastavro
and pyarrow in one process; (c) the platform landing the same hours on Spark `local[2]`; (d) the peak RSS of one
landing task over a slice of 1M and of 5M records. Prints a table and a last `RESULT …` line.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from confluent_kafka import Consumer, Message, TopicPartition

from bench.traffic import bench_topic, produce_one_long_slice, produce_page_views
from dev_services.demo_traffic import last_closed_hours
from dev_services.tansu import TansuBroker
from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.log import KafkaLog, consumer_config
from kafka_lake.kafka.schema_resolution import CatalogSchemas
from kafka_lake.lake import layout
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.driver import land_hours
from kafka_lake.landing.landing_settings import LandingSettings
from kafka_lake.landing.slice_task import PlacementFiles, SliceTask
from kafka_lake.landing.slices import OffsetSlice
from kafka_lake.topics.loader import load_catalog
from spark_jobs.landing_job import land_slice_in_worker

PII_KEY = b"bench-pii-key-not-a-secret"
HOURS = 4
PARTITIONS = 4
NAIVE_RECORDS = 300_000  # the naive valve is slow and steady: a prefix of the traffic gives its rate
SLICES_FOR_RSS = (1_000_000, 5_000_000)


@dataclass
class Measured:
    name: str
    records: int
    seconds: float
    note: str = ""
    cpu_seconds: float | None = None  # of every process the measure ran, the broker included
    cpu_split: dict[str, float] | None = None  # the same by kind of process (`PROCESS_KINDS`)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_record(self) -> str:
        return f"{self.cpu_seconds / self.records * 1e6:.2f}" if self.cpu_seconds is not None and self.records else "-"

    @property
    def cpu_split_note(self) -> str:
        """µs a record by kind of process, those that spent any."""
        if not self.cpu_split or not self.records:
            return ""
        return ", ".join(f"{kind} {seconds / self.records * 1e6:.2f}" for kind, seconds in self.cpu_split.items()
                         if seconds > 0)


class CpuMeter:
    """CPU of this process and everything under it, by kind, since it was made."""

    def __init__(self):
        self._before = cpu_by_process()

    def split(self) -> dict[str, float]:
        now = cpu_by_process()
        return {kind: now[kind] - self._before[kind] for kind in PROCESS_KINDS}


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    memory_kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    return f"{os.cpu_count()} cores ({cpu}), {memory_kb / 2**20:.1f} GiB memory, {platform.platform()}, Python {platform.python_version()}"


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and every process under it (the broker, Spark's JVM and its
    Python workers), with what they have reaped: all the measure cost the machine, whatever else shares it."""
    return sum(cpu_by_process().values())


PROCESS_KINDS = ("driver", "jvm", "python workers", "broker", "other")


def cpu_by_process() -> dict[str, float]:
    """`cpu_seconds` by kind of process: this one (the driver), Spark's JVM, its Python workers, the broker, and
    any other under it; a process's reaped children count with it (a worker that ended, with the workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents, used, kinds = {}, {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                name, fields = handle.read().split(" (", 1)[1].rsplit(")", 1)
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read()
        except OSError:
            continue  # ended while we looked
        fields = fields.split()
        parents[int(pid)] = int(fields[1])
        used[int(pid)] = sum(map(int, fields[11:15])) / ticks  # utime, stime, cutime, cstime
        kinds[int(pid)] = _process_kind(int(pid), name, command)
    ours = {os.getpid()}
    while True:
        found = {pid for pid, parent in parents.items() if parent in ours} - ours
        if not found:
            break
        ours |= found
    split = dict.fromkeys(PROCESS_KINDS, 0.0)
    for pid in ours:
        split[kinds[pid]] += used[pid]
    return split


def _process_kind(pid: int, name: str, command: bytes) -> str:
    if pid == os.getpid():
        return "driver"
    if name == "java":
        return "jvm"
    if b"pyspark" in command:
        return "python workers"
    if b"tansu" in command.split(b"\0", 1)[0]:
        return "broker"
    return "other"


def _measured(name: str, records: int, seconds: float, meter: CpuMeter, note: str = "") -> Measured:
    split = meter.split()
    return Measured(name, records, seconds, note, sum(split.values()), split)


# --- (a) the ceiling ----------------------------------------------------------------------------------------


def raw_consume(bootstrap: str, topic: str, partitions: int) -> Measured:
    """One consumer, values only: what reading the log costs with nothing done to the records."""
    consumer = Consumer(consumer_config(bootstrap))
    total, started, meter = 0, time.monotonic(), CpuMeter()
    try:
        for partition in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, low)])
            seen = 0
            while seen < high - low:
                # consume() waits out its timeout until it has all it asked for: asking past the partition's end
                # idled a second per partition, a third of a 2M-record run, and made the ceiling look three
                # times lower than it is.
                messages = consumer.consume(num_messages=min(10_000, high - low - seen), timeout=1.0)
                values = list(map(Message.value, messages))
                seen += len(values)
            consumer.unassign()
            total += seen
    finally:
        consumer.close()
    return _measured("(a) raw consume, 1 consumer, values only", total, time.monotonic() - started, meter)


# --- (b) the naive valve --------------------------------------------------------------------------------------


def naive_valve(bootstrap: str, topic, lake_root: str, records: int, partitions: int) -> Measured:
    """Per-record fastavro decoding and pyarrow tables, written by hour, in one process: the platform before
    the columnar path, over the first `records` records."""
    storage = LakeStorage(lake_root)
    decoder = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=False)
    total, started, meter = 0, time.monotonic(), CpuMeter()
    with KafkaLog(consumer_config(bootstrap), topic.topic) as log:
        for partition in range(partitions):
            files = PlacementFiles(storage, topic, partition, 16)
            for batch in log.read_slice_batches(partition, 0, records // partitions, 20_000):
                decoded = decoder.decode([batch.record(i) for i in range(len(batch))])
                for placement, table in decoded.rows.items():
                    directory = layout.data_directory(topic.database, topic.table, placement.schema_version, placement.hour)
                    files.write(("data", placement), directory, table, placement.schema_version, placement.hour)
                total += len(batch)
            files.close_all()
    return _measured("(b) naive valve: per-record fastavro + pyarrow, 1 process", total, time.monotonic() - started,
                     meter, f"first {total:,} records")


# --- (c) the platform on Spark --------------------------------------------------------------------------------


class WorkerMemory:
    """Samples the resident memory of Spark's Python workers (our descendants) while landing runs."""

    def __init__(self):
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self):
        while not self._stop.wait(0.2):
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        command = handle.read()
                    if b"pyspark" not in command or b"daemon" in command:
                        continue
                    with open(f"/proc/{pid}/status") as handle:
                        for line in handle:
                            if line.startswith("VmHWM:"):
                                self.peak_kb = max(self.peak_kb, int(line.split()[1]))
                except OSError:
                    continue


def spark_session() -> tuple[object, float]:
    """A `local[2]` session with both Python workers warm, and the seconds warming them took."""
    from pyspark.sql import SparkSession

    from resources.spark import spark_config, use_this_python_for_workers

    use_this_python_for_workers()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in spark_config("local[2]", {"spark.ui.enabled": "false"}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session, _warm_workers(session)


def _warm_workers(session) -> float:
    """Both Python workers started, the landing code imported in each, before the clock starts: like the JVM's
    start-up, a cost a Spark session pays once (timed alone and printed), not one per record."""
    started = time.monotonic()
    cores = session.sparkContext.defaultParallelism
    # A barrier stage runs all its tasks at once, so each lands in a worker of its own.
    # The lambda travels by value: the workers cannot import `bench`, which is no installed package.
    imported = session.sparkContext.parallelize(range(cores), cores).barrier().mapPartitions(
        lambda rows: [__import__("kafka_lake.landing.slice_task").__name__]).collect()
    assert len(imported) == cores, imported
    seconds = time.monotonic() - started
    print(f"Spark Python workers started, landing code imported in each: {seconds:.1f} s", flush=True)
    return seconds


def platform_landing(spark, bootstrap: str, topic, hours, lake_root: str) -> tuple[Measured, int]:
    """The hours landed as a backfill run lands them (`land_hours`: each hour's slices start while the hour
    before still runs, the hours commit in order)."""
    from spark_jobs.landing_job import SlicesOnSpark

    settings = LandingSettings(lake_root=lake_root, kafka_config=consumer_config(bootstrap), pii_key=PII_KEY)
    with WorkerMemory() as memory:
        started, meter = time.monotonic(), CpuMeter()
        results = list(land_hours(topic, [KafkaHour(hour) for hour in hours], settings,
                                  SlicesOnSpark(spark, topic.topic), now=hours[-1] + timedelta(hours=3)))
        records = sum(result.manifest.counts.records for result in results)
        whole = _measured("(c) platform landing on Spark local[2], end to end", records, time.monotonic() - started,
                          meter, f"{len(hours)} hours in one run: planning + tasks + commits")
    return whole, memory.peak_kb


# --- (d) memory of one long slice -------------------------------------------------------------------------------


def slice_task_rss(bootstrap: str, topic, hours, records: int, lake_root: str) -> tuple[Measured, float]:
    """Lands offsets [0, records) of the long-slice topic as one task in a fresh process; (rate, peak RSS MiB)."""
    command = [sys.executable, "-m", "bench.run", "--one-slice", bootstrap, topic.topic, str(records), lake_root,
               hours[0].isoformat()]
    started, meter = time.monotonic(), CpuMeter()
    child = subprocess.Popen(command)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise RuntimeError(f"the slice task of {records:,} records failed (status {status})")
    seconds = time.monotonic() - started
    measured = _measured(f"(d) one landing task, slice of {records:,}", records, seconds, meter, "fresh process")
    task_cpu = usage.ru_utime + usage.ru_stime  # reaped by this process: counted as the driver's until moved
    measured.cpu_split = {**measured.cpu_split, "driver": measured.cpu_split["driver"] - task_cpu,
                          "other": measured.cpu_split["other"] + task_cpu}
    return measured, usage.ru_maxrss / 1024


def one_slice(bootstrap: str, kafka_topic: str, records: int, lake_root: str, first_hour: str) -> None:
    from datetime import datetime

    page_views = load_catalog("schema_catalog").by_name("shop", "page_views")
    topic = bench_topic(page_views, kafka_topic, max_rows_per_task=records)
    task = SliceTask(topic, KafkaHour(datetime.fromisoformat(first_hour)), OffsetSlice(0, 0, records),
                     LandingSettings(lake_root, consumer_config(bootstrap), pii_key=PII_KEY))
    report = land_slice_in_worker(task)  # the Spark task body, in a process tuned as a Spark worker is
    assert report.counts.records == records, report


def result_line(landing: Measured, ceiling: Measured, naive: Measured, peak_task_rss_mb: float) -> str:
    """The bench's last line: the landing's records a second and CPU a record, each against the ceiling measured in
    the same run, against the naive valve, and a task's peak memory."""
    landing_cpu, ceiling_cpu = (row.cpu_seconds / row.records * 1e6 for row in (landing, ceiling))
    line = (f"RESULT landing_rows_per_s={landing.rate:.0f} cpu_us_per_record={landing_cpu:.2f} "
            f"ceiling_cpu_us_per_record={ceiling_cpu:.2f} cpu_vs_ceiling={landing_cpu / ceiling_cpu:.2f} ")
    if landing.cpu_split and ceiling.cpu_split:
        # The test broker's share swings several-fold between runs with the same records: the rest is steadier.
        landing_own, ceiling_own = (row.cpu_seconds - row.cpu_split["broker"] for row in (landing, ceiling))
        line += f"cpu_vs_ceiling_without_broker={landing_own / landing.records / (ceiling_own / ceiling.records):.2f} "
    return line + (f"ceiling_rows_per_s={ceiling.rate:.0f} vs_ceiling={landing.rate / ceiling.rate:.2f} "
                   f"vs_naive={landing.rate / naive.rate:.2f} peak_task_rss_mb={peak_task_rss_mb:.0f}")


# --- the run ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=int(os.environ.get("N") or 2_000_000))
    parser.add_argument("--rss-slices", default=",".join(map(str, SLICES_FOR_RSS)),
                        help="slice lengths whose landing task's peak RSS is measured")
    parser.add_argument("--one-slice", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_slice:
        bootstrap, topic, records, lake_root, first_hour = args.one_slice
        one_slice(bootstrap, topic, int(records), lake_root, first_hour)
        return 0

    print(f"machine: {machine()}", flush=True)
    rss_slices = [int(n) for n in args.rss_slices.split(",") if n]
    page_views = load_catalog("schema_catalog").by_name("shop", "page_views")
    hours = last_closed_hours(HOURS + 2)[:HOURS]  # closed for hours: the clock never holds one open
    work = tempfile.mkdtemp(prefix="kafka-lake-bench-")
    rows: list[Measured] = []
    peaks = {}
    try:
        # Each measure reads from a broker of its own holding the same records: Tansu's memory storage grows
        # slower with every request it has served (its CPU per fetched record grew fourfold over a few landings
        # here), so a landing measured after the ceiling on one broker would pay for the ceiling's reads.
        topic = bench_topic(page_views, "bench.page_views", page_views.max_rows_per_task)
        with TansuBroker(log_file=os.path.join(work, "tansu-ceiling.log")) as broker:
            bootstrap = broker.bootstrap_servers
            produced = produce_page_views(bootstrap, topic, hours, args.records, PARTITIONS)
            print(f"produced {produced.records:,} page views over {HOURS} hours and {PARTITIONS} partitions "
                  f"in {produced.seconds:.0f} s", flush=True)
            ceiling = raw_consume(bootstrap, topic.topic, PARTITIONS)
            rows.append(ceiling)
            print(f"{ceiling.name}: {ceiling.rate:,.0f} records/s", flush=True)
            naive = naive_valve(bootstrap, topic, os.path.join(work, "naive"), min(NAIVE_RECORDS, args.records), PARTITIONS)
            rows.append(naive)
            print(f"{naive.name}: {naive.rate:,.0f} records/s", flush=True)

        with TansuBroker(log_file=os.path.join(work, "tansu-landing.log")) as broker:
            bootstrap = broker.bootstrap_servers
            produce_page_views(bootstrap, topic, hours, args.records, PARTITIONS)  # the same records
            spark, warm_up = spark_session()
            landing, worker_peak_kb = platform_landing(spark, bootstrap, topic, hours, os.path.join(work, "lake"))
            landing.note += f"; before it, {warm_up:.1f} s starting the Python workers (once per Spark application)"
            rows.append(landing)
            print(f"{landing.name}: {landing.rate:,.0f} records/s; Spark Python worker peak RSS "
                  f"{worker_peak_kb / 1024:.0f} MiB", flush=True)
            spark.stop()

        if rss_slices:
            with TansuBroker(log_file=os.path.join(work, "tansu-long-slice.log")) as broker:
                bootstrap = broker.bootstrap_servers
                long_topic = bench_topic(page_views, "bench.page_views.long_slice", max(rss_slices))
                produced = produce_one_long_slice(bootstrap, long_topic, hours, max(rss_slices))
                print(f"produced {produced.records:,} records on one partition in {produced.seconds:.0f} s", flush=True)
                for length in rss_slices:
                    measured, peak_mb = slice_task_rss(bootstrap, long_topic, hours, length, os.path.join(work, f"rss-{length}"))
                    measured.note = f"peak RSS {peak_mb:.0f} MiB"
                    rows.append(measured)
                    peaks[length] = peak_mb
                    print(f"{measured.name}: {measured.rate:,.0f} records/s, {measured.note}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print("CPU µs/record: user + system CPU of every process of the measure (the broker, Spark's JVM and Python "
          "workers included) per record; two cores give 2 s of CPU a second")
    print(f"| {'path':<62} | {'records':>10} | {'seconds':>8} | {'records/s':>10} | {'CPU µs/record':>13} | note")
    print(f"|{'-' * 64}|{'-' * 12}|{'-' * 10}|{'-' * 12}|{'-' * 15}|------")
    for row in rows:
        print(f"| {row.name:<62} | {row.records:>10,} | {row.seconds:>8.1f} | {row.rate:>10,.0f} | "
              f"{row.cpu_us_per_record:>13} | {row.note}")
    print()
    print("CPU µs/record by process (driver: this process; other: the slice task's own process in (d))")
    for row in rows:
        print(f"  {row.name}: {row.cpu_split_note}")
    peak = max(peaks.values(), default=worker_peak_kb / 1024)
    print(result_line(landing, ceiling, naive, peak))
    return 0


if __name__ == "__main__":
    sys.exit(main())
