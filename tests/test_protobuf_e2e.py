"""A Protobuf topic end to end: the sample orders produced to the real broker as Confluent's Protobuf serializer frames
them, landed by `dagster asset materialize` (whose metadata says how they were decoded), and read back by pyarrow and
DuckDB with the columns of the mapping.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import uuid

import duckdb
import pyarrow.dataset as ds
from confluent_kafka import Producer
from dagster import AssetKey, DagsterInstance

from dev_services.demo_traffic import Orders, broken_positions, kafka_timestamps
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.schemas.arrow_mapping import arrow_schema_for
from kafka_lake.topics.loader import load_catalog
from tests.conftest import PII_TEST_KEY, REPO
from tests.landing_fixtures import HOURS

SAMPLE = REPO / "schema_catalog" / "shop" / "orders"
PARTITIONS = 2


def test_protobuf_orders_from_the_broker_land_through_the_dagster_cli_and_read_back_in_pyarrow_and_duckdb(
        broker, tmp_path):
    kafka_topic = f"e2e.orders.proto.{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "catalog" / "shop" / "orders"
    shutil.copytree(SAMPLE, folder)
    topic_yaml = folder / "topic.yaml"
    topic_yaml.write_text(topic_yaml.read_text().replace("topic: shop.orders", f"topic: {kafka_topic}"))
    spec = load_catalog(tmp_path / "catalog").by_name("shop", "orders")
    broker.create_topic(kafka_topic, PARTITIONS)
    rng = random.Random(26)
    orders = Orders(spec, rng)
    hour = HOURS[1]
    stamps = kafka_timestamps([hour], 60, rng)
    broken = broken_positions(len(stamps), 1, rng)
    traffic = [orders.next_record(stamp, 1, PARTITIONS, broken.get(index)) for index, stamp in enumerate(stamps)]
    closing = [orders.closing_record(int(hour.timestamp() * 1000) + 3_600_000 - 1, partition, PARTITIONS)
               for partition in range(PARTITIONS)]
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for batch in (traffic, closing):  # each partition's last record alone in its batch: Tansu's watermark is exact
        for record in batch:
            producer.produce(kafka_topic, record.value, record.key, partition=record.partition,
                             timestamp=record.timestamp_ms)
        producer.flush(30)
    lake = tmp_path / "lake"
    (tmp_path / "home").mkdir()
    env = {**os.environ, "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"), "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "LAKE_ROOT": str(lake), "PII_HMAC_KEY": PII_TEST_KEY, "SPARK_MASTER": "local[1]",
           "DAGSTER_HOME": str(tmp_path / "home")}
    partition = hour.strftime("%Y-%m-%d-%H:00")

    completed = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize", "--select", "raw/shop/orders",
         "--partition", partition, "-m", "platform_assets.definitions"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300)

    assert completed.returncode == 0, completed.stderr[-3000:]
    [manifest] = ManifestStore(LakeStorage(str(lake)), "shop", "orders").all()
    valid = [record for record in traffic + closing if not record.broken]  # the closing records end the hour
    assert manifest.counts.rows == len(valid) and manifest.counts.dead_letters == len(broken) == 4
    # Operators see how each version was decoded, in the manifest and on the hour's materialization.
    assert manifest.decoding_paths == {"1": "columnar"}
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        event = instance.get_latest_materialization_event(AssetKey(["raw", "shop", "orders"]))
    assert event is not None and event.asset_materialization is not None
    assert event.asset_materialization.metadata["decoding_paths"].value == {"1": "columnar"}
    expected = arrow_schema_for(spec.version(1), spec.pii_fields)
    landed = ds.dataset(lake / "shop" / "orders" / "schema_version=1", format="parquet").to_table()
    assert landed.num_rows == len(valid)
    assert landed.schema.remove_metadata().equals(expected.remove_metadata())
    assert sorted(landed.column("order_id").to_pylist()) == sorted(
        spec.version(1).parsed.message_class.FromString(record.value[6:]).order_id for record in valid)
    described = duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{lake}/shop/orders/**/*.parquet')").fetchall()
    types = {name: kind for name, kind, *_ in described}
    assert types["placed_at"] == "TIMESTAMP WITH TIME ZONE" and types["status"] == "VARCHAR"
    assert types["lines"].startswith("STRUCT(sku VARCHAR, quantity INTEGER, unit_price STRUCT(currency VARCHAR")
    assert types["attributes"] == "MAP(VARCHAR, VARCHAR)"
    assert types["payment"] == "STRUCT(card_last4 VARCHAR, voucher_code VARCHAR)"
    [(payments,)] = duckdb.sql(f"SELECT count(*) FROM read_parquet('{lake}/shop/orders/**/*.parquet') "
                               f"WHERE payment.card_last4 IS NOT NULL OR payment.voucher_code IS NOT NULL").fetchall()
    assert payments == len(valid)
