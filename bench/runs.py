"""`make bench-runs`: what one closed hour of many small topics costs the whole deployment, landed, compacted and
registered by the platform's own sensors under `dagster dev`, at several catalog sizes in one run.

Each size is a generated catalog of copies of `shop/page_views` (each its own database and Kafka topic, a few partitions,
a few dozen records in the hour) and a fresh broker, lake and Dagster instance rendered from the repository's
dagster.yaml. The CPU counted is every process of the deployment: the webserver, the daemon, the code server, the run
workers, Spark's JVMs and Python workers. It is read from a cgroup holding `dagster dev` and everything it starts (dead
processes included) where the bench may make one (root on Linux), else from /proc polled a few times a second, each
process's last reading kept. The broker is not counted: it is Kafka, not the platform.

Two closed hours. The deployment starts with its sensors stopped (its start-up, paid once). The first hour is
launched as the UI launches a backfill of every topic's raw asset, and compacted and registered by the sensors: the
first hour of new topics, whose tables are created in the table catalog. The second hour is then landed by the
sensors, and compacted and registered: the hour a running deployment pays every hour. For each, the bench waits until
every topic's raw hour has landed (landing), then until it is compacted (compaction), then registered (registration).
With `--baseline`, the smallest size is measured again with `TOPICS_PER_RUN=1`, one topic a run, as runs were formed
before runs carried many topics.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
TEMPLATE = REPO / "schema_catalog" / "shop" / "page_views"
PII_KEY = "bench-pii-key-not-a-secret"
PHASE_TIMEOUT_S = 3600
CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")
# What each process of a deployment is, from its command line: the first that matches.
PROCESS_KINDS = (
    ("run workers", b"spawn_main"), ("run workers", b"execute_run"), ("code server", b"\x00grpc\x00"),
    ("code server", b"code-server"), ("daemon", b"daemon"), ("webserver", b"dagster_webserver"),
    ("webserver", b"dagster-webserver"), ("jvm", b"java"), ("spark python workers", b"pyspark"),
    ("dagster dev", b"dagster\x00dev"),
)

LAUNCH_BACKFILL = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""
SET_CURSOR = """
mutation SetCursor($selector: SensorSelector!, $cursor: String) {
  setSensorCursor(sensorSelector: $selector, cursor: $cursor) { __typename ... on PythonError { message } }
}
"""
START_SENSOR = """
mutation Start($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) { __typename ... on PythonError { message } }
}
"""
SENSORS = ("land_closed_hours", "compact_and_register_landed_hours")


def topic_name(n: int) -> str:
    return f"bench.runs_{n:05d}"


def write_catalog(directory: Path, topics: int) -> None:
    """Copies of the page-view topic, each its own database and Kafka topic; compaction is due as soon as an hour lands
    (no allowed lateness), so one closed hour runs every layer."""
    for n in range(topics):
        folder = directory / f"db_{n:05d}" / "page_views"
        shutil.copytree(TEMPLATE, folder)
        text = (folder / "topic.yaml").read_text().replace("topic: shop.page_views", f"topic: {topic_name(n)}")
        text = text.replace("registry_id: 1001", f"registry_id: {registry_id(n)}")
        text = text.replace("registry_id: 1002", f"registry_id: {registry_id(n) + 1}")
        (folder / "topic.yaml").write_text(text + "allowed_lateness_hours: 0\n")


def produce_hour(bootstrap: str, names: list[str], partitions: int, records: int, hour) -> None:
    """`records` page views a topic stamped in `hour` (events and Kafka time alike), spread over its partitions, then
    one record a partition stamped after it, which closes it."""
    from confluent_kafka import Producer

    from kafka_lake.hours import to_millis

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    closing = to_millis(hour.end + timedelta(minutes=3))
    for index, name in enumerate(names):
        value_of = _page_view_encoder(registry_id(index))
        for n in range(records):
            moment = hour.start + timedelta(seconds=(n * 3599) // max(records, 1))
            producer.produce(name, value=value_of(n, moment), partition=n % partitions, timestamp=to_millis(moment))
            producer.poll(0)
        for p in range(partitions):
            producer.produce(name, value=value_of(records + p, hour.end + timedelta(minutes=3)), partition=p,
                             timestamp=closing)
    deadline = time.monotonic() + 900
    while producer.flush(10) and time.monotonic() < deadline:
        pass
    assert not len(producer), f"{len(producer)} record(s) not delivered in 15 minutes"


def registry_id(n: int) -> int:
    """The schema id of topic n's first version in the generated catalog."""
    return 100_000 + 2 * n


def _page_view_encoder(schema_id: int):
    """Confluent-framed v1 page views of the generated topic whose first version is `schema_id`."""
    import io
    import struct
    import uuid

    import fastavro

    schema = fastavro.parse_schema(json.loads((TEMPLATE / "v1.avsc").read_text()))

    def encode(n: int, moment: datetime) -> bytes:
        record = {"view_id": str(uuid.UUID(int=n)), "occurred_at": moment, "user_id": f"user-{n % 17}",
                  "url": f"/products/{n % 101}", "referrer": None,
                  "client": {"ip_address": f"10.0.{n % 250}.{n % 7}", "user_agent": "bench"}, "duration_ms": n % 5000}
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, {k: v for k, v in record.items() if k in {f["name"] for f in schema["fields"]}})
        return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()

    return encode


class DeploymentCpu:
    """The CPU of `dagster dev` and every process it starts. A cgroup counts every process that ever ran in it; without
    one, /proc is polled and each process's last reading kept (a process that lives less than a poll is missed)."""

    def __init__(self, name: str):
        self.cgroup = CGROUP_ROOT / name
        try:
            self.cgroup.mkdir()
        except OSError:
            self.cgroup = None
        self.root_pid: int | None = None
        self._last: dict[int, tuple[str, float]] = {}
        self.commands: dict[int, bytes] = {}
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)

    @property
    def method(self) -> str:
        return "a cgroup (every process, dead ones included)" if self.cgroup else "/proc polled every 0.25 s"

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started inside the cgroup, when there is one."""
        if self.cgroup is None:
            return argv
        return ["sh", "-c", f'echo $$ > {self.cgroup}/cgroup.procs && exec "$@"', "sh", *argv]

    def follow(self, pid: int) -> None:
        self.root_pid = pid
        self._poller.start()

    def seconds(self) -> float:
        if self.cgroup is not None:
            return int((self.cgroup / "cpuacct.usage").read_text()) / 1e9
        return sum(used for _, used in self._last.values())

    def by_kind(self) -> dict[str, float]:
        """CPU seconds by kind of process, from the polled readings (approximate: short-lived processes are missed)."""
        split: dict[str, float] = {}
        for kind, used in self._last.values():
            split[kind] = split.get(kind, 0.0) + used
        return split

    def _poll(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        ours: set[int] = set()
        while not self._stop.is_set():
            parents = {}
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/stat") as handle:
                        fields = handle.read().rsplit(")", 1)[1].split()
                    parents[int(pid)] = int(fields[1])
                    if int(pid) in ours or int(pid) == self.root_pid:
                        ours.add(int(pid))
                        if not self.commands.get(int(pid)):  # a process's command, read while it runs
                            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                                self.commands[int(pid)] = handle.read()[:300]
                        self._last[int(pid)] = (_kind(self.commands[int(pid)]), (int(fields[11]) + int(fields[12])) / ticks)
                except (OSError, IndexError, ValueError):
                    continue
            grown = True
            while grown:
                found = {pid for pid, parent in parents.items() if parent in ours} - ours
                grown = bool(found)
                ours |= found
            time.sleep(0.25)

    def close(self) -> None:
        self._stop.set()
        if self.cgroup is not None:
            for _ in range(50):
                try:
                    self.cgroup.rmdir()
                    return
                except OSError:
                    time.sleep(0.2)


def _kind(command: bytes) -> str:
    return next((kind for kind, marker in PROCESS_KINDS if marker in command), "other")


@dataclass
class Phase:
    name: str
    cpu_s: float
    wall_s: float
    split: dict[str, float] = field(default_factory=dict)


@dataclass
class SizeResult:
    topics: int
    topics_per_run: int | None
    phases: list[Phase] = field(default_factory=list)
    runs: dict[str, int] = field(default_factory=dict)
    cpu_method: str = ""


def measure(topics: int, partitions: int, records: int, topics_per_run: int | None, work: Path) -> SizeResult:
    from dagster import AssetKey, DagsterInstance, RunsFilter

    from deploy.instance import write_instance
    from dev_services.ports import LOOPBACK, free_port
    from dev_services.tansu import TansuBroker
    from kafka_lake.hours import KafkaHour
    from tests.dagster_servers import graphql, loaded_location, serving

    result = SizeResult(topics, topics_per_run)
    names = [topic_name(n) for n in range(topics)]
    second = KafkaHour.containing(datetime.now(timezone.utc)).previous()
    first = second.previous()
    catalog, home, lake = work / "catalog", work / "home", work / "lake"
    write_catalog(catalog, topics)
    write_instance(home, environ={})
    with TansuBroker(log_file=work / "tansu.log") as broker:
        from bench.sensor_ticks import create_topics

        create_topics(broker, names, partitions)
        for hour in (first, second):
            produce_hour(broker.bootstrap_servers, names, partitions, records, hour)
        # The closing records are stamped 3 minutes into the next hour: they close the hour once the clock is past them.
        wait = (second.end + timedelta(minutes=3) - datetime.now(timezone.utc)).total_seconds()
        if wait > 0:
            print(f"  waiting {wait:.0f} s for the hour's closing records to be in the past", flush=True)
            time.sleep(wait)
        port = free_port()
        env = {**os.environ, "DAGSTER_HOME": str(home), "SCHEMA_CATALOG_DIR": str(catalog), "LAKE_ROOT": str(lake),
               "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers, "PII_HMAC_KEY": PII_KEY, "SPARK_MASTER": "local[2]",
               "PLATFORM_AUTOMATION": "off", "PYTHONFAULTHANDLER": "1", "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        if topics_per_run is not None:
            env["TOPICS_PER_RUN"] = str(topics_per_run)
        cpu = DeploymentCpu(f"kafka-lake-bench-{os.getpid()}-{topics}")
        result.cpu_method = cpu.method
        command = cpu.wrap([str(VENV_BIN / "dagster"), "dev", "-m", "platform_assets.definitions", "-h", LOOPBACK,
                            "-p", str(port)])
        started = time.perf_counter()
        try:
            # In the work folder: the run's Spark state (the embedded metastore under .lake/) is the bench's own.
            with serving(command, port, work / "dagster_dev.log", env, work, "dagster dev", start_timeout=1800) as process:
                cpu.follow(process.pid)
                loaded_location(port, "platform_assets.definitions", work / "dagster_dev.log", timeout=1800)
                time.sleep(20)  # the daemon's first loop over its sensors, stopped
                result.phases.append(Phase("start-up (once)", cpu.seconds(), time.perf_counter() - started, cpu.by_kind()))
                instance = DagsterInstance.from_config(str(home))
                selector = {"repositoryLocationName": "platform_assets.definitions", "repositoryName": "__repository__"}

                def start_sensor(name: str) -> None:
                    answer = graphql(port, START_SENSOR, {"selector": {**selector, "sensorName": name}})
                    assert answer["startSensor"]["__typename"] == "Sensor", answer

                def measure_layers(hour, title: str) -> None:
                    for layer, phase in (("raw", "landing"), ("compacted", "compaction"), ("catalog", "registration")):
                        keys = [AssetKey([layer, f"db_{n:05d}", "page_views"]) for n in range(topics)]
                        before, begun, before_split = cpu.seconds(), time.perf_counter(), cpu.by_kind()
                        _wait_for(instance, keys, hour.partition_key, phase, work / "dagster_dev.log")
                        after_split = cpu.by_kind()
                        result.phases.append(Phase(f"{title}: {phase}", cpu.seconds() - before, time.perf_counter() - begun,
                                                   {k: after_split.get(k, 0) - before_split.get(k, 0) for k in after_split}))
                        done = result.phases[-1]  # said as it ends: a long size stopped midway keeps what it measured
                        print(f"  {topics} topics, {done.name}: {done.cpu_s:.1f} CPU s ({done.cpu_s / topics:.3f} a "
                              f"topic-hour), {done.wall_s:.0f} s wall", flush=True)

                # The first hour, as the UI backfills it: every topic's raw asset for the hour.
                start_sensor(SENSORS[1])
                raw = [{"path": [layer, f"db_{n:05d}", "page_views"]} for n in range(topics) for layer in ("raw", "dead_letters")]
                launched = graphql(port, LAUNCH_BACKFILL, {"params": {"assetSelection": raw,
                                                                      "partitionNames": [first.partition_key]}})
                assert launched["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", launched
                measure_layers(first, "first hour (UI backfill)")
                result.runs["backfill"] = len(instance.get_run_records(RunsFilter(
                    tags={"dagster/backfill": launched["launchPartitionBackfill"]["backfillId"]})))
                # The second, as the sensors land every hour.
                cursor = json.dumps({name: second.partition_key for name in names})
                answer = graphql(port, SET_CURSOR, {"selector": {**selector, "sensorName": SENSORS[0]}, "cursor": cursor})
                assert answer["setSensorCursor"]["__typename"] != "PythonError", answer
                start_sensor(SENSORS[0])
                measure_layers(second, "every hour")
                for run in instance.get_runs():
                    result.runs[run.job_name] = result.runs.get(run.job_name, 0) + 1
        finally:
            cpu.close()
    return result


def _wait_for(instance, keys, partition_key: str, phase: str, log: Path) -> None:
    from tests.dagster_servers import log_tail

    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while True:
        done = sum(1 for record in instance.get_asset_records(keys)
                   if (latest := record.asset_entry.last_materialization_record) is not None
                   and latest.partition_key == partition_key)
        if done == len(keys):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{phase}: {done} of {len(keys)} topics done after {PHASE_TIMEOUT_S} s\n{log_tail(log)}")
        time.sleep(3)


def report(results: list[SizeResult]) -> None:
    print(f"\nCPU of the whole deployment, counted by {results[0].cpu_method}; per topic-hour = phase CPU / topics.")
    print(f"{'topics':>7} {'a run':>6} | {'phase':<42} {'CPU s':>8} {'wall s':>7} {'CPU s a topic-hour':>19} | runs")
    base = {}
    for result in results:
        for phase in result.phases:
            per_topic = phase.cpu_s / result.topics
            per = "" if phase.name.startswith("start-up") else f"{per_topic:.3f}"
            ratio = ""
            if not phase.name.startswith("start-up"):
                if phase.name not in base:
                    base[phase.name] = per_topic
                ratio = f" ({per_topic / base[phase.name]:.2f}x)"
            cap = str(result.topics_per_run) if result.topics_per_run else "def."
            print(f"{result.topics:>7} {cap:>6} | {phase.name:<42} {phase.cpu_s:>8.1f} {phase.wall_s:>7.0f} "
                  f"{per + ratio:>19} | {json.dumps(result.runs) if phase is result.phases[-1] else ''}")
            shown = {k: round(v, 1) for k, v in sorted(phase.split.items(), key=lambda kv: -kv[1]) if v >= 0.05}
            print(f"{'':>16}   by process (polled): {shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[60, 500, 2000])
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--records", type=int, default=50, help="records a topic in the hour")
    parser.add_argument("--baseline", action="store_true", help="the smallest size again, one topic a run")
    parser.add_argument("--keep", action="store_true", help="keep the work folders")
    args = parser.parse_args(argv)
    sizes = [(n, None) for n in sorted(args.topics)]
    if args.baseline:
        sizes.insert(0, (min(args.topics), 1))
    results = []
    for topics, per_run in sizes:
        work = Path(tempfile.mkdtemp(prefix=f"bench-runs-{topics}-"))
        print(f"{topics} topics{' one a run' if per_run == 1 else ''}: {work}", flush=True)
        try:
            results.append(measure(topics, args.partitions, args.records, per_run, work))
            report(results)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
