"""Benchmark traffic: realistic page views (two schema versions, PII, late events, tombstones, a few broken
records) produced into a local broker, reusing the demo's generator and its high-watermark trick.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import Producer

from dev_services.demo_traffic import BROKEN_KINDS, DeliveryLog, PageViews, finish, kafka_timestamps
from dev_services.tansu import ensure_topic
from kafka_lake.hours import ONE_HOUR, to_millis
from kafka_lake.table_spec import TableSpec

BROKEN_EVERY = 200_000  # one broken record in this many: the columnar path must cut it out and land the rest


@dataclass(frozen=True)
class Produced:
    topic: TableSpec
    records: int  # every record written, closing records included
    partitions: int
    hours: tuple[datetime, ...]
    seconds: float


def bench_topic(page_views: TableSpec, kafka_topic: str, max_rows_per_task: int) -> TableSpec:
    """The catalog's page views, landed from another Kafka topic with its own slice limit."""
    return page_views.model_copy(update=dict(topic=kafka_topic, max_rows_per_task=max_rows_per_task))


def producer_for(bootstrap: str) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 100_000, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000, "acks": "all",
        "compression.type": "none",
    })


def send(producer: Producer, topic: str, partition: int, timestamp_ms: int, key, value, deliveries) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition, timestamp=timestamp_ms, on_delivery=deliveries)
            return
        except BufferError:
            producer.poll(0.05)


def produce_page_views(bootstrap: str, topic: TableSpec, hours: list[datetime], records: int, partitions: int,
                       seed: int = 11) -> Produced:
    """`records` page views spread evenly over `hours` and `partitions`, v1 then v2 (a mid-stream upgrade),
    then one closing record per partition in the hour after, alone in its batch (exact high watermarks on Tansu)."""
    started = time.monotonic()
    ensure_topic(bootstrap, topic.topic, partitions)
    rng = random.Random(seed)
    generator = PageViews(topic, rng)
    deliveries = DeliveryLog()
    producer = producer_for(bootstrap)
    per_hour = records // len(hours)
    written = 0
    for hour_index, hour in enumerate(hours):
        count = per_hour if hour_index < len(hours) - 1 else records - per_hour * (len(hours) - 1)
        for stamp in kafka_timestamps([hour], count, rng):
            version = 1 if written < records // 2 else 2
            broken = BROKEN_KINDS[written % len(BROKEN_KINDS)] if written % BROKEN_EVERY == BROKEN_EVERY // 2 else None
            record = generator.next_record(stamp, version, partitions, broken)
            send(producer, topic.topic, written % partitions, stamp, record.key, record.value, deliveries)
            written += 1
            if written % 5000 == 0:
                producer.poll(0)
    finish(producer, deliveries, bootstrap, timeout=300)
    close_at = to_millis(hours[-1] + ONE_HOUR) + 1000
    for partition in range(partitions):
        closing = generator.closing_record(close_at, partition, partitions)
        send(producer, topic.topic, partition, close_at, closing.key, closing.value, deliveries)
        finish(producer, deliveries, bootstrap)
    return Produced(topic, written + partitions, partitions, tuple(hours), time.monotonic() - started)


def produce_one_long_slice(bootstrap: str, topic: TableSpec, hours: list[datetime], records: int,
                           pool_size: int = 100_000, seed: int = 13) -> Produced:
    """`records` page views on one partition, for a single slice as long as a backfill gives a task.

    A pool of realistic values is produced again and again (with fresh Kafka timestamps), so the slice costs
    the broker's time rather than the generator's.
    """
    started = time.monotonic()
    ensure_topic(bootstrap, topic.topic, 1)
    rng = random.Random(seed)
    generator = PageViews(topic, rng)
    version = topic.schema_versions[-1]
    stamps = kafka_timestamps(hours, pool_size // len(hours) + 1, rng)[:pool_size]
    pool = [(s, generator.next_record(s, version.version, 1, None)) for s in stamps]
    pool = [(s, r.key, r.value) for s, r in pool if r.value is not None]  # tombstones would add no bytes
    deliveries = DeliveryLog()
    producer = producer_for(bootstrap)
    span = to_millis(hours[-1] + ONE_HOUR) - to_millis(hours[0])
    for index in range(records):
        _stamp, key, value = pool[index % len(pool)]
        # Kafka time keeps moving forward across repetitions of the pool, inside the hours.
        send(producer, topic.topic, 0, to_millis(hours[0]) + index * span // records, key, value, deliveries)
        if index % 5000 == 0:
            producer.poll(0)
    finish(producer, deliveries, bootstrap, timeout=600)
    _stamp, key, value = pool[0]
    send(producer, topic.topic, 0, to_millis(hours[-1] + ONE_HOUR) + 1000, key, value, deliveries)
    finish(producer, deliveries, bootstrap)
    return Produced(topic, records + 1, 1, tuple(hours), time.monotonic() - started)
