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
that makes objects per record would otherwise pay for sweeping them too. Prints one line per path and a last
`RESULT …` line.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
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

    parsed_key = fastavro.parse_schema(KEY_SCHEMA)
    keyed_topic = avro_topic.model_copy(update=dict(key_schema=SchemaVersion(0, "key.avsc", None, KEY_SCHEMA, parsed_key)))
    avro_keys = [encode_confluent(11, parsed_key, {"view_id": i}) for i in range(len(records))]

    def batches(values: list[bytes], keys: list[bytes | None] | None = None) -> list[KafkaBatch]:
        keys = keys or [r.key for r in records]
        out = []
        for first in range(0, len(values), size):
            part = records[first:first + size]
            out.append(KafkaBatch([0] * len(part), list(range(first, first + len(part))), [r.timestamp_ms for r in part],
                                  keys[first:first + size], values[first:first + size]))
        return out

    measured = []
    avro_values = [r.value for r in records]
    urls = sorted({fastavro.schemaless_reader(io.BytesIO(r.value[5:]), parsed, parsed)["url"] for r in records[:5000]})
    registry_ids = frozenset(v.registry_id for v in avro_topic.schema_versions if v.registry_id is not None)
    routed_topic = avro_topic.model_copy(update=dict(route=Route(("url",), tuple(urls[::2])),
                           routed_siblings=(RoutedSibling("shop/other", Route(("url",), tuple(urls[1::2])), registry_ids),)))
    gc.collect()
    gc.freeze()  # the bench's records are no landing's to sweep
    for name, topic, values, keys, paths in (("avro", avro_topic, avro_values, None, (True, False)),
                                             ("json", json_topic, json_values, None, (True, False)),
                                             ("protobuf", protobuf_topic, protobuf_values, None, (True, False)),
                                             ("avro+key", keyed_topic, avro_values, avro_keys, (True,)),
                                             ("avro routed", routed_topic, avro_values, None, (True,))):
        for columnar in paths:
            decoder = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar)
            decode_all(decoder, batches(values[:size], keys and keys[:size]))  # compiled and warm
            wall, cpu, rows = decode_all(decoder, batches(values, keys))
            assert rows == len(values) or topic.route is not None, f"{name}: {rows} rows of {len(values)} records"
            path = "columnar" if columnar else "record by record"
            measured.append((f"{name} {path}", len(values), wall, cpu))
            print(f"{name:11} {path:16} {len(values):>8} records {len(values) / wall:>10,.0f} records/s "
                  f"{cpu / len(values) * 1e6:7.2f} CPU µs/record  ({decoder.decoding_paths})")
    print("RESULT " + " ".join(f"{name.replace(' ', '_')}={count / wall:.0f}/s,{cpu / count * 1e6:.2f}us"
                               for name, count, wall, cpu in measured))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
