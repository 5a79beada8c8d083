"""Landing hours (or applying them to a current-state table) in a child process that the fault tests can kill with
SIGKILL at a named point or pause.

The child side (`python -m tests.landing_driver …`) wraps the production code from outside, so the
platform itself carries no fault-injection hooks; the test side (`run_landing`) starts and reaps it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Where a landing can be interrupted, in the order a landing passes them:
#   read      while a slice task fetches its Nth batch from Kafka (earlier batches sit in open files)
#   file      right after the Nth Parquet file of the run is complete in the lake
#   manifest  every file of the hour is written, its manifest (the commit) is not
#   cleanup   the manifest is written; the table format has not committed it (Iceberg) or removed the files it
#             replaced and orphans yet
#   committed an Iceberg topic's hour is committed in a snapshot; the files it replaced are not removed yet
# and, applying hours to a change topic's current-state table (`--current`):
#   deletions  the hour's deletions are recorded; the table is not changed yet
#   state-file right after the Nth data file of the current-state table is written
#   merge      the hour's files are written, its snapshot is not committed
#   merged     its snapshot is committed, the application not recorded yet
POINTS = ("read", "file", "manifest", "cleanup", "committed", "deletions", "state-file", "merge", "merged")
SPARK_POINTS = ("manifest", "cleanup", "committed")  # on Spark, reads and file writes happen in executor processes


@dataclass(frozen=True)
class Interruption:
    point: str
    nth: int

    @classmethod
    def parse(cls, text: str | None) -> Interruption | None:
        if not text:
            return None
        point, _, nth = text.partition(":")
        if point not in POINTS or not nth.isdigit() or int(nth) < 1:
            raise ValueError(f"interruption {text!r}: expected POINT:N with POINT one of {', '.join(POINTS)} and N ≥ 1")
        return cls(point, int(nth))

    def __str__(self) -> str:
        return f"{self.point}:{self.nth}"


class _Interrupter:
    """Counts the points a landing passes and kills or pauses this process at the chosen one."""

    def __init__(self, kill: Interruption | None, pause: Interruption | None, signal_dir: Path | None):
        self.kill, self.pause, self.signal_dir = kill, pause, signal_dir
        self.passed: Counter = Counter()

    def at(self, point: str) -> None:
        self.passed[point] += 1
        if self.pause and (point, self.passed[point]) == (self.pause.point, self.pause.nth):
            (self.signal_dir / "reached").touch()
            deadline = time.monotonic() + 300
            while not (self.signal_dir / "go").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"paused at {self.pause} and never told to go on")
                time.sleep(0.05)
        if self.kill and (point, self.passed[point]) == (self.kill.point, self.kill.nth):
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def install(self) -> None:
        from kafka_lake.kafka.log import KafkaLog
        from kafka_lake.lake.manifests import ManifestStore
        from kafka_lake.landing.slice_task import _OpenFile
        from kafka_lake.tables.hive_layout import HiveTables
        from kafka_lake.tables.iceberg.tables import IcebergTables

        at = self.at
        read_batches, close_file, write_manifest = KafkaLog.read_slice_batches, _OpenFile.close, ManifestStore.write

        def read_slice_batches(log, *args, **kwargs):
            for batch in read_batches(log, *args, **kwargs):
                at("read")
                yield batch

        def close(opened):
            landed = close_file(opened)
            at("file")
            return landed

        def write(store, manifest):
            at("manifest")
            return write_manifest(store, manifest)

        def before(point, method):
            def wrapped(*args, **kwargs):
                at(point)
                return method(*args, **kwargs)
            return wrapped

        def after(point, method):
            def wrapped(*args, **kwargs):
                done = method(*args, **kwargs)
                at(point)
                return done
            return wrapped

        KafkaLog.read_slice_batches = read_slice_batches
        _OpenFile.close = close
        ManifestStore.write = write
        HiveTables.commit_hour = before("cleanup", HiveTables.commit_hour)
        IcebergTables.commit_hour = before("cleanup", IcebergTables.commit_hour)
        IcebergTables._clean_after = before("committed", IcebergTables._clean_after)

        from kafka_lake.current import key_ranges
        from kafka_lake.current.ledger import CurrentStateLedger

        CurrentStateLedger.record_deletions = after("deletions", CurrentStateLedger.record_deletions)
        key_ranges.unpartitioned_data_file = after("state-file", key_ranges.unpartitioned_data_file)
        key_ranges.commit_files = after("merged", before("merge", key_ranges.commit_files))


def _slice_runner(runner: str):
    from kafka_lake.landing.slice_task import land_slice

    if runner == "inline":
        return lambda tasks: [land_slice(task) for task in tasks]
    from pyspark.sql import SparkSession

    from resources.spark import spark_config, use_this_python_for_workers
    from spark_jobs.landing_job import run_slices_on_spark

    use_this_python_for_workers()
    builder = SparkSession.builder
    extra = {"spark.ui.enabled": "false", "spark.sql.catalogImplementation": "in-memory"}
    for key, value in spark_config("local[1]", extra).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    return lambda tasks: run_slices_on_spark(spark, tasks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic-file", required=True, help="the topic.yaml of the test topic")
    parser.add_argument("--lake", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--hours", required=True, help="partition keys, comma-separated, landed in this order")
    parser.add_argument("--runner", choices=("inline", "spark"), default="inline")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--kill-at", type=Interruption.parse, help="POINT:N, SIGKILL at the Nth time POINT is passed")
    parser.add_argument("--pause-at", type=Interruption.parse, help="POINT:N, wait there for SIGNAL_DIR/go")
    parser.add_argument("--signal-dir", type=Path)
    parser.add_argument("--current", action="store_true",
                        help="apply the landed hours to the topic's current-state table instead of landing them")
    parser.add_argument("--now", help="the clock the landing reads, ISO 8601 (default: the machine's)")
    parser.add_argument("--open-hour", type=int, help="land the open hour in increments every N minutes; a Hive-layout "
                        "table registers them in Glue (AWS_ENDPOINT_URL_GLUE: moto's in the tests)")
    args = parser.parse_args(argv)
    if args.runner == "spark" and any(i and i.point not in SPARK_POINTS for i in (args.kill_at, args.pause_at)):
        parser.error(f"with --runner spark only {', '.join(SPARK_POINTS)} happen in this process")

    from kafka_lake.hours import KafkaHour
    from kafka_lake.topics.loader import load_topic
    from tests.landing_fixtures import land, landing_settings

    _Interrupter(args.kill_at, args.pause_at, args.signal_dir).install()
    topic = load_topic(Path(args.topic_file))
    settings = replace(landing_settings(args.lake, args.bootstrap), batch_size=args.batch_size)
    if args.current:
        return _apply_current_state(topic, settings, args.hours.split(","))
    run_slices = _slice_runner(args.runner)
    options: dict = {"now": datetime.fromisoformat(args.now)} if args.now else {}
    if args.open_hour:
        from kafka_lake.lake.storage import LakeStorage
        from kafka_lake.tables.catalogs.glue import GlueCatalog
        from kafka_lake.tables.formats import table_format
        from kafka_lake.tables.table_format import TableAccess

        topic = topic.model_copy(update={"open_hour_minutes": args.open_hour})
        access = TableAccess(LakeStorage(args.lake), settings.iceberg_catalog, hive_catalog=GlueCatalog)
        options["table_formats"] = lambda table: table_format(table, access)
    landed = {}
    try:
        for key in args.hours.split(","):
            [result] = land(topic, [KafkaHour.from_partition_key(key)], settings, run_slices,
                            run_id=f"driver-{os.getpid()}", **options)
            landed[key] = dataclasses.asdict(result.manifest.counts)
    except Exception as error:  # the test reads the cause from the last line
        print(json.dumps({"landed": landed, "error": f"{type(error).__name__}: {error}"}))
        return 1
    print(json.dumps({"landed": landed, "error": None}))
    return 0


def _apply_current_state(topic, settings, hours: list[str]) -> int:
    """The hours applied to the topic's current-state table, in this order; reported as `landed` with what each did."""
    from kafka_lake.current.apply import apply_landed_hours
    from kafka_lake.hours import KafkaHour
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.tables.formats import table_format
    from kafka_lake.tables.iceberg.catalog import open_catalog
    from kafka_lake.tables.table_format import TableAccess

    storage = LakeStorage(settings.lake_root)
    raw = table_format(topic, TableAccess(storage, iceberg_catalog=settings.iceberg_catalog))
    applied = {}
    try:
        for done in apply_landed_hours(topic, storage, open_catalog(settings.iceberg_catalog), raw,
                                       [KafkaHour.from_partition_key(key) for key in hours], run_id=f"driver-{os.getpid()}"):
            applied[done.hour] = {"inserts": done.inserts, "updates": done.updates, "deletes": done.deletes,
                                  "attempts": done.attempts}
    except Exception as error:  # the test reads the cause from the last line
        print(json.dumps({"landed": applied, "error": f"{type(error).__name__}: {error}"}))
        return 1
    print(json.dumps({"landed": applied, "error": None}))
    return 0


# --- The test side -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LandingProcess:
    returncode: int
    landed: dict  # partition key → manifest totals, for the hours committed before it ended
    error: str | None
    output: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def start_landing(topic, lake: str, bootstrap: str, hours: list[str], runner: str = "inline",
                  kill_at: str | None = None, pause_at: str | None = None, signal_dir: Path | None = None,
                  env: dict | None = None, current: bool = False, now: datetime | None = None,
                  open_hour: int | None = None) -> subprocess.Popen:
    """Starts the child in a session of its own, so `finish_landing` can reap everything it started (Spark's JVM)."""
    argv = [sys.executable, "-m", "tests.landing_driver", "--topic-file", topic.source_file, "--lake", lake,
            "--bootstrap", bootstrap, "--hours", ",".join(hours), "--runner", runner]
    argv += ["--kill-at", kill_at] if kill_at else []
    argv += ["--pause-at", pause_at, "--signal-dir", str(signal_dir)] if pause_at else []
    argv += ["--current"] if current else []
    argv += ["--now", now.isoformat()] if now else []
    argv += ["--open-hour", str(open_hour)] if open_hour else []
    # A file, not a pipe: Spark's JVM inherits the child's output and may outlive it until reaped.
    output = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(argv, cwd=REPO, env={**os.environ, **(env or {})}, stdout=output,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    process.output_file = output
    return process


def finish_landing(process: subprocess.Popen, timeout: float = 240) -> LandingProcess:
    try:
        process.wait(timeout)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # whatever the child left running in its session
        except ProcessLookupError:
            pass
        process.wait()
    process.output_file.seek(0)
    output = process.output_file.read()
    process.output_file.close()
    last = next((line for line in reversed(output.splitlines()) if line.startswith("{")), None)
    summary = json.loads(last) if last else {"landed": {}, "error": None}
    return LandingProcess(process.returncode, summary["landed"], summary["error"], output)


def run_landing(topic, lake: str, bootstrap: str, hours: list[str], **options) -> LandingProcess:
    return finish_landing(start_landing(topic, lake, bootstrap, hours, **options))


if __name__ == "__main__":
    sys.exit(main())
