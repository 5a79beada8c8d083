"""`python -m bench.json_vs_avro`: decode speed of the same page views as Confluent-framed Avro, as JSON and as
Confluent-framed Protobuf, in one run (the payload bench).

The sample catalog's page views (version 1, PII pseudonymized) are generated once, kept as Avro and written as the
JSON a producer would send for them (timestamps as epoch milliseconds) and as the Protobuf message of the same shape
(`PAGE_VIEW_PROTO`, its time a `google.protobuf.Timestamp`); each is then decoded by `BatchDecoder` in
the landing's batch size, columnar and record by record; and the Avro values again with a Confluent-framed Avro key
decoded into columns (`key_schema`), for what a key costs, and routed by a field (half the URLs to this table, the
rest to another), for what a route costs. No broker: this measures decoding alone, wall time and the
process's CPU time. The bench's own records (a million objects) are frozen out of the garbage collector's sweeps
before the clock, as a landing task freezes what its process held before it (`spark_jobs.worker_process`): a path
that makes objects per record would otherwise pay for sweeping them too.

Then OTLP-like spans (`SPAN_PROTO`: attributes of a recursive AnyValue, events, links, a status, fixed64 times), as
Protobuf and as the Avro record of the same columns (`span_avro_schema`: the AnyValue where it recurs is the JSON
text the lake lands for it), each written from the same landed values. Every path is measured `--rounds` times, the
rounds of all paths interleaved so that other load on the machine falls on all of them alike, and its median round
is printed. Prints one line per path, the Protobuf columnar path's CPU a record over Avro's for the page view and the
span, and a last `RESULT …` line.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import random
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import fastavro

from dev_services.demo_traffic import PageViews
from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.decoding.protobuf.wire import encode_protobuf
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.kafka.records import KafkaBatch
from kafka_lake.kafka.schema_resolution import CatalogSchemas
from kafka_lake.landing.landing_settings import LandingSettings
from kafka_lake.table_spec import Route, RoutedSibling, SchemaVersion
from kafka_lake.topics.loader import load_catalog, load_topic

PII_KEY = b"bench-pii-key-not-a-secret"
KEY_SCHEMA = {"type": "record", "name": "PageViewKey", "namespace": "shop", "fields": [{"name": "view_id", "type": "long"}]}
START_MS = int(datetime(2026, 11, 1, 10, tzinfo=timezone.utc).timestamp() * 1000)
# The page view's version 1 as a Protobuf message: the same columns but the event time's unit (microseconds).
PAGE_VIEW_PROTO = """
syntax = "proto3";
package com.example.shop;
import "google/protobuf/timestamp.proto";
message PageView {
  message Client { string ip_address = 1; string user_agent = 2; }
  string view_id = 1;
  google.protobuf.Timestamp occurred_at = 2;
  optional string user_id = 3;
  string url = 4;
  optional string referrer = 5;
  Client client = 6;
  int32 duration_ms = 7;
}
"""


# OTLP's span (opentelemetry/proto/trace/v1): AnyValue contains itself through ArrayValue and KeyValueList.
SPAN_PROTO = """
syntax = "proto3";
package bench.otlp;

message AnyValue {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    ArrayValue array_value = 5;
    KeyValueList kvlist_value = 6;
    bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message Status {
  enum StatusCode { STATUS_CODE_UNSET = 0; STATUS_CODE_OK = 1; STATUS_CODE_ERROR = 2; }
  string message = 2;
  StatusCode code = 3;
}
message Span {
  enum SpanKind { SPAN_KIND_UNSPECIFIED = 0; SPAN_KIND_INTERNAL = 1; SPAN_KIND_SERVER = 2; SPAN_KIND_CLIENT = 3;
                  SPAN_KIND_PRODUCER = 4; SPAN_KIND_CONSUMER = 5; }
  message Event {
    fixed64 time_unix_nano = 1;
    string name = 2;
    repeated KeyValue attributes = 3;
    uint32 dropped_attributes_count = 4;
  }
  message Link {
    bytes trace_id = 1;
    bytes span_id = 2;
    string trace_state = 3;
    repeated KeyValue attributes = 4;
    uint32 dropped_attributes_count = 5;
    fixed32 flags = 6;
  }
  bytes trace_id = 1;
  bytes span_id = 2;
  string trace_state = 3;
  bytes parent_span_id = 4;
  fixed32 flags = 16;
  string name = 5;
  SpanKind kind = 6;
  fixed64 start_time_unix_nano = 7;
  fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9;
  uint32 dropped_attributes_count = 10;
  repeated Event events = 11;
  uint32 dropped_events_count = 12;
  repeated Link links = 13;
  uint32 dropped_links_count = 14;
  Status status = 15;
}
"""
SPAN_TOPIC = """topic: bench.spans
owner: team-observability
format: {format}
time_partitioning: {{source: kafka_time}}
start_hour: "2026-11-01T00:00Z"
schema_versions:
  - {{version: 1, file: {file},{message} registry_id: 2001}}
"""
SPAN_NAMES = ["GET /api/orders/{id}", "POST /api/checkout", "SELECT orders", "kafka.produce shop.orders", "render"]
ATTRIBUTE_TEXTS = ["GET", "/api/orders/{id}", "orders-db.internal:5432", "Mozilla/5.0 (X11; Linux x86_64)", "postgresql",
                   "eu-west-1", "checkout-7d9f"]


def spans(count: int, rng: random.Random, span_class) -> list:
    """Spans as an HTTP service's tracer writes them: 4 to 10 attributes (mostly strings and integers, now and then a
    list), an event in a few, a link in fewer, a status."""
    out = []
    for n in range(count):
        start = START_MS * 1_000_000 + n * 1_000_000
        span = span_class(trace_id=rng.randbytes(16), span_id=rng.randbytes(8), name=rng.choice(SPAN_NAMES),
                          kind=rng.randint(1, 5), start_time_unix_nano=start,
                          end_time_unix_nano=start + rng.randint(10_000, 900_000_000), flags=1)
        if rng.random() < 0.8:
            span.parent_span_id = rng.randbytes(8)
        for k in range(rng.randint(4, 10)):
            attribute = span.attributes.add(key=f"attribute.{k}")
            chance = rng.random()
            if chance < 0.55:
                attribute.value.string_value = rng.choice(ATTRIBUTE_TEXTS)
            elif chance < 0.8:
                attribute.value.int_value = rng.randint(0, 70_000)
            elif chance < 0.9:
                attribute.value.bool_value = rng.random() < 0.5
            elif chance < 0.97:
                attribute.value.double_value = rng.random()
            else:  # a list of tags, of a few dozen a service uses
                for _ in range(rng.randint(1, 3)):
                    attribute.value.array_value.values.add().string_value = f"tag-{rng.randint(0, 40)}"
        for _ in range(rng.choice([0, 0, 0, 1, 2])):
            event = span.events.add(time_unix_nano=start + 5_000, name="exception")
            event.attributes.add(key="exception.type").value.string_value = "TimeoutError"
        if rng.random() < 0.1:
            span.links.add(trace_id=rng.randbytes(16), span_id=rng.randbytes(8))
        span.status.code = rng.choice([0, 1, 1, 2])
        if span.status.code == 2:
            span.status.message = "deadline exceeded"
        out.append(span)
    return out


def span_avro_schema(shape: dict) -> dict:
    """The span's Avro shape with the two fields where AnyValue recurs (ArrayValue.values, KeyValueList.values) as the
    string of JSON text the lake lands there: the Avro record of the same columns."""
    def patch(node):
        if isinstance(node, dict):
            if node.get("type") == "record" and node.get("name") in ("ArrayValue", "KeyValueList"):
                node["fields"] = [{"name": "values", "type": ["null", "string"], "default": None}]
            for value in node.values():
                patch(value)
        elif isinstance(node, list):
            for value in node:
                patch(value)
        return node

    return patch(json.loads(json.dumps(shape)))


def span_topics(folder: Path) -> tuple:
    """The span table as Protobuf (`span.proto`) and as Avro (`span.avsc`, `span_avro_schema`)."""
    from kafka_lake.decoding.protobuf.avro_shape import avro_schema_of

    protobuf_folder, avro_folder = folder / "proto" / "bench" / "spans", folder / "avro" / "bench" / "spans"
    protobuf_folder.mkdir(parents=True)
    (protobuf_folder / "span.proto").write_text(SPAN_PROTO)
    (protobuf_folder / "topic.yaml").write_text(SPAN_TOPIC.format(format="protobuf", file="span.proto",
                                                                  message=" message: bench.otlp.Span,"))
    protobuf_topic = load_topic(protobuf_folder / "topic.yaml")
    avro_folder.mkdir(parents=True)
    shape = span_avro_schema(avro_schema_of(protobuf_topic.schema_versions[0].parsed.message))
    (avro_folder / "span.avsc").write_text(json.dumps(shape))
    (avro_folder / "topic.yaml").write_text(SPAN_TOPIC.format(format="avro", file="span.avsc", message=""))
    return protobuf_topic, load_topic(avro_folder / "topic.yaml")


def as_json(value: bytes, parsed) -> bytes:
    """The JSON text of a Confluent-framed Avro page view, as a JSON producer writes it."""
    record = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, parsed)
    record["occurred_at"] = int(record["occurred_at"].timestamp() * 1000)
    record["view_id"] = str(record["view_id"])
    return json.dumps(record, separators=(",", ":")).encode()


def protobuf_page_views(folder: Path, avro_topic_yaml: str):
    """The page views' table as a Protobuf topic in `folder`: the same keys, `v1.proto` for `v1.avsc`."""
    table = folder / "shop" / "page_views"
    table.mkdir(parents=True)
    (table / "v1.proto").write_text(PAGE_VIEW_PROTO)
    document = avro_topic_yaml.replace("file: v1.avsc", "file: v1.proto\n    message: com.example.shop.PageView")
    document = document.replace("  - version: 2\n    file: v2.avsc\n    registry_id: 1002\n", "")
    (table / "topic.yaml").write_text(document.replace("owner: team-web", "owner: team-web\nformat: protobuf"))
    return load_topic(table / "topic.yaml")


def as_protobuf(value: bytes, parsed, message_class) -> bytes:
    """A Confluent-framed Avro page view as the Protobuf message a producer would frame for it."""
    record = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, parsed)
    message = message_class(view_id=str(record["view_id"]), url=record["url"], duration_ms=record["duration_ms"])
    message.occurred_at.FromDatetime(record["occurred_at"])
    for name in ("user_id", "referrer"):
        if record[name] is not None:
            setattr(message, name, record[name])
    message.client.ip_address, message.client.user_agent = record["client"]["ip_address"], record["client"]["user_agent"]
    return encode_protobuf(1001, [0], message)


def decode_all(decoder: BatchDecoder, batches: list[KafkaBatch]) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    rows = sum(decoder.decode(batch).rows_count for batch in batches)
    return time.perf_counter() - wall, time.process_time() - cpu, rows


def landed_values(topic, values: list[bytes]) -> list[dict]:
    """The value columns the record path lands for `values`, in order."""
    decoded = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=False).decode(
        KafkaBatch([0] * len(values), list(range(len(values))), [START_MS] * len(values), [None] * len(values), values))
    names = [f["name"] for f in topic.schema_versions[0].schema["fields"]]
    rows = sorted((row for table in decoded.rows.values() for row in table.to_pylist()),
                  key=lambda row: row["_kafka_offset"])
    return [{name: row[name] for name in names} for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--spans", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args(argv)
    page_views = load_catalog("schema_catalog").by_name("shop", "page_views")
    avro_topic = page_views.model_copy(update=dict(schema_versions=page_views.schema_versions[:1]))
    json_topic = avro_topic.model_copy(update=dict(payload_format="json"))
    generator = PageViews(avro_topic, random.Random(7))
    records = [generator.next_record(START_MS + i, 1, 1, None) for i in range(arguments.records)]
    records = [r for r in records if r.value is not None]  # tombstones decode to nothing in either format
    parsed = avro_topic.schema_versions[0].parsed
    json_values = [as_json(r.value, parsed) for r in records]
    scratch = tempfile.TemporaryDirectory()
    protobuf_topic = protobuf_page_views(Path(scratch.name), Path(page_views.source_file).read_text())
    message_class = protobuf_topic.schema_versions[0].parsed.message_class
    protobuf_values = [as_protobuf(r.value, parsed, message_class) for r in records]
    size = LandingSettings(lake_root="", kafka_config={}).batch_size

    protobuf_spans, avro_spans = span_topics(Path(scratch.name))
    span_class = protobuf_spans.schema_versions[0].parsed.message_class
    compiled_span = protobuf_spans.schema_versions[0].parsed
    span_values = [encode_protobuf(2001, compiled_span.indexes_of(compiled_span.message), span)
                   for span in spans(arguments.spans, random.Random(11), span_class)]
    span_schema = avro_spans.schema_versions[0].parsed
    avro_span_values = [encode_confluent(2001, span_schema, row) for row in landed_values(protobuf_spans, span_values)]
    span_records = [SimpleNamespace(timestamp_ms=START_MS + n, key=None) for n in range(len(span_values))]

    parsed_key = fastavro.parse_schema(KEY_SCHEMA)
    keyed_topic = avro_topic.model_copy(update=dict(key_schema=SchemaVersion(0, "key.avsc", None, KEY_SCHEMA, parsed_key)))
    avro_keys = [encode_confluent(11, parsed_key, {"view_id": i}) for i in range(len(records))]

    def batches(values: list[bytes], keys: list[bytes | None] | None = None) -> list[KafkaBatch]:
        source = records if len(values) == len(records) else span_records
        keys = keys or [r.key for r in source]
        out = []
        for first in range(0, len(values), size):
            part = source[first:first + size]
            out.append(KafkaBatch([0] * len(part), list(range(first, first + len(part))), [r.timestamp_ms for r in part],
                                  keys[first:first + size], values[first:first + size]))
        return out

    measured = []
    avro_values = [r.value for r in records]
    urls = sorted({fastavro.schemaless_reader(io.BytesIO(r.value[5:]), parsed, parsed)["url"] for r in records[:5000]})
    registry_ids = frozenset(v.registry_id for v in avro_topic.schema_versions if v.registry_id is not None)
    routed_topic = avro_topic.model_copy(update=dict(route=Route(("url",), tuple(urls[::2])),
                           routed_siblings=(RoutedSibling("shop/other", Route(("url",), tuple(urls[1::2])), registry_ids),)))
    paths = []
    for name, topic, values, keys, ways in (("avro", avro_topic, avro_values, None, (True, False)),
                                            ("json", json_topic, json_values, None, (True, False)),
                                            ("protobuf", protobuf_topic, protobuf_values, None, (True, False)),
                                            ("avro+key", keyed_topic, avro_values, avro_keys, (True,)),
                                            ("avro routed", routed_topic, avro_values, None, (True,)),
                                            ("avro span", avro_spans, avro_span_values, None, (True, False)),
                                            ("protobuf span", protobuf_spans, span_values, None, (True, False))):
        for columnar in ways:
            decoder = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar)
            decode_all(decoder, batches(values[:size], keys and keys[:size]))  # compiled and warm
            paths.append((name, columnar, topic, decoder, batches(values, keys), len(values)))
    gc.collect()
    gc.freeze()  # the bench's records are no landing's to sweep
    rounds: dict[int, list[tuple[float, float]]] = {index: [] for index in range(len(paths))}
    for _ in range(arguments.rounds):
        for index, (name, _, topic, decoder, prepared, count) in enumerate(paths):
            wall, cpu, rows = decode_all(decoder, prepared)
            assert rows == count or topic.route is not None, f"{name}: {rows} rows of {count} records"
            rounds[index].append((wall, cpu))
    measured = {}
    for index, (name, columnar, _, decoder, _, count) in enumerate(paths):
        wall, cpu = sorted(rounds[index], key=lambda taken: taken[1])[len(rounds[index]) // 2]
        path = "columnar" if columnar else "record by record"
        measured[f"{name} {path}"] = (count, wall, cpu)
        print(f"{name:13} {path:16} {count:>8} records {count / wall:>10,.0f} records/s "
              f"{cpu / count * 1e6:7.2f} CPU µs/record  ({decoder.decoding_paths})")

    def per_record(name: str) -> float:
        count, _, cpu = measured[name]
        return cpu / count

    page_view_ratio = per_record("protobuf columnar") / per_record("avro columnar")
    span_ratio = per_record("protobuf span columnar") / per_record("avro span columnar")
    print(f"Protobuf columnar / Avro columnar, CPU a record: page view {page_view_ratio:.2f}x, span {span_ratio:.2f}x")
    print("RESULT " + " ".join(f"{name.replace(' ', '_')}={count / wall:.0f}/s,{cpu / count * 1e6:.2f}us"
                               for name, (count, wall, cpu) in measured.items())
          + f" protobuf_vs_avro_page_view={page_view_ratio:.2f} protobuf_vs_avro_span={span_ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
