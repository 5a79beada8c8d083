"""`make bench-freshness`: how soon a produced record is readable through the table when the open hour lands in
increments (`open_hour: {every_minutes: N}`), under `dagster dev` with the platform's own sensors and continuous traffic.

For each N, a fresh broker, lake and Dagster instance; a few copies of `shop/page_views` as Iceberg tables with
`open_hour: {every_minutes: N}` and `start_hour` the current hour; a producer writing records stamped as produced, a
few a second a topic; and a reader polling every table's current snapshot (pyiceberg, as any Iceberg reader would)
every few seconds, noting when each record is first readable. Printed: the 50th and 95th percentile of (readable -
produced) over the records produced after a warm-up and early enough to have landed, against the goal of 2N + 1
minutes, and what each increment cost the whole deployment (CPU of every process, as `bench.runs` counts it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench.runs import VENV_BIN, DeploymentCpu, _page_view_encoder, registry_id, write_catalog

REPO = Path(__file__).resolve().parent.parent
PII_KEY = "bench-pii-key-not-a-secret"
POLL_S = 5.0


def topic_name(n: int) -> str:
    return f"bench.runs_{n:05d}"  # as `bench.runs.write_catalog` names them


def open_hour_catalog(directory: Path, topics: int, every_minutes: int, start: datetime) -> None:
    write_catalog(directory, topics)
    for folder in directory.glob("*/*"):
        text = (folder / "topic.yaml").read_text()
        text = text.replace('start_hour: "2026-11-01T00:00Z"', f'start_hour: "{start:%Y-%m-%dT%H:00Z}"')
        (folder / "topic.yaml").write_text(text + f"open_hour: {{every_minutes: {every_minutes}}}\n"
                                           "table_format: iceberg\n")


class Traffic:
    """A producer thread writing a record every `interval_s` to each topic, each stamped with when it was produced."""

    def __init__(self, bootstrap: str, topics: int, interval_s: float):
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self._topics, self._interval = topics, interval_s
        self.produced: dict[tuple[str, int, int], float] = {}  # (topic, partition, offset) → produced at (epoch s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._encoders = [_page_view_encoder(registry_id(n)) for n in range(topics)]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush(30)

    def _delivered(self, error, message) -> None:
        if error is None:  # produced when stamped: the record's own timestamp
            self.produced[(message.topic(), message.partition(), message.offset())] = message.timestamp()[1] / 1000

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for index in range(self._topics):
                moment = datetime.now(timezone.utc)
                self._producer.produce(topic_name(index), value=self._encoders[index](n, moment), partition=n % 2,
                                       timestamp=int(moment.timestamp() * 1000), on_delivery=self._delivered)
                n += 1
            self._producer.poll(0)
            self._producer.flush(5)
            self._stop.wait(self._interval)


class Reader:
    """Polls every table's current snapshot; the first poll that reads a record is when it became readable."""

    def __init__(self, lake_root: str, topics: int):
        from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog

        self._catalog = open_catalog(IcebergCatalogConfig(lake_root))
        self._topics = topics
        self.readable: dict[tuple[str, int, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            for n in range(self._topics):
                try:
                    table = self._catalog.load_table((f"db_{n:05d}", "page_views"))
                    rows = table.scan(selected_fields=("_kafka_partition", "_kafka_offset")).to_arrow()
                except Exception:  # not created yet
                    continue
                seen = time.time()
                for partition, offset in zip(rows.column("_kafka_partition").to_pylist(),
                                             rows.column("_kafka_offset").to_pylist()):
                    self.readable.setdefault((topic_name(n), partition, offset), seen)
            self._stop.wait(POLL_S)


@dataclass
class Freshness:
    every_minutes: int
    records: int
    p50_s: float
    p95_s: float
    increments: int
    cpu_s: float
    unread: int


def measure(every_minutes: int, topics: int, minutes: float, interval_s: float, work: Path) -> Freshness:
    from dagster import DagsterInstance

    from deploy.instance import write_instance
    from dev_services.ports import LOOPBACK, free_port
    from dev_services.tansu import TansuBroker
    from tests.dagster_servers import loaded_location, serving

    start = datetime.now(timezone.utc)
    catalog, home, lake = work / "catalog", work / "home", work / "lake"
    open_hour_catalog(catalog, topics, every_minutes, start)
    write_instance(home, environ={})
    with TansuBroker(log_file=work / "tansu.log") as broker:
        from bench.sensor_ticks import create_topics

        create_topics(broker, [topic_name(n) for n in range(topics)], 2)
        traffic = Traffic(broker.bootstrap_servers, topics, interval_s)
        env = {**os.environ, "DAGSTER_HOME": str(home), "SCHEMA_CATALOG_DIR": str(catalog), "LAKE_ROOT": str(lake),
               "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers, "PII_HMAC_KEY": PII_KEY, "SPARK_MASTER": "local[2]",
               "PLATFORM_AUTOMATION": "on", "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        cpu = DeploymentCpu(f"kafka-lake-freshness-{os.getpid()}-{every_minutes}")
        port = free_port()
        command = cpu.wrap([str(VENV_BIN / "dagster"), "dev", "-m", "platform_assets.definitions", "-h", LOOPBACK,
                            "-p", str(port)])
        try:
            with serving(command, port, work / "dagster_dev.log", env, work, "dagster dev", start_timeout=600) as process:
                cpu.follow(process.pid)
                loaded_location(port, "platform_assets.definitions", work / "dagster_dev.log", timeout=600)
                traffic.start()
                reader = Reader(str(lake), topics)
                reader.start()
                before = cpu.seconds()
                time.sleep(minutes * 60)
                traffic.stop()
                time.sleep((2 * every_minutes + 2) * 60)  # what was produced last has the goal's time to land
                reader.stop()
                spent = cpu.seconds() - before
                instance = DagsterInstance.from_config(str(home))
                increments = sum(1 for run in instance.get_runs() if run.job_name == "landing")
        finally:
            cpu.close()
    warm_up = start.timestamp() + 120  # the first landing starts Spark and creates the tables
    last = max(traffic.produced.values()) - 60
    measured = {key: at for key, at in traffic.produced.items() if warm_up <= at <= last}
    delays = sorted(reader.readable[key] - at for key, at in measured.items() if key in reader.readable)
    if not delays:
        raise SystemExit(f"N={every_minutes}: no record became readable; see {work / 'dagster_dev.log'}")
    return Freshness(every_minutes, len(measured), statistics.median(delays), delays[int(0.95 * (len(delays) - 1))],
                     increments, spent, len(measured) - len(delays))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, nargs="+", default=[1, 5], help="open_hour every_minutes to measure")
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--minutes", type=float, default=20, help="minutes of traffic for each N")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between records of a topic")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    results = []
    for every in args.every:
        work = Path(tempfile.mkdtemp(prefix=f"bench-freshness-{every}-"))
        print(f"every {every} min: {work}", flush=True)
        try:
            results.append(measure(every, args.topics, max(args.minutes, 3 * every), args.interval, work))
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.topics} topics, a record every {args.interval} s a topic; readable = first seen in the table's current "
          f"snapshot by a reader polling every {POLL_S:.0f} s")
    print(f"{'N min':>6} {'records':>8} {'p50 s':>7} {'p95 s':>7} {'goal s':>7} {'met':>4} | {'landing runs':>12} "
          f"{'CPU s':>7} {'CPU s a run':>11} {'unread':>6}")
    for r in results:
        goal = (2 * r.every_minutes + 1) * 60
        print(f"{r.every_minutes:>6} {r.records:>8} {r.p50_s:>7.0f} {r.p95_s:>7.0f} {goal:>7} "
              f"{'yes' if r.p95_s <= goal else 'NO':>4} | {r.increments:>12} {r.cpu_s:>7.0f} "
              f"{r.cpu_s / max(r.increments, 1):>11.1f} {r.unread:>6}")
    print("RESULT " + json.dumps([r.__dict__ for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
