"""`make produce TABLE=<database>/<table>`: test records for one catalog entry, produced to the local broker.

Values made from the entry's newest schema version and framed as its producers frame them (its registry id), its
route and time field set, spread over the last hours the clock has closed: a new topic's landing tried end to end
before its producers exist.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import sys
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from confluent_kafka import KafkaException, Producer

from kafka_lake.automation import closed_by_clock_at
from kafka_lake.decoding.protobuf.wire import encode_protobuf
from kafka_lake.hours import ONE_HOUR, KafkaHour, to_millis
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import CatalogError, load_catalog

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
# How a plain long event time counts, per `time_partitioning.unit`.
PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


class SampleValues:
    """Values of one Avro schema (as JSON), random but valid: each type, logical types and named types included;
    `json_form` makes them what a JSON producer writes (base64 bytes, decimals as text, epoch counts)."""

    def __init__(self, schema: dict, rng: random.Random, json_form: bool = False):
        self.schema, self.rng, self.json_form = schema, rng, json_form
        self.named: dict[str, Any] = {}

    def value(self, moment: datetime) -> dict:
        self.named.clear()
        return self._of(self.schema, "", moment)

    def _of(self, schema: Any, namespace: str, moment: datetime) -> Any:
        rng = self.rng
        if isinstance(schema, list):  # a union: its first non-null member, so every field holds something
            members = [member for member in schema if member != "null"] or ["null"]
            return self._of(members[0], namespace, moment)
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return self._of({"type": schema}, namespace, moment)
            named = self.named.get(schema) or self.named.get(f"{namespace}.{schema}")
            if named is None:
                raise ValueError(f"schema names type {schema!r}, which it does not define before")
            return self._of(named, namespace, moment)
        kind, logical = schema["type"], schema.get("logicalType")
        if isinstance(kind, (dict, list)):
            return self._of(kind, namespace, moment)
        if kind in ("record", "enum", "fixed"):
            space = schema.get("namespace", namespace)
            name = schema["name"] if "." in schema["name"] or not space else f"{space}.{schema['name']}"
            self.named[name] = schema
            namespace = name.rsplit(".", 1)[0] if "." in name else ""
        if kind == "record":
            return {field["name"]: self._of(field["type"], namespace, moment) for field in schema["fields"]}
        if kind == "enum":
            return rng.choice(schema["symbols"])
        if kind == "array":
            return [self._of(schema["items"], namespace, moment) for _ in range(rng.randint(1, 2))]
        if kind == "map":
            return {f"k{n}": self._of(schema["values"], namespace, moment) for n in range(rng.randint(1, 2))}
        if logical in ("timestamp-millis", "local-timestamp-millis"):
            return to_millis(moment) if self.json_form else moment
        if logical in ("timestamp-micros", "local-timestamp-micros"):
            return to_millis(moment) * 1000 if self.json_form else moment
        if logical == "date":
            return (moment.date() - date(1970, 1, 1)).days if self.json_form else moment.date()
        if logical in ("time-millis", "time-micros"):
            midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
            since = moment - midnight
            if self.json_form:
                return int(since / timedelta(milliseconds=1)) * (1000 if logical == "time-micros" else 1)
            return moment.time().replace(tzinfo=None)
        if logical == "decimal":
            number = Decimal(rng.randrange(10 ** min(schema["precision"], 9))).scaleb(-schema.get("scale", 0))
            return str(number) if self.json_form else number
        if logical == "uuid":
            return str(uuid.UUID(int=rng.getrandbits(128)))
        if kind == "fixed":
            raw = rng.randbytes(schema["size"])
            return base64.b64encode(raw).decode() if self.json_form else raw
        return {
            "null": lambda: None,
            "boolean": lambda: rng.random() < 0.5,
            "int": lambda: rng.randrange(1000),
            "long": lambda: rng.randrange(10**6),
            "float": lambda: round(rng.random() * 100, 2),
            "double": lambda: round(rng.random() * 100, 2),
            "bytes": lambda: base64.b64encode(rng.randbytes(8)).decode() if self.json_form else rng.randbytes(8),
            "string": lambda: f"test-{rng.randrange(10**6):06d}",
        }[kind]()


def set_at(record: dict, path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        record = record.setdefault(name, {})
    record[path[-1]] = value


def event_time(table: TableSpec, record_schema: dict, moment: datetime, json_form: bool) -> Any:
    """The value of the table's time field for an event at `moment`, in the form its type and `unit` read."""
    from kafka_lake.schemas.avro_types import field_type_at

    assert table.time_field is not None
    kind = field_type_at(record_schema, table.time_field)
    members = [member for member in kind if member != "null"] if isinstance(kind, list) else [kind]
    kind = members[0] if members else kind
    if isinstance(kind, dict) and kind.get("logicalType", "").endswith("timestamp-millis"):
        return to_millis(moment) if json_form else moment
    if isinstance(kind, dict) and kind.get("logicalType", "").endswith("timestamp-micros"):
        return to_millis(moment) * 1000 if json_form else moment
    if kind == "string" or (isinstance(kind, dict) and kind.get("type") == "string"):
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return to_millis(moment) * PER_SECOND[table.time_unit or "ms"] // 1000


def sample_key(table: TableSpec, keys: SampleValues | None, moment: datetime, n: int) -> bytes:
    """A record's key: from the table's `key_schema` as its producers frame keys (any schema id: a key's subject has
    ids of its own), else text."""
    if keys is None or table.key_schema is None:
        return f"test-{n}".encode()
    if table.payload_format == "json":
        return json.dumps(keys.value(moment)).encode()
    return encode_confluent(0, table.key_schema.parsed, keys.value(moment))


def sample_value(table: TableSpec, values: SampleValues | None, moment: datetime, rng: random.Random) -> bytes:
    """One record's value, as the table's producers write it."""
    if table.payload_format == "raw":
        return f"test record {rng.randrange(10**9)} at {moment:%Y-%m-%dT%H:%M:%SZ}".encode()
    version = table.schema_versions[-1]
    schema_id = version.registry_id or 0  # a JSON version may have none: its values are plain JSON
    if table.payload_format == "protobuf":
        compiled = version.parsed
        message = compiled.message_class()
        if table.time_field is not None:
            parent = message
            for name in table.time_field[:-1]:
                parent = getattr(parent, name)
            stamp = getattr(parent, table.time_field[-1])
            if hasattr(stamp, "FromMilliseconds"):  # a google.protobuf.Timestamp
                stamp.FromMilliseconds(to_millis(moment))
            else:
                setattr(parent, table.time_field[-1], to_millis(moment) * PER_SECOND[table.time_unit or "ms"] // 1000)
        return encode_protobuf(schema_id, compiled.indexes_of(message.DESCRIPTOR), message)
    assert values is not None
    json_form = table.payload_format == "json"
    record = values.value(moment)
    if table.time_field is not None:
        set_at(record, table.time_field, event_time(table, version.schema, moment, json_form))
    if table.route is not None and table.route.field is not None:
        set_at(record, table.route.field, table.route.values[0])
    if json_form:
        return json.dumps(record).encode()
    return encode_confluent(schema_id, version.parsed, record)


def hours_to_fill(table: TableSpec, count: int, now: datetime) -> list[KafkaHour]:
    """The last `count` hours the clock has closed for the table, oldest first: each can land at once."""
    last = KafkaHour.containing(now)
    while closed_by_clock_at(table, last) > now:
        last = last.previous()
    return [KafkaHour(last.start - n * ONE_HOUR) for n in reversed(range(count))]


def produce_test_records(table: TableSpec, bootstrap_servers: str, hours: list[KafkaHour], per_hour: int,
                         partitions: int, seed: int = 7) -> int:
    """Produces `per_hour` records into each hour (the topic created with `partitions` if missing); returns how many."""
    from dev_services.tansu import ensure_topic

    rng = random.Random(f"{seed}:{table.topic}")
    json_form = table.payload_format == "json"
    values = SampleValues(table.schema_versions[-1].schema, rng, json_form) if table.schema_versions else None
    keys = SampleValues(table.key_schema.schema, rng, json_form) if table.key_schema is not None else None
    count = ensure_topic(bootstrap_servers, table.topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 20})
    failures: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failures.append(f"{message.topic()}[{message.partition()}]: {error.str()}")

    produced = 0
    for hour in hours:
        for n in range(per_hour):
            moment = hour.start + timedelta(milliseconds=rng.randrange(3_600_000))
            producer.produce(table.topic, value=sample_value(table, values, moment, rng),
                             key=sample_key(table, keys, moment, n), partition=n % count,
                             timestamp=to_millis(moment), on_delivery=delivered)
            produced += 1
            producer.poll(0)
    left = producer.flush(60)
    if left or failures:
        raise KafkaException(f"{left} record(s) not delivered to {bootstrap_servers}"
                             + (f"; first refusal: {failures[0]}" if failures else ""))
    return produced


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev_services.produce", description=__doc__.splitlines()[0])
    parser.add_argument("table", help="the catalog entry, <database>/<table>")
    parser.add_argument("--records", type=int, default=100, help="records per hour (default 100)")
    parser.add_argument("--hours", type=int, default=2, help="the last hours the clock has closed (default 2)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of a topic not on the broker yet")
    parser.add_argument("--catalog", default=os.environ.get("SCHEMA_CATALOG_DIR") or "schema_catalog",
                        help="the topic catalog (default: $SCHEMA_CATALOG_DIR, else schema_catalog)")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or "127.0.0.1:9092",
                        help="the broker (default: $KAFKA_BOOTSTRAP_SERVERS, else the local one, 127.0.0.1:9092)")
    args = parser.parse_args(argv)
    database, _, name = args.table.partition("/")
    try:
        table = load_catalog(args.catalog).by_name(database, name)
    except (CatalogError, KeyError) as error:
        print(f"error: {error.args[0] if isinstance(error, KeyError) else error}", file=sys.stderr)
        return 1
    hours = hours_to_fill(table, args.hours, datetime.now(timezone.utc))
    try:
        produced = produce_test_records(table, args.bootstrap, hours, args.records, args.partitions)
    except KafkaException as error:
        print(f"error: no Kafka broker takes the records at {args.bootstrap} ({error}); start one with `make broker`",
              file=sys.stderr)
        return 1
    first, last = hours[0].partition_key, hours[-1].partition_key
    print(f"Produced {produced} test records of {table.topic} to {args.bootstrap}, {args.records} in each hour from "
          f"{first} to {last}.")
    print(f"Land them from `make ui` (raw/{table.name} → Materialize, those hours), or with Dagster's CLI:\n"
          f"  {landing_command(table, args.bootstrap, first, last)}")
    return 0


def landing_command(table: TableSpec, bootstrap_servers: str, first: str, last: str) -> str:
    """The shell command landing those hours as `make ui` would: with the demo's settings when a demo ran (its Dagster
    home, PII key, catalog copy, broker and lake), else with every variable the landing needs named."""
    from dev_services.demo import DEMO_ENV_FILE

    materialize = (f".venv/bin/dagster asset materialize -m platform_assets.definitions --select raw/{table.name} "
                   f"--partition-range {first}...{last}")
    if DEMO_ENV_FILE.exists():
        return f"(set -a; . {DEMO_ENV_FILE}; {materialize})"
    pii = " PII_HMAC_KEY=<your key>" if table.pii_fields else ""
    return (f"DAGSTER_HOME=$PWD/.dagster_home KAFKA_BOOTSTRAP_SERVERS={bootstrap_servers}{pii} {materialize}")


if __name__ == "__main__":
    sys.exit(main())
