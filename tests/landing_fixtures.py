"""Known traffic for landing tests: a small topic with two schema versions, PII, late events,
tombstones and one broken record of every dead-letter cause, produced to the real broker.

The expected lake content is computed from what was produced, never hard-coded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import uuid
import zlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
from confluent_kafka import Producer

from kafka_lake.hours import floor_hour, to_millis
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.lake import layout
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import load_topic

HOURS = [datetime(2026, 11, 1, hour, tzinfo=timezone.utc) for hour in (10, 11, 12)]
RAW_HOURS = [*HOURS, HOURS[-1] + timedelta(hours=1)]  # the closing records land in the fourth
PARTITIONS = 3

V1 = {
    "type": "record", "name": "OrderEvent", "namespace": "com.example.test",
    "fields": [
        {"name": "event_id", "type": "long"},
        {"name": "user_id", "type": ["null", "string"], "default": None},
        {"name": "meta", "type": {"type": "record", "name": "Meta", "fields": [
            {"name": "occurred_at", "type": ["null", "string"], "default": None},
        ]}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "quantity", "type": "int"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
V2 = {
    **V1,
    "fields": [
        *[f if f["name"] != "quantity" else {"name": "quantity", "type": "long"} for f in V1["fields"]],
        {"name": "channel", "type": ["null", {"type": "enum", "name": "Channel", "symbols": ["WEB", "APP"]}], "default": None},
    ],
}


def write_test_topic(catalog_dir: Path, kafka_topic: str, max_rows_per_task: int = 1_000_000,
                     allowed_lateness_hours: int = 3, retention_days: int = 90,
                     dead_letter_retention_days: int | None = None, table_format: str | None = None) -> TableSpec:
    folder = catalog_dir / "e2e" / "orders"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "v1.avsc").write_text(json.dumps(V1))
    (folder / "v2.avsc").write_text(json.dumps(V2))
    (folder / "topic.yaml").write_text(
        f"""topic: {kafka_topic}
owner: team-test
time_partitioning:
  source: event_time
  field: meta.occurred_at
start_hour: "2026-11-01T00:00Z"
schema_versions:
  - {{version: 1, file: v1.avsc, registry_id: {zlib.crc32(kafka_topic.encode()) % 10**6 * 10 + 1}}}
  - {{version: 2, file: v2.avsc, registry_id: {zlib.crc32(kafka_topic.encode()) % 10**6 * 10 + 2}}}
pii_fields: [user_id]
subject_field: user_id
max_rows_per_task: {max_rows_per_task}
allowed_lateness_hours: {allowed_lateness_hours}
retention_days: {retention_days}
dead_letter_rate_threshold: 0.5
"""
        + (f"dead_letter_retention_days: {dead_letter_retention_days}\n" if dead_letter_retention_days else "")
        + (f"table_format: {table_format}\n" if table_format else "")
    )
    return load_topic(folder / "topic.yaml")


@dataclass
class Produced:
    partition: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    kind: str  # "row", "tombstone" or a dead-letter cause
    record: dict | None = None
    version: int | None = None
    offset: int = -1


@dataclass
class Traffic:
    topic: TableSpec
    produced: list[Produced] = field(default_factory=list)

    def rows(self) -> list[Produced]:
        return [p for p in self.produced if p.kind == "row"]

    def dead(self) -> list[Produced]:
        return [p for p in self.produced if p.kind not in ("row", "tombstone")]

    def in_hours(self, hours: list[datetime]) -> Traffic:
        starts = {to_millis(h) // 3_600_000 for h in hours}
        return Traffic(self.topic, [p for p in self.produced if p.timestamp_ms // 3_600_000 in starts])


def _rfc3339(moment: datetime, offset_hours: int = 0) -> str:
    zone = timezone(timedelta(hours=offset_hours))
    text = moment.astimezone(zone).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def build_traffic(topic: TableSpec, per_partition_per_hour: int = 12, seed: int = 3) -> Traffic:
    """Records over HOURS, then one closing record per partition in the hour after."""
    rng = random.Random(seed)
    traffic = Traffic(topic)
    v1, v2 = topic.version(1), topic.version(2)
    event_id = 0
    broken_kinds = ["bad_magic_byte", "unknown_schema_id", "undecodable_payload", "trailing_bytes",
                    "truncated_header", "missing_event_time", "unparseable_event_time"]
    for hour_index, hour in enumerate(HOURS):
        for partition in range(PARTITIONS):
            for n in range(per_partition_per_hour):
                kafka_time = hour + timedelta(seconds=30 + n * (3500 // per_partition_per_hour))
                event_id += 1
                version = v1 if (hour_index, n) < (1, per_partition_per_hour // 2) else v2
                occurred = kafka_time - timedelta(seconds=rng.randint(1, 20))
                if n % 7 == 3:
                    occurred = kafka_time - timedelta(hours=2)  # a late event: lands in its own older hour
                record = {
                    "event_id": event_id,
                    "user_id": None if n % 5 == 0 else f"user-{rng.randint(1, 40)}",
                    "meta": {"occurred_at": _rfc3339(occurred, offset_hours=2 if n % 4 == 0 else 0)},
                    "amount": Decimal(rng.randint(1, 99999)) / 100,
                    "quantity": rng.randint(1, 9),
                    "tags": [rng.choice(["a", "b", "c"]) for _ in range(rng.randint(0, 3))],
                }
                if version is v2:
                    record["channel"] = rng.choice([None, "WEB", "APP"])
                    record["quantity"] = rng.randint(1, 9) * 10**10  # needs the widened long
                key = f"k{event_id}".encode()
                value = encode_confluent(version.registry_id, version.parsed, record)
                traffic.produced.append(Produced(partition, to_millis(kafka_time), key, value, "row", record, version.version))
                if n == 5:
                    traffic.produced.append(Produced(partition, to_millis(kafka_time) + 1, key, None, "tombstone"))
                if n == 7:
                    kind = broken_kinds[(hour_index * PARTITIONS + partition) % len(broken_kinds)]
                    traffic.produced.append(
                        Produced(partition, to_millis(kafka_time) + 2, b"broken", _broken_value(kind, v1), kind)
                    )
    # Every cause at least once, whatever the rotation above covered.
    for index, kind in enumerate(broken_kinds):
        moment = HOURS[1] + timedelta(minutes=59, seconds=index)
        traffic.produced.append(Produced(index % PARTITIONS, to_millis(moment), None, _broken_value(kind, v1), kind))
    closing = HOURS[-1] + timedelta(hours=1, minutes=1)
    for partition in range(PARTITIONS):
        event_id += 1
        record = {"event_id": event_id, "user_id": None, "meta": {"occurred_at": _rfc3339(closing)},
                  "amount": Decimal("1.00"), "quantity": 1, "tags": [], "channel": None}
        traffic.produced.append(
            Produced(partition, to_millis(closing), None, encode_confluent(v2.registry_id, v2.parsed, record), "row", record, 2)
        )
    traffic.produced.sort(key=lambda p: (p.partition, p.timestamp_ms))
    return traffic


def _broken_value(kind: str, v1) -> bytes:
    good = {"event_id": 0, "user_id": None, "meta": {"occurred_at": "2026-11-01T11:00:00Z"},
            "amount": Decimal("1.00"), "quantity": 1, "tags": []}
    framed = encode_confluent(v1.registry_id, v1.parsed, good)
    if kind == "bad_magic_byte":
        return b'{"event_id": 1}'
    if kind == "unknown_schema_id":
        return b"\x00\x00\x06\x79\x42" + framed[5:]
    if kind == "undecodable_payload":
        return framed[:5] + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
    if kind == "trailing_bytes":
        return framed + b"\x00\x07"
    if kind == "truncated_header":
        return b"\x00\x00"
    if kind == "missing_event_time":
        return encode_confluent(v1.registry_id, v1.parsed, {**good, "meta": {"occurred_at": None}})
    if kind == "unparseable_event_time":
        return encode_confluent(v1.registry_id, v1.parsed, {**good, "meta": {"occurred_at": "yesterday at noon"}})
    raise ValueError(kind)


EXPECTED_CAUSE = {
    "bad_magic_byte": "bad_magic_byte", "unknown_schema_id": "unknown_schema_id",
    "undecodable_payload": "undecodable_payload", "trailing_bytes": "undecodable_payload",
    "truncated_header": "undecodable_payload", "missing_event_time": "missing_event_time",
    "unparseable_event_time": "unparseable_event_time",
}


def produce(bootstrap_servers: str, traffic: Traffic) -> None:
    """Produces in order per partition; each partition's last record goes alone in its own batch,
    which makes Tansu's high watermark exact (see TESTING.md)."""
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "enable.idempotence": False})
    last_of = {}
    for item in traffic.produced:
        last_of[item.partition] = item

    def delivered(item):
        def callback(error, message):
            assert error is None, error
            item.offset = message.offset()
        return callback

    for item in traffic.produced:
        if item is not last_of[item.partition]:
            producer.produce(traffic.topic.topic, value=item.value, key=item.key, partition=item.partition,
                             timestamp=item.timestamp_ms, on_delivery=delivered(item))
    producer.flush(30)
    for item in last_of.values():
        producer.produce(traffic.topic.topic, value=item.value, key=item.key, partition=item.partition,
                         timestamp=item.timestamp_ms, on_delivery=delivered(item))
        producer.flush(30)
    assert all(p.offset >= 0 for p in traffic.produced)


def placement_of(item: Produced) -> tuple[int, str]:
    occurred = datetime.fromisoformat(item.record["meta"]["occurred_at"].replace("Z", "+00:00"))
    return item.version, layout.hour_directory(floor_hour(occurred))


def pseudonym(value: str | None, key: str) -> str | None:
    return None if value is None else hmac.new(key.encode(), value.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class LakeRow:
    path: str
    row: dict


def read_lake(storage: LakeStorage, prefix: str) -> list[LakeRow]:
    rows = []
    for stored in storage.list_files(prefix):
        if not stored.path.endswith(".parquet"):
            continue
        table = pq.read_table(storage.full_path(stored.path), filesystem=storage.filesystem)
        rows.extend(LakeRow(stored.path, row) for row in table.to_pylist())
    return rows


def lake_snapshot(storage: LakeStorage, topic: TableSpec) -> dict[str, list]:
    """Every file of the table and its dead letters with its rows, as comparable values."""
    snapshot: dict[str, list] = {}
    for prefix in (layout.table_prefix(topic.database, topic.table), layout.dead_letter_prefix(topic.database, topic.table)):
        for row in read_lake(storage, prefix):
            snapshot.setdefault(row.path, []).append(repr(sorted(row.row.items())))
    return {path: sorted(rows) for path, rows in snapshot.items()}


def unique_topic_name() -> str:
    return f"e2e.orders.{uuid.uuid4().hex[:8]}"


def landing_settings(lake_root: str, bootstrap_servers: str):
    """Landing settings for the test topics: the broker's consumer config, the test PII key, and the Iceberg catalog
    the environment names (`ICEBERG_CATALOG_URI`, `ICEBERG_REST_URI`), else the embedded one."""
    from kafka_lake.kafka.log import consumer_config
    from kafka_lake.landing.landing_settings import LandingSettings
    from kafka_lake.settings import PlatformSettings
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig
    from tests.constants import PII_TEST_KEY

    iceberg = IcebergCatalogConfig.from_settings(replace(PlatformSettings.from_env(), lake_root=lake_root))
    return LandingSettings(lake_root=lake_root, kafka_config=consumer_config(bootstrap_servers), pii_key=PII_TEST_KEY.encode(),
                           iceberg_catalog=iceberg)


def topic_with_traffic(broker, catalog_dir: Path, partitions: int = PARTITIONS, **topic_options) -> tuple[TableSpec, Traffic]:
    """Given a new topic on `broker` (a `TansuBroker`) holding `build_traffic`'s records."""
    kafka_topic = unique_topic_name()
    topic = write_test_topic(catalog_dir, kafka_topic, **topic_options)
    broker.create_topic(kafka_topic, partitions)
    traffic = build_traffic(topic)
    produce(broker.bootstrap_servers, traffic)
    return topic, traffic


def rows_as_readers_see_them(storage: LakeStorage, topic: TableSpec) -> dict[tuple[int, int], tuple[str, str]]:
    """The rows at each partition's current location (what the catalog points at), by (partition, offset);
    fails if a reader would see a row twice."""
    from kafka_lake.lake.table_state import storage_partitions

    seen = {}
    for partition, location in storage_partitions(storage, topic.database, topic.table).items():
        for row in read_lake(storage, location):
            if row.path.rsplit("/", 1)[0] != location:
                continue  # a generation folder below the raw folder is not part of this location
            key = (row.row["_kafka_partition"], row.row["_kafka_offset"])
            assert key not in seen, f"{key} seen twice"
            seen[key] = (str(partition), repr(sorted(row.row.items())))
    return seen


def started_at_once(run_slices):
    """A `start_slices` for `land_hours` that runs each hour's slices with `run_slices` before returning."""
    from concurrent.futures import Future

    def start(tasks) -> Future:
        done: Future = Future()
        try:
            done.set_result(run_slices(tasks))
        except BaseException as error:  # handed to the landing, as a failed Spark job would be
            done.set_exception(error)
        return done

    return start


def land(topic: TableSpec, hours, settings, run_slices, **options) -> list:
    """Lands `hours` (datetimes or `KafkaHour`s) through the production path, `land_hours`, each hour's slices run
    by `run_slices`; the results of the hours committed."""
    from kafka_lake.hours import KafkaHour
    from kafka_lake.landing.driver import land_hours

    kafka_hours = [hour if isinstance(hour, KafkaHour) else KafkaHour(hour) for hour in hours]
    return list(land_hours(topic, kafka_hours, settings, started_at_once(run_slices), **options))


def in_this_process(tasks) -> list:
    """Runs slice tasks one after another in this process: Spark's task body without Spark."""
    from kafka_lake.landing.slice_task import land_slice

    return [land_slice(task) for task in tasks]


def land_on_spark(topic: TableSpec, settings, spark, hours: list[datetime]) -> list:
    """Lands Kafka hours with the real Spark job, as a range run does, without a Dagster run around it."""
    from kafka_lake.hours import KafkaHour
    from kafka_lake.landing.driver import land_hours
    from spark_jobs.landing_job import SlicesOnSpark

    return list(land_hours(topic, [KafkaHour(hour) for hour in hours], settings, SlicesOnSpark(spark, topic.topic)))
