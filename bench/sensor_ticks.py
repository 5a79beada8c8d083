"""`make bench-sensors`: how long a tick of each platform sensor takes with many topics × partitions.

On a fresh local broker: N topics of P partitions, one record per partition stamped after the hour the
sensors look at, and a catalog entry per topic. Each sensor tick is timed against two baselines from the
same run: one metadata request (the least any tick must do) and the per-partition way (a watermark
request and a one-record read per partition, as `KafkaLog` does for one topic).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from dagster import build_sensor_context, instance_for_test

from dev_services.tansu import TansuBroker, admin_client
from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.kafka.cluster import KafkaCluster
from kafka_lake.kafka.log import KafkaLog, consumer_config
from kafka_lake.topics.loader import load_catalog
from platform_assets import sensors
from resources import AlertWebhookResource, KafkaResource, LakeStorageResource, SchemaRegistryResource

REPO = Path(__file__).resolve().parent.parent


def write_catalog(directory: Path, topics: int) -> None:
    template = REPO / "schema_catalog" / "shop" / "page_views"
    for n in range(topics):
        folder = directory / "bench" / f"topic_{n:03d}"
        shutil.copytree(template, folder)
        text = (folder / "topic.yaml").read_text()
        text = text.replace("topic: shop.page_views", f"topic: bench.topic_{n:03d}")
        text = text.replace("registry_id: 1001", f"registry_id: {100_000 + 2 * n}")
        (folder / "topic.yaml").write_text(text.replace("registry_id: 1002", f"registry_id: {100_001 + 2 * n}"))


def create_topics(broker: TansuBroker, names: list[str], partitions: int) -> None:
    admin = admin_client(broker.bootstrap_servers)
    for future in admin.create_topics([NewTopic(name, partitions) for name in names]).values():
        future.result(60)
    deadline = time.monotonic() + 120
    while len(admin.list_topics(timeout=10).topics.keys() & set(names)) < len(names):
        assert time.monotonic() < deadline, "topics were not created"
        time.sleep(0.5)


def produce_closing_records(broker: TansuBroker, names: list[str], partitions: int, stamped: datetime) -> None:
    """One record a partition; every one delivered before the ticks are timed (thousands of partitions take minutes)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    for name in names:
        for p in range(partitions):
            producer.produce(name, value=b"\x00", partition=p, timestamp=to_millis(stamped))
            producer.poll(0)
    deadline = time.monotonic() + 900
    while producer.flush(10) and time.monotonic() < deadline:
        pass
    assert not len(producer), f"{len(producer)} closing record(s) not delivered in 15 minutes"


CPU: dict[str, float] = {}  # each tick's CPU seconds (this process: the sensor's own work), best of its repeats


def timed(action, repeat: int = 3, name: str = "") -> float:
    best = float("inf")
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        action()
        best = min(best, time.perf_counter() - started)
        CPU[name] = min(CPU.get(name, float("inf")), time.process_time() - cpu)
    return best


def per_partition_tails(config: dict, names: list[str], partitions: int) -> None:
    for name in names:
        with KafkaLog(config, name) as log:
            for p in range(partitions):
                _, end = log.bounds(p)
                log.record_at_or_after(p, end - 1, end)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=32)
    args = parser.parse_args()
    names = [f"bench.topic_{n:03d}" for n in range(args.topics)]
    hour = KafkaHour.containing(datetime.now(timezone.utc)).previous()
    now = hour.end + timedelta(minutes=5)  # inside the window where closing an hour asks the broker
    with tempfile.TemporaryDirectory() as work, TansuBroker(log_file=Path(work) / "tansu.log") as broker:
        started = time.perf_counter()
        create_topics(broker, names, args.partitions)
        produce_closing_records(broker, names, args.partitions, hour.end + timedelta(minutes=3))
        setup = time.perf_counter() - started
        write_catalog(Path(work) / "catalog", args.topics)
        catalog = load_catalog(Path(work) / "catalog")
        config = consumer_config(broker.bootstrap_servers)
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        lake = LakeStorageResource(root=str(Path(work) / "lake"))
        sensors._now = lambda: now
        cursor = json.dumps({name: hour.partition_key for name in names})
        with instance_for_test() as instance:
            def tick(sensor, cursor=None, **resources):
                return sensor(build_sensor_context(instance=instance, cursor=cursor,
                                                    resources={"alerts": AlertWebhookResource(), **resources}))

            landing, health, missing = (sensors.landing_sensor(catalog), sensors.health_sensor(catalog),
                                        sensors.missing_topics_sensor(catalog))
            requested = tick(landing, cursor, kafka=kafka).run_requests
            carried = sum(int(r.tags["topics"].split(":")[0]) if "topics" in r.tags else 1 for r in requested)
            assert carried == args.topics, f"{carried} topics' hours requested for {args.topics} topics"
            results = {
                "metadata request (baseline)": timed(lambda: KafkaCluster(config).topics(), name="metadata"),
                "per-partition tails (baseline)": timed(lambda: per_partition_tails(config, names, args.partitions), 1,
                                                        name="per-partition"),
                "land_closed_hours": timed(lambda: tick(landing, cursor, kafka=kafka), name="land_closed_hours"),
                "topic_health": timed(lambda: tick(health, kafka=kafka, lake=lake, alerts=AlertWebhookResource(),
                                                   schema_registry=SchemaRegistryResource()), name="topic_health"),
                "topics_missing_from_catalog": timed(lambda: tick(missing, kafka=kafka, lake=lake, alerts=AlertWebhookResource()),
                                                     name="topics_missing_from_catalog"),
            }
    partitions = args.topics * args.partitions
    print(f"{args.topics} topics × {args.partitions} partitions = {partitions} partitions (set-up {setup:.1f}s)")
    print(f"{'tick':32} {'seconds':>8} {'× metadata':>11} {'per-partition ÷ tick':>21}")
    metadata, naive = results["metadata request (baseline)"], results["per-partition tails (baseline)"]
    for name, seconds in results.items():
        print(f"{name:32} {seconds:8.3f} {seconds / metadata:11.1f} {naive / seconds:21.1f}")
    print("CPU s a tick (this process): " + ", ".join(f"{name} {cpu:.2f}" for name, cpu in CPU.items()))
    print(f"RESULT land_closed_hours={results['land_closed_hours']:.3f}s topic_health={results['topic_health']:.3f}s "
          f"per_partition_baseline={naive:.3f}s speedup={naive / results['land_closed_hours']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
