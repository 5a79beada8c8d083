"""`python -m deploy.add_topic`: a catalog entry written from the schema registry passes `check-catalog` and lands
what its producer writes on the real broker; `--update` adds the versions it lacks and keeps the rest of the entry;
errors name the subject and what is missing.

The registry is a stand-in speaking Confluent's REST API (tests/registry_stand_in.py: no registry server installs
here), driven through confluent-kafka's `SchemaRegistryClient`.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

from deploy import add_topic, check_catalog
from kafka_lake.decoding.protobuf.wire import encode_protobuf
from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.topics.loader import load_topic
from tests.conftest import REPO
from tests.landing_fixtures import (
    RAW_HOURS,
    V1,
    V2,
    build_traffic,
    in_this_process,
    land,
    landing_settings,
    produce,
    unique_topic_name,
)
from tests.otel_spans import SPAN, START_NANOS, random_span, span_class
from tests.registry_stand_in import RegistryStandIn
from tests.test_protobuf import decode

HOUR = datetime(2026, 11, 1, 10, tzinfo=timezone.utc)


@pytest.fixture
def registry(monkeypatch):
    with RegistryStandIn(first_id=7001) as server:
        monkeypatch.setenv("SCHEMA_REGISTRY_URL", server.url)
        yield server


def register(registry: RegistryStandIn, subject: str, schema, schema_type: str = "AVRO",
             references: list[SchemaReference] | None = None) -> int:
    client = SchemaRegistryClient({"url": registry.url})
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return client.register_schema(subject, Schema(text, schema_type, references or []))


MONEY_PROTO = 'syntax = "proto3";\npackage acme.common;\nmessage Money { string currency = 1; int64 units = 2; }\n'
ORDER_PROTO = """syntax = "proto3";
package acme.orders;
import "google/protobuf/timestamp.proto";
import "money.proto";

message Order {
  string id = 1;
  google.protobuf.Timestamp placed_at = 2;
  acme.common.Money total = 3;
}
message Refund {
  string order_id = 1;
  google.protobuf.Timestamp placed_at = 2;
}
"""
ORDER_PROTO_V2 = ORDER_PROTO.replace("acme.common.Money total = 3;", "acme.common.Money total = 3;\n  string channel = 4;")
# As Confluent's serializer registers an import: the name it is imported by, the subject and version holding it. The
# well-known types are referenced too, and every registry and protoc has them built in.
ORDER_REFERENCES = [SchemaReference("google/protobuf/timestamp.proto", "google/protobuf/timestamp.proto", 1),
                    SchemaReference("money.proto", "acme-common-money", 1)]


def register_orders_proto(registry: RegistryStandIn, subject: str, *texts: str) -> list[int]:
    register(registry, "acme-common-money", MONEY_PROTO, "PROTOBUF")
    return [register(registry, subject, text, "PROTOBUF", ORDER_REFERENCES) for text in texts]


def run_add_topic(catalog, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deploy.add_topic", "--catalog", str(catalog), *args], cwd=REPO,
                          env=os.environ.copy(), capture_output=True, text=True, timeout=60)


def test_an_entry_written_from_the_registry_passes_check_catalog_and_lands_its_producers_records(broker, registry, tmp_path):
    topic_name = unique_topic_name()
    ids = [register(registry, f"{topic_name}-value", schema) for schema in (V1, V2)]
    catalog = tmp_path / "catalog"

    done = run_add_topic(catalog, "--topic", topic_name, "--database", "e2e", "--table", "orders",
                         "--time-field", "meta.occurred_at", "--start-hour", "2026-11-01T00:00Z")

    assert done.returncode == 0, done.stderr
    assert check_catalog.main([str(catalog)]) == 0
    topic = load_topic(catalog / "e2e" / "orders" / "topic.yaml")
    assert [(v.version, v.file, v.registry_id) for v in topic.schema_versions] == [(1, "v1.avsc", ids[0]),
                                                                                  (2, "v2.avsc", ids[1])]
    assert topic.time_field == ("meta", "occurred_at") and topic.start_hour == datetime(2026, 11, 1, tzinfo=timezone.utc)
    # The producer frames its records with the ids the registry gave: they land as rows of their version.
    traffic = build_traffic(topic)
    broker.create_topic(topic_name, 3)
    produce(broker.bootstrap_servers, traffic)
    hours = [KafkaHour(hour) for hour in RAW_HOURS[:3]]
    results = land(topic, hours, landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers), in_this_process)
    landed = {version: sum(r.manifest.schema_versions.get(str(version), 0) for r in results) for version in (1, 2)}
    produced = {version: sum(1 for p in traffic.rows() if p.version == version and p.timestamp_ms < hours[-1].end_ms)
                for version in (1, 2)}
    assert landed == produced and all(landed.values())


def test_update_adds_the_versions_the_entry_lacks_and_keeps_everything_else_it_says(registry, tmp_path):
    topic_name = unique_topic_name()
    first = register(registry, f"{topic_name}-value", V1)
    catalog = tmp_path / "catalog"
    assert add_topic.main(["--catalog", str(catalog), "--topic", topic_name, "--database", "e2e", "--table", "orders",
                           "--kafka-time"]) == 0
    topic_yaml = catalog / "e2e" / "orders" / "topic.yaml"
    edited = topic_yaml.read_text().replace('owner: "unassigned"', "owner: team-orders  # the on-call rota") + \
        "retention_days: 30\n"
    topic_yaml.write_text(edited)
    second = register(registry, f"{topic_name}-value", V2)

    assert add_topic.main(["--catalog", str(catalog), "--topic", topic_name, "--database", "e2e", "--table", "orders",
                           "--update"]) == 0

    text = topic_yaml.read_text()
    assert text.startswith(edited.split("schema_versions:")[0]), "what came before the versions is as written"
    assert "owner: team-orders  # the on-call rota" in text and text.endswith("retention_days: 30\n")
    topic = load_topic(topic_yaml)
    assert [(v.file, v.registry_id) for v in topic.schema_versions] == [("v1.avsc", first), ("v2.avsc", second)]
    assert json.loads((topic_yaml.parent / "v2.avsc").read_text()) == V2
    assert topic.owner == "team-orders" and topic.retention_days == 30
    assert check_catalog.main([str(catalog)]) == 0
    before = text
    assert add_topic.main(["--catalog", str(catalog), "--topic", topic_name, "--database", "e2e", "--table", "orders",
                           "--update"]) == 0
    assert topic_yaml.read_text() == before, "nothing new: nothing changes"


def test_a_list_of_versions_written_in_flow_style_is_updated_too(registry, tmp_path):
    topic_name = unique_topic_name()
    first = register(registry, f"{topic_name}-value", V1)
    folder = tmp_path / "catalog" / "e2e" / "orders"
    folder.mkdir(parents=True)
    (folder / "v1.avsc").write_text(json.dumps(V1))
    (folder / "topic.yaml").write_text(
        f"topic: {topic_name}\nowner: team-orders\ntime_partitioning: {{source: kafka_time}}\n"
        f"start_hour: \"2026-11-01T00:00Z\"\nschema_versions: [{{version: 1, file: v1.avsc, registry_id: {first}}}]\n"
        f"freshness_minutes: 90\n")
    second = register(registry, f"{topic_name}-value", V2)

    assert add_topic.main(["--catalog", str(tmp_path / "catalog"), "--topic", topic_name, "--database", "e2e",
                           "--table", "orders", "--update"]) == 0

    topic = load_topic(folder / "topic.yaml")
    assert [v.registry_id for v in topic.schema_versions] == [first, second] and topic.freshness_minutes == 90


def test_a_json_schema_subject_becomes_a_json_table_whose_framed_records_land(broker, registry, tmp_path):
    topic_name = unique_topic_name()
    order = {"title": "Order", "type": "object", "required": ["order_id", "occurred_at"], "properties": {
        "order_id": {"type": "integer"}, "occurred_at": {"type": "string", "format": "date-time"},
        "address": {"$ref": "#/definitions/address"}, "lines": {"type": "array", "items": {"type": "number"}},
        "note": {"type": ["string", "null"]}},
        "definitions": {"address": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    with_channel = {**order, "properties": {**order["properties"], "channel": {"enum": ["web", "app"]}}}
    ids = [register(registry, f"{topic_name}-value", json.dumps(schema), "JSON") for schema in (order, with_channel)]
    catalog = tmp_path / "catalog"

    assert add_topic.main(["--catalog", str(catalog), "--topic", topic_name, "--database", "e2e", "--table", "orders",
                           "--time-field", "occurred_at", "--start-hour", "2026-11-01T00:00Z"]) == 0

    assert check_catalog.main([str(catalog)]) == 0
    topic = load_topic(catalog / "e2e" / "orders" / "topic.yaml")
    assert topic.payload_format == "json" and [v.registry_id for v in topic.schema_versions] == ids
    v2 = {f["name"]: f["type"] for f in topic.version(2).schema["fields"]}
    assert v2["order_id"] == "long" and v2["note"] == ["null", "string"] and v2["channel"] == ["null", "string"]
    assert v2["address"][1]["fields"] == [{"name": "city", "type": ["null", "string"], "default": None}]
    broker.create_topic(topic_name, 1)
    values = [(ids[n % 2], {"order_id": n, "occurred_at": f"2026-11-01T10:{n:02d}:00Z", "address": {"city": "Lyon"},
                            "lines": [1.5, 2.0], "note": None, **({"channel": "web"} if n % 2 else {})})
              for n in range(10)]
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for n, (schema_id, value) in enumerate(values):
        producer.produce(topic_name, b"\x00" + schema_id.to_bytes(4, "big") + json.dumps(value).encode(), partition=0,
                         timestamp=to_millis(HOUR + timedelta(minutes=n)))
    producer.flush(30)
    closing = {"order_id": 99, "occurred_at": "2026-11-01T11:05:00Z"}
    producer.produce(topic_name, b"\x00" + ids[0].to_bytes(4, "big") + json.dumps(closing).encode(), partition=0,
                     timestamp=to_millis(HOUR + timedelta(hours=1, minutes=5)))
    producer.flush(30)

    [result] = land(topic, [KafkaHour(HOUR)], landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers),
                    in_this_process)

    assert result.manifest.counts.rows == 10 and result.manifest.counts.dead_letters == 0
    assert result.manifest.schema_versions == {"1": 5, "2": 5}


def test_a_protobuf_subject_becomes_a_protobuf_table_with_its_imports_whose_framed_records_land(broker, registry,
                                                                                                 tmp_path):
    topic_name = unique_topic_name()
    ids = register_orders_proto(registry, f"{topic_name}-value", ORDER_PROTO, ORDER_PROTO_V2)
    catalog = tmp_path / "catalog"

    done = run_add_topic(catalog, "--topic", topic_name, "--database", "e2e", "--table", "orders",
                         "--time-field", "placed_at", "--start-hour", "2026-11-01T00:00Z")

    assert done.returncode == 0, done.stderr
    assert check_catalog.main([str(catalog)]) == 0
    folder = catalog / "e2e" / "orders"
    topic = load_topic(folder / "topic.yaml")
    assert topic.payload_format == "protobuf" and topic.time_field == ("placed_at",)
    assert [(v.version, v.file, v.parsed.message.full_name, v.registry_id) for v in topic.schema_versions] == [
        (1, "v1.proto", "acme.orders.Order", ids[0]), (2, "v2.proto", "acme.orders.Order", ids[1])]
    assert (folder / "v2.proto").read_text() == ORDER_PROTO_V2 and (folder / "money.proto").read_text() == MONEY_PROTO
    assert sorted(path.name for path in folder.iterdir()) == ["money.proto", "topic.yaml", "v1.proto", "v2.proto"]
    # The producer frames its messages with the ids the registry gave: they land as rows of their version.
    broker.create_topic(topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for n in range(11):
        version = topic.version(1 + n % 2)
        message = version.parsed.message_class(id=f"o-{n}", **({"channel": "web"} if n % 2 else {}))
        message.placed_at.FromDatetime(HOUR + timedelta(minutes=n if n < 10 else 65))
        message.total.currency = "EUR"
        producer.produce(topic_name, encode_protobuf(version.registry_id, [0], message), partition=0,
                         timestamp=to_millis(HOUR + timedelta(minutes=n if n < 10 else 65)))
    producer.flush(30)

    [result] = land(topic, [KafkaHour(HOUR)], landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers),
                    in_this_process)

    assert result.manifest.counts.rows == 10 and result.manifest.counts.dead_letters == 0
    assert result.manifest.schema_versions == {"1": 5, "2": 5}


def test_message_names_another_message_of_the_file_and_update_keeps_it(registry, tmp_path, capsys):
    topic_name = unique_topic_name()
    [first] = register_orders_proto(registry, f"{topic_name}-value", ORDER_PROTO)
    catalog = tmp_path / "catalog"
    arguments = ["--catalog", str(catalog), "--topic", topic_name, "--database", "e2e", "--table", "refunds"]
    assert add_topic.main([*arguments, "--kafka-time", "--message", "acme.orders.Refund"]) == 0
    [second] = register_orders_proto(registry, f"{topic_name}-value", ORDER_PROTO_V2)

    assert add_topic.main([*arguments, "--update"]) == 0

    topic = load_topic(catalog / "e2e" / "refunds" / "topic.yaml")
    assert [(v.file, v.parsed.message.full_name, v.registry_id) for v in topic.schema_versions] == [
        ("v1.proto", "acme.orders.Refund", first), ("v2.proto", "acme.orders.Refund", second)]
    assert check_catalog.main([str(catalog)]) == 0
    out = capsys.readouterr().out
    assert "as version 2, message acme.orders.Refund" in out and out.count("money.proto: imported") == 1


@pytest.mark.parametrize("case", ["no subject", "time field", "other type", "json oneOf", "avro references",
                                  "message on avro", "protobuf message", "protobuf broken", "protobuf import elsewhere",
                                  "protobuf reference missing", "protobuf import changed"])
def test_errors_name_the_subject_and_what_is_missing_and_write_nothing(registry, tmp_path, capsys, case):
    topic_name = unique_topic_name()
    subject = f"{topic_name}-value"
    time_args = ["--time-field", "occurred_at"] if case == "time field" else ["--kafka-time"]
    if case in ("message on avro", "protobuf message"):
        time_args += ["--message", "acme.orders.Missing"]
    if case in ("time field", "message on avro"):
        register(registry, subject, V1)
    elif case == "protobuf message":
        register_orders_proto(registry, subject, ORDER_PROTO)
    elif case == "protobuf broken":
        register(registry, subject, 'syntax = "proto3";\nmessage Order { int64 id = 1 }\n', "PROTOBUF")
    elif case == "protobuf import elsewhere":
        register(registry, "acme-common-money", MONEY_PROTO, "PROTOBUF")
        register(registry, subject, ORDER_PROTO.replace('"money.proto"', '"../money.proto"'), "PROTOBUF",
                 [SchemaReference("../money.proto", "acme-common-money", 1)])
    elif case == "protobuf reference missing":
        register(registry, subject, ORDER_PROTO, "PROTOBUF", ORDER_REFERENCES)
    elif case == "protobuf import changed":
        register_orders_proto(registry, subject, ORDER_PROTO)
        register(registry, "acme-common-money", MONEY_PROTO.replace("int64 units = 2;", "int64 units = 2; int32 nanos = 3;"),
                 "PROTOBUF")
        register(registry, subject, ORDER_PROTO_V2, "PROTOBUF", [SchemaReference("money.proto", "acme-common-money", 2)])
    elif case == "other type":
        register(registry, subject, "<xs:schema/>", "XML")
    elif case == "json oneOf":
        register(registry, subject, json.dumps({"type": "object", "properties": {
            "amount": {"oneOf": [{"type": "string"}, {"type": "number"}]}}}), "JSON")
    elif case == "avro references":
        register(registry, "com.example.Meta", V1)
        client = SchemaRegistryClient({"url": registry.url})
        client.register_schema(subject, Schema(json.dumps({**V1, "name": "Referring"}), "AVRO",
                                               [SchemaReference("com.example.Meta", "com.example.Meta", 1)]))
    catalog = tmp_path / "catalog"

    code = add_topic.main(["--catalog", str(catalog), "--topic", topic_name, "--database", "e2e", "--table", "orders",
                           *time_args])

    error = capsys.readouterr().err
    assert code == 1 and f"subject {subject}" in error
    expected = {
        "no subject": "is not in the schema registry at http://127.0.0.1:",
        "time field": "time field 'occurred_at' is not in version 1 (id 7001) of subject",
        "message on avro": "--message names the message of a Protobuf file, but subject",
        "protobuf message": "version 1 (id 7002) does not load as v1.proto: has no message 'acme.orders.Missing' (its "
                            "messages: acme.orders.Order, acme.orders.Refund)",
        "protobuf broken": "version 1 (id 7001) does not load as v1.proto: does not compile: v1.proto:2:",
        "protobuf import elsewhere": "is a schema importing '../money.proto', a path that leaves the entry's folder",
        "protobuf reference missing": "imports google/protobuf/timestamp.proto version 1, acme-common-money version 1, "
                                      "which the schema registry at http://127.0.0.1:",
        "protobuf import changed": "version 2 (id 7004) imports money.proto with other text than subject",
        "other type": "is a XML schema, which is none of Avro, JSON Schema or Protobuf",
        "json oneOf": "properties.amount uses oneOf",
        "avro references": "refers to other subjects (com.example.Meta version 1)",
    }[case]
    assert expected in error
    assert not (catalog / "e2e" / "orders").exists()


def test_an_entry_that_would_not_load_is_not_written(registry, tmp_path, capsys):
    """A registry id another entry of the catalog uses with another schema: the catalog would reject both entries."""
    topic_name = unique_topic_name()
    [schema_id] = [register(registry, f"{topic_name}-value", V1)]
    other = tmp_path / "catalog" / "e2e" / "others"
    other.mkdir(parents=True)
    (other / "v1.avsc").write_text(json.dumps({**V1, "name": "Other"}))
    (other / "topic.yaml").write_text(f"topic: e2e.others\nowner: t\ntime_partitioning: {{source: kafka_time}}\n"
                                      f"start_hour: \"2026-11-01T00:00Z\"\nschema_versions:\n"
                                      f"  - {{version: 1, file: v1.avsc, registry_id: {schema_id}}}\n")

    code = add_topic.main(["--catalog", str(tmp_path / "catalog"), "--topic", topic_name, "--database", "e2e",
                           "--table", "orders", "--kafka-time"])

    assert code == 1 and f"registry_id {schema_id}" in capsys.readouterr().err
    assert not (tmp_path / "catalog" / "e2e" / "orders").exists()


def test_an_otel_shaped_topic_with_folder_imports_onboards_from_the_registry_and_lands_with_it_set(broker, registry,
                                                                                                   tmp_path):
    """Spans framed and registered by confluent-kafka's own `ProtobufSerializer`: it registers each imported file under
    its path (`opentelemetry/proto/common/v1/common.proto`) and the span's file under `<topic>-value`, and frames each
    span with the message indexes of the file's fourth message."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic_name = unique_topic_name()
    Span = span_class()
    serialize = ProtobufSerializer(Span, SchemaRegistryClient({"url": registry.url}))
    context = SerializationContext(topic_name, MessageField.VALUE)
    rng = random.Random(34)
    spans = [random_span(Span, rng, n) for n in range(60)]
    values = [serialize(span, context) for span in spans]
    closing = Span(name="closing")
    closing.observed_at.FromNanoseconds(START_NANOS + 3_700 * 10**9)
    catalog = tmp_path / "catalog"

    done = run_add_topic(catalog, "--topic", topic_name, "--database", "otel", "--table", "spans",
                         "--time-field", "observed_at", "--message", SPAN, "--start-hour", "2026-11-01T00:00Z")

    assert done.returncode == 0, done.stderr
    assert check_catalog.main([str(catalog)]) == 0
    folder = catalog / "otel" / "spans"
    assert sorted(str(path.relative_to(folder)) for path in folder.rglob("*.proto")) == [
        "opentelemetry/proto/common/v1/common.proto", "opentelemetry/proto/resource/v1/resource.proto", "v1.proto"]
    topic = load_topic(folder / "topic.yaml")
    [version] = topic.schema_versions
    assert version.parsed.message.full_name == SPAN and values[0][5:7] == b"\x02\x06"  # indexes [3]: the fourth
    broker.create_topic(topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for n, value in enumerate(values):
        producer.produce(topic_name, value, partition=0, timestamp=to_millis(HOUR + timedelta(seconds=n)))
    producer.flush(30)
    producer.produce(topic_name, serialize(closing, context), partition=0,
                     timestamp=to_millis(HOUR + timedelta(minutes=65)))
    producer.flush(30)
    settings = replace(landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers), schema_registry_url=registry.url)

    [result] = land(topic, [KafkaHour(HOUR)], settings, in_this_process)

    assert result.manifest.counts.rows == len(spans) and result.manifest.counts.dead_letters == 0
    assert result.manifest.decoding_paths == {"1": "columnar"}  # the recursive AnyValue too
    landed = ds.dataset(tmp_path / "lake" / "otel" / "spans", format="parquet", partitioning="hive").to_table()
    rows = sorted(landed.to_pylist(), key=lambda row: row["_kafka_offset"])
    reference = decode(topic, values, columnar=False)
    assert reference.rows_count == len(spans)
    expected = sorted((row for table in reference.rows.values() for row in table.to_pylist()),
                      key=lambda row: row["_kafka_offset"])
    partition_columns = ("schema_version", "date", "hour")
    for row, wanted in zip(rows, expected):
        assert {k: v for k, v in row.items() if not k.startswith("_") and k not in partition_columns} == {
            k: v for k, v in wanted.items() if not k.startswith("_")}
    # The id resolved through the registry, by the compiled form of its schema and its imports.
    assert f"/schemas/ids/{version.registry_id}" in registry.requests
    assert rows[0]["name"] == spans[0].name and rows[0]["trace_id"] == spans[0].trace_id


def test_a_key_subject_holding_a_record_becomes_the_key_schema_and_a_plain_key_a_note(registry, tmp_path, capsys):
    keyed, plain = unique_topic_name(), unique_topic_name()
    key = {"type": "record", "name": "OrderKey", "namespace": "com.example", "fields": [
        {"name": "order_id", "type": "long"}, {"name": "region", "type": "string"}]}
    for topic_name in (keyed, plain):
        register(registry, f"{topic_name}-value", V1)
    register(registry, f"{keyed}-key", {**key, "fields": key["fields"][:1]})
    newest = register(registry, f"{keyed}-key", key)
    register(registry, f"{plain}-key", '"string"')
    catalog = tmp_path / "catalog"

    for topic_name, table in ((keyed, "keyed"), (plain, "plain")):
        assert add_topic.main(["--catalog", str(catalog), "--topic", topic_name, "--database", "e2e", "--table", table,
                               "--kafka-time"]) == 0

    out = capsys.readouterr().out
    topic = load_topic(catalog / "e2e" / "keyed" / "topic.yaml")
    assert topic.key_schema is not None and topic.key_schema.file == "key.avsc"
    assert json.loads((catalog / "e2e" / "keyed" / "key.avsc").read_text()) == key  # the newest version
    assert f"subject {keyed}-key version 2 (id {newest}) as key_schema" in out
    assert load_topic(catalog / "e2e" / "plain" / "topic.yaml").key_schema is None
    assert not (catalog / "e2e" / "plain" / "key.avsc").exists()
    assert f"note: subject {plain}-key version 1" in out and "the key lands as _kafka_key bytes" in out
    assert check_catalog.main([str(catalog)]) == 0


def test_a_time_field_of_another_message_of_the_file_suggests_message(registry, tmp_path, capsys):
    """Refund, the file's second message, has `order_id`; Order, the first, lacks it."""
    topic_name = unique_topic_name()
    register_orders_proto(registry, f"{topic_name}-value", ORDER_PROTO)
    arguments = ["--catalog", str(tmp_path / "catalog"), "--topic", topic_name, "--database", "e2e", "--table", "refunds"]

    assert add_topic.main([*arguments, "--time-field", "order_id"]) == 1
    assert "name it with --message acme.orders.Refund" in capsys.readouterr().err

    assert add_topic.main([*arguments, "--kafka-time"]) == 0
    assert "v1.proto holds other messages too (acme.orders.Refund)" in capsys.readouterr().out
