"""Schemas and timestamps real producers send, landed end to end: the real Tansu broker, Spark, Dagster.

Each test writes its own topic folder, produces to the broker with confluent-kafka, lands through the
platform and reads the lake back the way readers do (pyarrow.dataset, Spark's Parquet reader).
"""

from __future__ import annotations

import json
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from kafka_lake import layout
from kafka_lake.catalog import TopicSpec, load_topic
from kafka_lake.framing import encode_confluent
from kafka_lake.hours import to_millis
from kafka_lake.storage import LakeStorage
from tests.landing_fixtures import HOURS, Produced, Traffic, land_on_spark, landing_settings, produce, unique_topic_name

UTC = timezone.utc


def write_topic(catalog_dir: Path, kafka_topic: str, schemas: list[dict], **keys) -> TopicSpec:
    """`e2e/orders/topic.yaml` with one `.avsc` per schema version and the given keys (event time by default)."""
    folder = catalog_dir / "e2e" / "orders"
    folder.mkdir(parents=True, exist_ok=True)
    versions = []
    for number, schema in enumerate(schemas, start=1):
        (folder / f"v{number}.avsc").write_text(json.dumps(schema))
        registry_id = zlib.crc32(kafka_topic.encode()) % 10**6 * 10 + number
        versions.append({"version": number, "file": f"v{number}.avsc", "registry_id": registry_id})
    document = {
        "topic": kafka_topic, "owner": "team-test", "start_hour": "2026-11-01T00:00Z", "schema_versions": versions,
        "time_partitioning": {"source": "event_time", "field": "occurred_at"}, "dead_letter_rate_threshold": 0.5,
        **keys,
    }
    (folder / "topic.yaml").write_text(json.dumps(document))  # JSON is YAML
    return load_topic(folder / "topic.yaml")


def produced(topic: TopicSpec, version: int, record: dict, moment: datetime, partition: int = 0) -> Produced:
    schema_version = topic.version(version)
    value = encode_confluent(schema_version.registry_id, schema_version.parsed, record)
    return Produced(partition, to_millis(moment), f"k{len(record)}".encode(), value, "row", record, version)


def on_broker(broker, topic: TopicSpec, items: list[Produced], partitions: int = 1) -> Traffic:
    broker.create_topic(topic.topic, partitions)
    traffic = Traffic(topic, sorted(items, key=lambda item: item.partition))
    produce(broker.bootstrap_servers, traffic)
    return traffic


# --- every schema version readable together --------------------------------------------------------------

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "com.example",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "occurred_at", "type": "string"},
        {"name": "shipping", "type": {"type": "record", "name": "Shipping", "fields": [
            {"name": "city", "type": "string"},
            {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
                {"name": "sku", "type": "string"}]}}},
        ]}},
        {"name": "totals", "type": {"type": "map", "values": "long"}},
    ],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": [
        ORDER_V1["fields"][0], ORDER_V1["fields"][1],
        {"name": "shipping", "type": {"type": "record", "name": "Shipping", "fields": [
            {"name": "city", "type": "string"},
            {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
                {"name": "sku", "type": "string"}, {"name": "gift", "type": "boolean", "default": False}]}}},
            {"name": "country", "type": "string", "default": "NL"},
        ]}},
        ORDER_V1["fields"][3],
        {"name": "coupon", "type": "string", "default": ""},
    ],
}


def test_given_two_schema_versions_whose_nested_records_gain_fields_then_any_parquet_reader_reads_every_row(
        broker, spark, tmp_path):
    """Given a topic whose v2 adds fields inside a nested record, inside array items and at the top level
    (all non-null in Avro), with records of both versions landed on Spark into a local lake."""
    topic = write_topic(tmp_path / "catalog", unique_topic_name(), [ORDER_V1, ORDER_V2])
    hour = HOURS[0]
    items = []
    for n in range(6):
        version = 1 if n < 3 else 2
        shipping = {"city": f"c{n}", "lines": [{"sku": f"s{n}"}] if version == 1 else [{"sku": f"s{n}", "gift": True}]}
        record = {"id": n, "occurred_at": f"{hour + timedelta(minutes=n):%Y-%m-%dT%H:%M:%S}Z", "shipping": shipping,
                  "totals": {"net": n}}
        if version == 2:
            shipping["country"], record["coupon"] = "DE", f"c-{n}"
        items.append(produced(topic, version, record, hour + timedelta(minutes=n, seconds=30)))
    on_broker(broker, topic, items)
    settings = landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers)
    land_on_spark(topic, settings, spark, [hour])
    table_folder = Path(settings.lake_root) / layout.table_prefix(topic.database, topic.table)

    # When pyarrow.dataset reads the whole table folder with the schema unifying every file's,
    files = ds.dataset(table_folder, format="parquet", partitioning="hive")
    unified = pa.unify_schemas([fragment.physical_schema for fragment in files.get_fragments()],
                               promote_options="permissive")
    rows = ds.dataset(table_folder, format="parquet", partitioning="hive", schema=unified).to_table().to_pylist()

    # then every row is there, the fields a version lacks read as null.
    assert sorted(row["id"] for row in rows) == list(range(6))
    by_id = {row["id"]: row for row in rows}
    assert by_id[0]["shipping"] == {"city": "c0", "lines": [{"sku": "s0", "gift": None}], "country": None}
    assert by_id[0]["coupon"] is None
    assert by_id[4]["shipping"] == {"city": "c4", "lines": [{"sku": "s4", "gift": True}], "country": "DE"}
    assert all(field.nullable for field in unified)

    # And Spark's own Parquet reader, merging the schemas, reads every row too.
    merged = spark.read.option("mergeSchema", "true").parquet(str(table_folder))
    spark_rows = {row["id"]: row.asDict(recursive=True) for row in merged.collect()}
    assert sorted(spark_rows) == list(range(6))
    assert spark_rows[1]["shipping"]["country"] is None and spark_rows[5]["shipping"]["country"] == "DE"
    assert spark_rows[5]["shipping"]["lines"] == [{"sku": "s5", "gift": True}]
