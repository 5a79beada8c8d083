"""`make bench-history`: what landing, compacting and registering one hour cost on a table with a year of hourly
history, against the same on an empty table, in one run.

On the S3 server (SeaweedFS) and the broker (Tansu) started here: a table with `--hours` synthetic hours in the real
layout (a manifest per hour naming its files, data files in their placement folders, late events in the hour
before, dead letters, the attempt journal and the placement index), written in parallel with boto3; then one new hour
produced to the broker and, on that table and on an empty one, landed (the core's landing, its slices run in this
process), compacted (in this process) and registered in Glue (moto's server: no Glue runs here). Every S3 request
goes through a counting proxy; each stage prints seconds and requests by kind, and the ratio year / empty. A tick of
`compact_and_register_landed_hours` after the landing, and the freshness check, are measured the same way.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_lake.hours import ONE_HOUR, KafkaHour
from kafka_lake.lake import layout
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import HourManifest, LandedFile, PartitionLanding
from kafka_lake.table_spec import TableSpec

KINDS = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")
FILES_PER_PLACEMENT = 2  # two slices a partition
PARTITIONS = 3
SYNTHETIC_OFFSETS = 10**15


def request_kind(method: str, path: str) -> str:
    """An S3 request's kind as billed: a listing is a GET on the bucket with `list-type`."""
    query = parse_qs(urlparse(path).query, keep_blank_values=True)
    if method == "GET" and ("list-type" in query or urlparse(path).path.strip("/").count("/") == 0):
        return "LIST"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method


class RequestCounter:
    """Counts the requests a counting proxy forwards, by kind; `stage()` gives those made inside a block."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.lock = threading.Lock()

    def __call__(self, method: str, path: str, attempts: int) -> bool:
        with self.lock:
            self.counts[request_kind(method, path)] += 1
        return False  # never fail: the proxy only counts

    @contextmanager
    def stage(self, into: StageCost):
        with self.lock:
            before = Counter(self.counts)
        started = time.monotonic()
        yield
        into.seconds += time.monotonic() - started
        with self.lock:
            into.requests.update(self.counts - before)


@dataclass
class StageCost:
    seconds: float = 0.0
    requests: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.requests.values())


def synthetic_hour(topic: TableSpec, hour: KafkaHour) -> HourManifest:
    """A landed hour as the landing writes it: per partition two files in the hour's placement folder and one of late
    events in the hour before, and a dead-letter file. Its offset ranges are empty, so the hour landed after the
    history starts at the broker's first offsets, and its files are named past any offset the broker holds, so that
    hour's landing never takes them for files of its own ranges."""
    files = []
    for partition in range(PARTITIONS):
        for placement, count in ((hour.start, FILES_PER_PLACEMENT), (hour.start - ONE_HOUR, 1)):
            for n in range(count):
                folder = layout.data_directory(topic.database, topic.table, 1, placement)
                offset = SYNTHETIC_OFFSETS + n
                files.append(LandedFile(f"{folder}/{layout.data_file_name(topic.topic, partition, offset)}", "data",
                                        partition, offset, 1, 0, 1, KafkaHour(placement).partition_key))
    dead = layout.dead_letter_directory(topic.database, topic.table, hour.start)
    files.append(LandedFile(f"{dead}/{layout.data_file_name(topic.topic, 0, SYNTHETIC_OFFSETS)}", "dead_letter", 0,
                            SYNTHETIC_OFFSETS, 1, 0, None,
                            hour.partition_key))
    return HourManifest(
        database=topic.database, table=topic.table, topic=topic.topic, hour=hour.partition_key,
        partitions=tuple(PartitionLanding(p, 0, 0, LandingCounts()) for p in range(PARTITIONS)),
        files=tuple(files), landed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def synthetic_objects(topic: TableSpec, hour: KafkaHour, parquet: bytes) -> dict[str, bytes]:
    """Every object the landing of `hour` leaves: its files, its manifest, its attempt journal and its entries in the
    placement index."""
    manifest = synthetic_hour(topic, hour)
    objects = {f.path: parquet for f in manifest.files}
    objects[layout.manifest_path(topic.database, topic.table, hour)] = manifest.to_json()
    for file in manifest.files:
        folder = file.path.rsplit("/", 1)[0]
        objects[f"{layout.attempt_journal_directory(topic.database, topic.table, hour)}/{layout.folder_as_name(folder)}"] = b""
        if file.kind == "data":
            objects[layout.placement_index_path(topic.database, topic.table, folder, hour)] = b""
    return objects


def tiny_parquet() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"_kafka_partition": pa.array([0], pa.int32()), "_kafka_offset": pa.array([0], pa.int64())}), sink)
    return sink.getvalue().to_pybytes()


def write_history(client, bucket: str, prefix: str, topic: TableSpec, hours: list[KafkaHour], threads: int = 32) -> int:
    """Writes the synthetic hours under `prefix` of `bucket` with a boto3 client, in parallel; returns the objects."""
    parquet = tiny_parquet()

    def put_hour(hour: KafkaHour) -> int:
        objects = synthetic_objects(topic, hour, parquet)
        for key, body in objects.items():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=body)
        return len(objects)

    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(put_hour, hours))


def year_before(hour: KafkaHour, hours: int) -> list[KafkaHour]:
    return [KafkaHour(hour.start - n * ONE_HOUR) for n in range(hours, 0, -1)]


# --- The run ---------------------------------------------------------------------------------------------------------

def _done(value) -> Future:
    done: Future = Future()
    done.set_result(value)
    return done


def land(topic: TableSpec, hour: KafkaHour, settings) -> object:
    from kafka_lake.landing.driver import land_hours
    from kafka_lake.landing.slice_task import land_slice

    [result] = land_hours(topic, [hour], settings, lambda tasks: _done([land_slice(t) for t in tasks]),
                          now=hour.end + timedelta(days=1))
    return result


def compact(topic: TableSpec, hour: KafkaHour, storage) -> object:
    from kafka_lake.upkeep.compaction import compact_hour, compact_partition

    return compact_hour(topic, hour.start, storage, lambda tasks: [compact_partition(t) for t in tasks], lambda m: None)


def register(topic: TableSpec, hour: KafkaHour, storage, catalog) -> object:
    """What `catalog/<db>/<table>` does for one hour: the table ensured, the hour's partitions made equal to storage."""
    from kafka_lake.lake.table_partition import TablePartition
    from kafka_lake.lake.table_state import storage_partitions
    from kafka_lake.tables.catalogs.reconciliation import reconcile
    from kafka_lake.tables.hive_layout import definition_for

    definition = definition_for(topic, storage)
    catalog.ensure_table(definition)
    stored = storage_partitions(storage, topic.database, topic.table,
                                among=[TablePartition(v, hour.start) for v in definition.schema_versions])
    return reconcile(catalog, definition, stored, only_hours=[hour.start])


def sensor_tick(topic_catalog, lake_root: str, instance, cursor: int) -> object:
    """One tick of `compact_and_register_landed_hours` that finds the landing's materialization (after `cursor`)."""
    from dagster import build_sensor_context

    from platform_assets import sensors
    from resources import AlertWebhookResource, LakeStorageResource

    sensor = sensors.follow_up_sensor(topic_catalog)
    context = build_sensor_context(instance=instance, cursor=str(cursor), resources={"lake": LakeStorageResource(root=lake_root),
                                                                                     "alerts": AlertWebhookResource()})
    return sensor(context)


def freshness(instance, topic: TableSpec, now: datetime):
    from platform_assets.checks import evaluate_freshness

    return evaluate_freshness(instance, topic, now)


def record_materializations(instance, topic: TableSpec, hours: list[KafkaHour]) -> int:
    """The raw hours as Dagster has seen them landed, in one batch of events; the newest event's storage id."""
    from dagster import AssetMaterialization, DagsterEvent, DagsterEventType, EventLogEntry
    from dagster._core.events import StepMaterializationData

    from platform_assets.keys import raw_key

    entries = [
        EventLogEntry(
            error_info=None, level="INFO", user_message="", run_id="", timestamp=time.time(),
            dagster_event=DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION.value, "bench", event_specific_data=StepMaterializationData(
                AssetMaterialization(raw_key(topic), partition=hour.partition_key))),
        )
        for hour in hours
    ]
    if entries:
        instance.event_log_storage.store_event_batch(entries)
    return instance.event_log_storage.get_maximum_record_id() or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=int, default=8760, help="hours of history (a year: 8760)")
    parser.add_argument("--threads", type=int, default=32)
    args = parser.parse_args()

    from dagster import instance_for_test
    from moto.server import ThreadedMotoServer

    from dev_services.ports import free_port
    from dev_services.seaweedfs import SeaweedS3
    from dev_services.tansu import TansuBroker
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.tables.catalogs.glue import GlueCatalog
    from kafka_lake.topics.loader import TopicCatalog
    from tests.landing_fixtures import (
        HOURS,
        build_traffic,
        landing_settings,
        produce,
        unique_topic_name,
        write_test_topic,
    )
    from tests.s3_fault_proxy import S3FaultProxy

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    work = Path(tempfile.mkdtemp(prefix="bench-history-"))
    counter = RequestCounter()
    glue_port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=glue_port, verbose=False)
    with TansuBroker(log_file=work / "tansu.log") as broker, SeaweedS3(data_dir=work / "s3") as s3, \
            S3FaultProxy(s3.endpoint_url, counter) as proxy:
        moto.start()
        try:
            s3.create_bucket("lake")
            os.environ.update(s3.env())
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint_url  # every lake request is counted
            os.environ["AWS_ENDPOINT_URL_GLUE"] = f"http://127.0.0.1:{glue_port}"
            kafka_topic = unique_topic_name()
            topic = write_test_topic(work / "catalog", kafka_topic, allowed_lateness_hours=0)
            broker.create_topic(kafka_topic, PARTITIONS)
            produce(broker.bootstrap_servers, build_traffic(topic))
            hour = KafkaHour(HOURS[0])
            history = year_before(hour, args.hours)

            started = time.monotonic()
            objects = write_history(s3.s3_client(timeout=60), "lake", "year", topic, history, args.threads)
            print(f"history: {len(history)} hours, {objects} objects written in {time.monotonic() - started:.1f} s")

            glue = GlueCatalog()
            costs: dict[str, dict[str, StageCost]] = {}
            for lake in ("warm-up", "empty", "year"):  # the first round warms clients and caches; it is not shown
                root = f"s3://lake/{lake}"
                settings = landing_settings(root, broker.bootstrap_servers)
                storage = LakeStorage(root)
                stages = costs[lake] = {name: StageCost() for name in ("land", "compact", "register", "sensor_tick", "freshness")}
                with counter.stage(stages["land"]):
                    land(topic, hour, settings)
                with counter.stage(stages["compact"]):
                    compact(topic, hour, storage)
                with counter.stage(stages["register"]):
                    register(topic, hour, storage, glue)
                with instance_for_test() as instance:
                    cursor = record_materializations(instance, topic, history if lake == "year" else [])
                    record_materializations(instance, topic, [hour])
                    with counter.stage(stages["sensor_tick"]):
                        sensor_tick(TopicCatalog((topic,)), root, instance, cursor)
                    with counter.stage(stages["freshness"]):
                        freshness(instance, topic, hour.end + timedelta(minutes=30))
                glue.client.delete_table(DatabaseName=topic.database, Name=topic.table)
            report(costs)
        finally:
            moto.stop()
    shutil.rmtree(work, ignore_errors=True)


def report(costs: dict[str, dict[str, StageCost]]) -> None:
    year, empty = costs["year"], costs["empty"]
    print(f"{'stage':<12} {'lake':<6} {'seconds':>8} {'requests':>8}  " + " ".join(f"{k:>6}" for k in KINDS))
    worst_time, worst_requests = 0.0, 0.0
    for stage in year:
        for name, cost in (("year", year[stage]), ("empty", empty[stage])):
            print(f"{stage:<12} {name:<6} {cost.seconds:8.3f} {cost.total:8d}  " + " ".join(f"{cost.requests[k]:6d}" for k in KINDS))
        time_ratio = year[stage].seconds / max(empty[stage].seconds, 1e-3)
        request_ratio = year[stage].total / empty[stage].total if empty[stage].total else (1.0 if not year[stage].total else float("inf"))
        print(f"{stage:<12} {'ratio':<6} {time_ratio:8.2f} {request_ratio:8.2f}")
        if stage in ("land", "compact", "register"):
            worst_time, worst_requests = max(worst_time, time_ratio), max(worst_requests, request_ratio)
    year_total = sum(year[s].total for s in ("land", "compact", "register"))
    empty_total = sum(empty[s].total for s in ("land", "compact", "register"))
    print(f"RESULT history worst_time_ratio={worst_time:.2f} worst_request_ratio={worst_requests:.2f} "
          f"year_requests={year_total} empty_requests={empty_total}")


if __name__ == "__main__":
    main()
