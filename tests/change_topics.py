"""A Debezium-shaped change topic for the current-state tests: creates, updates, deletes (Debezium's `op: d` event
followed by its tombstone), a tombstone alone, a delete the `after` of which is kept (only `delete_when` says so), a
key deleted and created again, late events, a v1 → v2 schema change (a column appears), and broken records (a value
that is no Avro, a key that does not decode, a record without a key), over three Kafka hours on three partitions.

The producer keeps the state the source table has after each change, so the expected table is computed from what was
produced, never hard-coded.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from fastavro import parse_schema

from kafka_lake.hours import to_millis
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import load_topic
from tests.landing_fixtures import HOURS, PARTITIONS, Produced, Traffic, produce

KEY = {"type": "record", "name": "Key", "namespace": "dbserver1.inventory.customers",
       "fields": [{"name": "id", "type": "int"}]}
ROW_V1 = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "int"}, {"name": "first_name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None}]}
ROW_V2 = {**ROW_V1, "fields": [*ROW_V1["fields"], {"name": "phone", "type": ["null", "string"], "default": None}]}


def envelope(row: dict) -> dict:
    """Debezium's value: the row before and after the change, where it came from, the operation."""
    return {"type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.customers", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.mysql",
                                    "fields": [{"name": "db", "type": "string"}, {"name": "ts_ms", "type": "long"}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None}]}


KEY_REGISTRY_ID = 77  # the key's subject has ids of its own, which the catalog does not list
CLOSING = HOURS[-1] + timedelta(hours=1)  # one record per partition there closes the last hour


def write_change_topic(catalog_dir: Path, kafka_topic: str, table_format: str | None = None, versions: int = 2,
                       **keys) -> TableSpec:
    """`e2e/customers`: key `id`, value Debezium's envelope (its first `versions` schema versions), its current-state
    table `e2e.customers_current`."""
    folder = catalog_dir / "e2e" / "customers"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "key.avsc").write_text(json.dumps(KEY))
    (folder / "v1.avsc").write_text(json.dumps(envelope(ROW_V1)))
    (folder / "v2.avsc").write_text(json.dumps(envelope(ROW_V2)))
    first = zlib.crc32(kafka_topic.encode()) % 10**6 * 10
    document = {
        "topic": kafka_topic, "owner": "team-test", "start_hour": "2026-11-01T00:00Z",
        "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": first + 1},
                            {"version": 2, "file": "v2.avsc", "registry_id": first + 2}][:versions],
        "time_partitioning": {"source": "event_time", "field": "source.ts_ms"},
        "allowed_lateness_hours": 2, "dead_letter_rate_threshold": 0.5, "key_schema": "key.avsc",
        "current_state": {"row": "after", "delete_when": {"field": "op", "equals": "d"}},
        **({"table_format": table_format} if table_format else {}), **keys,
    }
    (folder / "topic.yaml").write_text(json.dumps(document))  # JSON is YAML
    return load_topic(folder / "topic.yaml")


@dataclass
class Change:
    """One produced record and what it does to the source table: sets `row` of `key`, deletes `key`, or nothing."""

    produced: Produced
    key: int | None
    row: dict | None = None
    deletes: bool = False


@dataclass
class ChangeTraffic(Traffic):
    changes: list[Change] = field(default_factory=list)

    def state_after(self, hour: datetime) -> dict[int, dict]:
        """The source table once every change stamped before the end of Kafka hour `hour` is applied, each row with the
        partition, offset and time of the change that set it."""
        end = to_millis(hour + timedelta(hours=1))
        state: dict[int, dict] = {}
        for change in sorted(self.changes, key=lambda c: (c.produced.partition, c.produced.offset)):
            if change.produced.timestamp_ms >= end or change.key is None:
                continue
            if change.deletes:
                state.pop(change.key, None)
            elif change.row is not None:
                state[change.key] = {**change.row, "_kafka_key_id": change.key,
                                     "_kafka_partition": change.produced.partition,
                                     "_kafka_offset": change.produced.offset,
                                     "_kafka_timestamp": datetime.fromtimestamp(change.produced.timestamp_ms / 1000,
                                                                                tz=timezone.utc)}
        return state


def build_change_traffic(topic: TableSpec, customers: int = 30, per_hour: int = 40, seed: int = 11) -> ChangeTraffic:
    rng = random.Random(seed)
    traffic = ChangeTraffic(topic)
    key_schema = parse_schema(KEY)
    source: dict[int, dict] = {}  # the source table, as the producer changes it
    clock: dict[int, int] = {p: 0 for p in range(PARTITIONS)}

    def stamp(partition: int, hour: datetime) -> int:
        clock[partition] = max(clock[partition], to_millis(hour) + 1000) + rng.randint(1, 60_000)
        return min(clock[partition], to_millis(hour) + 3_599_000)

    def key_bytes(customer: int) -> bytes:
        return encode_confluent(KEY_REGISTRY_ID, key_schema, {"id": customer})

    def partition_of(customer: int) -> int:
        return zlib.crc32(str(customer).encode()) % PARTITIONS

    def emit(customer: int | None, hour: datetime, op: str, after: dict | None, before: dict | None = None,
             deletes: bool = False, late: bool = False, version: int = 2, partition: int | None = None) -> None:
        partition = partition_of(customer) if partition is None else partition
        moment = stamp(partition, hour)
        occurred = moment - (2 * 3_600_000 if late else rng.randint(0, 2_000))
        schema = topic.version(version)
        cut = (lambda row: None if row is None else {k: v for k, v in row.items() if k != "phone"}) if version == 1 \
            else (lambda row: row)
        value = {"before": cut(before), "after": cut(after), "source": {"db": "inventory", "ts_ms": occurred},
                 "op": op, "ts_ms": moment}
        item = Produced(partition, moment, key_bytes(customer) if customer is not None else None,
                        encode_confluent(schema.registry_id, schema.parsed, value), "row", value, version)
        row = None if after is None else {"id": after["id"], "first_name": after["first_name"],
                                          "email": after["email"], "phone": after.get("phone") if version == 2 else None}
        traffic.produced.append(item)
        traffic.changes.append(Change(item, customer, row, deletes or after is None))

    def tombstone(customer: int, hour: datetime) -> None:
        partition = partition_of(customer)
        item = Produced(partition, stamp(partition, hour), key_bytes(customer), None, "tombstone")
        traffic.produced.append(item)
        traffic.changes.append(Change(item, customer, None, True))

    def broken(hour: datetime, kind: str, customer: int) -> None:
        partition = partition_of(customer)
        key, value = key_bytes(customer), b'{"op": "u"}'  # a producer without the serializer
        if kind == "undecodable_key":
            key, value = b"\x00\x00\x00\x00\x4d\xff", encode_confluent(topic.version(2).registry_id, topic.version(2).parsed,
                                                                      {"before": None, "after": None, "op": "u", "ts_ms": 0,
                                                                       "source": {"db": "inventory", "ts_ms": to_millis(hour)}})
        item = Produced(partition, stamp(partition, hour), key, value, kind)
        traffic.produced.append(item)
        traffic.changes.append(Change(item, None))

    def new_row(customer: int) -> dict:
        return {"id": customer, "first_name": rng.choice(["ann", "bo", "cy", "di", "ed"]),
                "email": rng.choice([None, f"c{customer}-{rng.randrange(1000)}@example.com"]),
                "phone": rng.choice([None, f"+46-{rng.randrange(10**6):06d}"])}

    next_customer = 1
    for index, hour in enumerate(HOURS):
        version = 1 if index == 0 else 2  # the producers upgrade after the first hour: `phone` appears
        for n in range(per_hour):
            late = n % 9 == 4  # placed two hours before its Kafka hour
            existing = sorted(source)
            draw = rng.random()
            if not existing or draw < 0.3 or len(source) < customers // 3:
                customer, next_customer = next_customer, next_customer + 1
                source[customer] = new_row(customer)
                emit(customer, hour, "c", dict(source[customer]), late=late, version=version)
            elif draw < 0.75:
                customer = rng.choice(existing)
                before, source[customer] = source[customer], {**new_row(customer), "first_name": source[customer]["first_name"]}
                emit(customer, hour, "u", dict(source[customer]), dict(before), late=late, version=version)
            elif draw < 0.85:  # Debezium's delete: the `d` event, then its tombstone for log compaction
                customer = rng.choice(existing)
                before = source.pop(customer)
                emit(customer, hour, "d", None, dict(before), late=late, version=version)
                tombstone(customer, hour)
            elif draw < 0.9:  # a tombstone alone deletes too
                customer = rng.choice(existing)
                source.pop(customer)
                tombstone(customer, hour)
            elif draw < 0.95:  # `op: d` with the row still in `after`: only delete_when deletes it
                customer = rng.choice(existing)
                kept = source.pop(customer)
                emit(customer, hour, "d", dict(kept), dict(kept), deletes=True, version=version)
            else:  # a deleted customer comes back under the same key
                gone = [c for c in range(1, next_customer) if c not in source]
                customer = rng.choice(gone) if gone else next_customer
                next_customer = max(next_customer, customer + 1)
                source[customer] = new_row(customer)
                emit(customer, hour, "c", dict(source[customer]), version=version)
        broken(hour, "bad_magic_byte", rng.randrange(1, next_customer))
        broken(hour, "undecodable_key", rng.randrange(1, next_customer))
        # A record without a key lands with null key columns: no row of the current-state table to set.
        keyless = new_row(0)
        emit(None, hour, "c", keyless, version=version, partition=rng.randrange(PARTITIONS))
    for partition in range(PARTITIONS):  # closing records, in the hour after: they close the last hour
        customer = next(c for c in range(10**6, 10**7) if partition_of(c) == partition)
        emit(customer, CLOSING, "c", new_row(customer))
    traffic.produced.sort(key=lambda p: (p.partition, p.timestamp_ms))
    return traffic


def change_topic_with_traffic(broker, catalog_dir: Path, kafka_topic: str, **topic_options) -> tuple[TableSpec, ChangeTraffic]:
    """Given the change topic on `broker` (a `TansuBroker`) holding `build_change_traffic`'s records."""
    topic = write_change_topic(catalog_dir, kafka_topic, **topic_options)
    broker.create_topic(kafka_topic, PARTITIONS)
    traffic = build_change_traffic(topic)
    produce(broker.bootstrap_servers, traffic)
    return topic, traffic
