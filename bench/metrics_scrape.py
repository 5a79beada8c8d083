"""`make bench-metrics`: what a scrape of `python -m deploy.metrics` costs with many topics × partitions.

On a fresh local broker: N topics of P partitions with records in every partition, a catalog entry per topic, and
H landed hours per table (hour manifests of P partitions each) in a local lake or on the S3 server. Timed in one
run, in wall and CPU seconds (this process and the broker): the first scrape (the catalog loaded, every manifest
read: what each scrape would cost keeping nothing between scrapes), a scrape listing every table with nothing new
(every table's next hour closable), a scrape after one more hour landed on every table, and a scrape when no table's
next hour can have closed yet (the usual minute of an hour: no table listed), against the log ends of every partition (the least a scrape must ask the brokers)
and against reading every manifest alone.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench.run import cpu_seconds
from bench.sensor_ticks import create_topics, write_catalog
from deploy.metrics import metric_families
from dev_services.tansu import TansuBroker
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.cluster import KafkaCluster
from kafka_lake.kafka.log import consumer_config
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import HourManifest, ManifestStore, PartitionLanding
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.metrics import READERS, PlatformMeasures
from kafka_lake.settings import PlatformSettings

FIRST_HOUR = KafkaHour(datetime(2026, 11, 1, tzinfo=timezone.utc))
RECORDS_PER_PARTITION_HOUR = 1000


def manifest(table: int, hour: KafkaHour, partitions: int) -> HourManifest:
    """A landed hour of `bench/topic_NNN`: every partition read a thousand records, a few of them dead letters."""
    index = int((hour.start - FIRST_HOUR.start) / timedelta(hours=1))
    start = index * RECORDS_PER_PARTITION_HOUR
    counts = LandingCounts(records=RECORDS_PER_PARTITION_HOUR, rows=RECORDS_PER_PARTITION_HOUR - 3, dead_letters=2,
                           tombstones=1)
    return HourManifest(
        database="bench", table=f"topic_{table:03d}", topic=f"bench.topic_{table:03d}", hour=hour.partition_key,
        partitions=tuple(PartitionLanding(p, start, start + RECORDS_PER_PARTITION_HOUR, counts) for p in range(partitions)),
        files=(), landed_at=hour.end.isoformat(), dead_letter_causes={"undecodable_payload": 2 * partitions},
    )


def land_hours(storage: LakeStorage, tables: int, hours: list[KafkaHour], partitions: int) -> None:
    def write(job: tuple[int, KafkaHour]) -> None:
        table, hour = job
        ManifestStore(storage, "bench", f"topic_{table:03d}").write(manifest(table, hour, partitions))

    with ThreadPoolExecutor(READERS) as pool:
        list(pool.map(write, [(table, hour) for table in range(tables) for hour in hours]))


def read_every_manifest(storage: LakeStorage, tables: int) -> int:
    """The baseline: every table's manifests listed and read, as a scrape without running totals would."""
    def table_rows(table: int) -> int:
        return sum(m.counts.rows for m in ManifestStore(storage, "bench", f"topic_{table:03d}").all())

    with ThreadPoolExecutor(READERS) as pool:
        return sum(pool.map(table_rows, range(tables)))


def log_ends_in_one_call(config: dict, partitions: dict[str, list[int]]) -> int:
    """Every partition's log end from one `list_offsets` call, as `KafkaCluster.log_ends` asked before it sent calls of
    a thousand partitions."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    futures = AdminClient(config).list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for topic, numbers in partitions.items() for p in numbers},
        request_timeout=30)
    return len({tp: future.result().offset for tp, future in futures.items()})


def timed(action) -> tuple[tuple[float, float], object]:
    """((wall seconds, CPU seconds of this process and the broker), what the action returned). The CPU is what the
    measure cost the machine, whatever else shares its cores; the wall clock moves with that load."""
    started, cpu = time.perf_counter(), cpu_seconds()
    result = action()
    return (time.perf_counter() - started, cpu_seconds() - cpu), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--hours", type=int, default=24, help="landed hours per table before the first scrape")
    parser.add_argument("--lake", choices=("local", "s3"), default="local")
    args = parser.parse_args()
    names = [f"bench.topic_{n:03d}" for n in range(args.topics)]
    hours = [KafkaHour(FIRST_HOUR.start + timedelta(hours=n)) for n in range(args.hours + 1)]
    with tempfile.TemporaryDirectory() as work_dir, TansuBroker(log_file=Path(work_dir) / "tansu.log") as broker, \
            _lake(args.lake, Path(work_dir)) as lake_root:
        work = Path(work_dir)
        started = time.perf_counter()
        create_topics(broker, names, args.partitions)
        _produce_one_record_each(broker, names, args.partitions)
        write_catalog(work / "catalog", args.topics)
        storage = LakeStorage(lake_root)
        land_hours(storage, args.topics, hours[:-1], args.partitions)
        setup = time.perf_counter() - started
        settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers,
                                    schema_catalog_dir=str(work / "catalog"), lake_root=lake_root)
        cluster = KafkaCluster(consumer_config(broker.bootstrap_servers))
        measures = PlatformMeasures(settings, cluster)
        partitions = {name: list(range(args.partitions)) for name in names}
        now = hours[-1].end + timedelta(minutes=20)

        def scrape():
            measured = measures.measure(now)
            return measured, metric_families(measured, 0.0)

        results = {}
        results["ListOffsets of every partition (baseline)"], _ = timed(lambda: cluster.log_ends(partitions))
        results["the same in one call of every partition"], _ = timed(
            lambda: log_ends_in_one_call(consumer_config(broker.bootstrap_servers), partitions))
        # What the first scrape asks the brokers: the ends confirmed by a fetch at each partition's last record (later
        # scrapes confirm only the partitions whose reported end moved).
        results["log ends confirmed (ListOffsets + a fetch)"], _ = timed(
            lambda: cluster.confirmed_ends(cluster.log_ends(partitions)[0], 60))
        results["reading every manifest (baseline)"], rows = timed(lambda: read_every_manifest(storage, args.topics))
        results["first scrape (reads every manifest)"], _ = timed(scrape)
        results["scrape, every table listed, nothing new"], _ = timed(scrape)
        land_hours(storage, args.topics, hours[-1:], args.partitions)
        results["scrape after an hour landed on every table"], (measured, families) = timed(scrape)
        # Every table's newest hour is now the one before `now`: the next cannot have closed, no table is listed.
        results["scrape, no table's next hour closable yet"], _ = timed(scrape)
        measures.close()
    landed = sum(t.totals.rows for t in measured.tables)
    expected = rows + args.topics * args.partitions * (RECORDS_PER_PARTITION_HOUR - 3)
    assert landed == expected, f"the scrape counted {landed} rows, the manifests hold {expected}"
    samples = sum(len(family.samples) for family in families)
    print(f"{args.topics} topics × {args.partitions} partitions, {args.hours} landed hours each, {args.lake} lake: "
          f"{args.topics * args.hours} manifests, {samples} samples a scrape (set-up {setup:.1f}s)")
    print(f"{'measure':44} {'wall s':>7} {'CPU s':>7} {'× ListOffsets (CPU)':>20} {'first scrape ÷ it (CPU)':>24}")
    offsets, first = results["ListOffsets of every partition (baseline)"][1], results["first scrape (reads every manifest)"][1]
    for name, (wall, cpu) in results.items():
        print(f"{name:44} {wall:7.3f} {cpu:7.3f} {cpu / offsets:20.1f} {first / cpu:24.1f}")
    steady, after_hour = results["scrape, every table listed, nothing new"], results["scrape after an hour landed on every table"]
    idle = results["scrape, no table's next hour closable yet"]
    print(f"RESULT lake={args.lake} topics={args.topics} partitions={args.partitions} scrape_s={steady[0]:.3f} "
          f"scrape_cpu_s={steady[1]:.3f} scrape_after_new_hour_cpu_s={after_hour[1]:.3f} idle_scrape_s={idle[0]:.3f} "
          f"idle_scrape_cpu_s={idle[1]:.3f} first_scrape_cpu_s={first:.3f} "
          f"list_offsets_cpu_s={offsets:.3f} first_vs_steady={first / steady[1]:.1f} steady_vs_list_offsets={steady[1] / offsets:.1f}")
    return 0


def _produce_one_record_each(broker: TansuBroker, names: list[str], partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    for name in names:
        for p in range(partitions):
            producer.produce(name, value=b"\x00", partition=p)
    producer.flush(120)


class _lake:
    """A local lake folder, or a bucket on a SeaweedFS S3 server started for the run."""

    def __init__(self, kind: str, work: Path):
        self.kind, self.work, self._server = kind, work, None

    def __enter__(self) -> str:
        if self.kind == "local":
            return str(self.work / "lake")
        from dev_services.seaweedfs import SeaweedS3

        self._server = SeaweedS3(data_dir=self.work / "s3")
        self._server.__enter__()
        self._server.create_bucket("lake")
        os.environ.update(self._server.env())
        return "s3://lake/bench"

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.__exit__(*exc)


if __name__ == "__main__":
    raise SystemExit(main())
