"""A topic's key decoded into columns beside `_kafka_key` (`key_schema`), and tombstones kept as rows that say so
(`keep_tombstones`): decoded on both decode paths, for Avro and JSON topics; a key that does not read as its schema
makes its record a dead letter, and costs only itself.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from fastavro import parse_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.decoding.key_columns import trailing_columns
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.kafka.records import KAFKA_COLUMNS, KafkaRecord
from kafka_lake.kafka.schema_resolution import CatalogSchemas
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.table_schema import table_columns
from kafka_lake.topics.loader import load_topic

H = datetime(2026, 11, 1, 10, tzinfo=timezone.utc)
MS = int(H.timestamp() * 1000) + 60_000
KEY = {"type": "record", "name": "Key", "namespace": "db.server.customers",
       "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": ["null", "string"], "default": None}]}
VALUE = {"type": "record", "name": "Value", "namespace": "db.server.customers", "fields": [
    {"name": "id", "type": "long"}, {"name": "email", "type": "string"},
    {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
KEY_ID, VALUE_ID = 3, 4  # the key's subject has ids of its own: the catalog does not list them


def topic_folder(root: Path, fmt: str = "avro", placed: str = "event_time", **keys) -> TableSpec:
    folder = root / "db" / "customers"
    folder.mkdir(parents=True)
    (folder / "v1.avsc").write_text(json.dumps(VALUE))
    (folder / "key.avsc").write_text(json.dumps(KEY))
    time_partitioning = {"source": "event_time", "field": "updated_at"} if placed == "event_time" else {"source": placed}
    version = {"version": 1, "file": "v1.avsc", **({"registry_id": VALUE_ID} if fmt == "avro" else {})}
    document = {"topic": "db.server.customers", "owner": "team-test", "start_hour": "2026-11-01T00:00Z",
                "format": fmt, "time_partitioning": time_partitioning, "schema_versions": [version],
                "key_schema": "key.avsc", **keys}
    (folder / "topic.yaml").write_text(json.dumps(document))
    return load_topic(folder / "topic.yaml")


def avro(schema: dict, schema_id: int, value: dict) -> bytes:
    return encode_confluent(schema_id, parse_schema(schema), value)


def customer(number: int) -> dict:
    return {"id": number, "email": f"c{number}@example.com", "updated_at": MS + number}


def decode(topic: TableSpec, records: list[KafkaRecord], columnar: bool):
    return BatchDecoder(topic, CatalogSchemas(topic), None, columnar=columnar, kafka_hour=None).decode(records)


def rows_of(decoded) -> list[dict]:
    rows = [row for table in decoded.rows.values() for row in table.to_pylist()]
    return sorted(rows, key=lambda row: row["_kafka_offset"])


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "record by record"])
def test_given_a_key_schema_the_key_lands_as_columns_beside_its_bytes_and_a_key_that_does_not_read_is_a_dead_letter(
        tmp_path, columnar):
    topic = topic_folder(tmp_path, keep_tombstones=True)
    keys = [avro(KEY, KEY_ID, {"id": 1, "region": "eu"}), avro(KEY, KEY_ID + 10, {"id": 2, "region": None}),
            None, b"\x00\x00\x00\x00\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", avro(KEY, KEY_ID, {"id": 5, "region": "us"})]
    values = [avro(VALUE, VALUE_ID, customer(1)), avro(VALUE, VALUE_ID, customer(2)), avro(VALUE, VALUE_ID, customer(3)),
              avro(VALUE, VALUE_ID, customer(4)), None]
    records = [KafkaRecord(0, offset, MS, key, value) for offset, (key, value) in enumerate(zip(keys, values))]

    decoded = decode(topic, records, columnar)

    rows = rows_of(decoded)
    assert [(r["_kafka_offset"], r["id"], r["_kafka_key_id"], r["_kafka_key_region"], r["_kafka_tombstone"])
            for r in rows] == [(0, 1, 1, "eu", False), (1, 2, 2, None, False), (2, 3, None, None, False),
                               (4, None, 5, "us", True)]
    assert [r["_kafka_key"] for r in rows] == [keys[0], keys[1], None, keys[4]]
    tombstone = rows[-1]
    assert tombstone["email"] is None and tombstone["updated_at"] is None, "a tombstone's value columns are null"
    [letters] = decoded.dead_letters.values()
    [letter] = letters.to_pylist()
    assert (letter["_kafka_offset"], letter["_kafka_key"], letter["value"]) == (3, keys[3], values[3])
    assert letter["error"].startswith("undecodable_key: the key does not read as key.avsc: ")
    assert decoded.dead_letter_causes == {"undecodable_key": 1}
    assert (decoded.rows_count, decoded.tombstones, decoded.records) == (4, 0, 5), "a kept tombstone is a row"
    for table in decoded.rows.values():
        assert list(table.schema)[-3:] == list(trailing_columns(topic))


def test_a_kept_tombstone_lands_by_its_kafka_time_in_the_newest_version_and_one_stamped_in_no_hour_is_a_dead_letter(
        tmp_path):
    topic = topic_folder(tmp_path, keep_tombstones=True)
    later = MS + 3 * 3_600_000
    records = [KafkaRecord(0, 0, later, avro(KEY, KEY_ID, {"id": 7, "region": None}), None),
               KafkaRecord(0, 1, -1, avro(KEY, KEY_ID, {"id": 8, "region": None}), None)]

    decoded = BatchDecoder(topic, CatalogSchemas(topic), None, kafka_hour=None).decode(records[:1])
    [(placement, table)] = decoded.rows.items()
    assert (placement.schema_version, placement.hour) == (1, datetime(2026, 11, 1, 13, tzinfo=timezone.utc))
    assert table.column("_kafka_key_id").to_pylist() == [7] and table.column("_kafka_tombstone").to_pylist() == [True]

    decoded = BatchDecoder(topic, CatalogSchemas(topic), None, kafka_hour=KafkaHour(H)).decode(records[1:])
    assert decoded.rows == {} and decoded.dead_letter_causes == {"unplaceable_kafka_timestamp": 1}


def test_without_keep_tombstones_a_tombstone_is_counted_not_landed_and_the_table_has_no_tombstone_column(tmp_path):
    topic = topic_folder(tmp_path)
    records = [KafkaRecord(0, 0, MS, avro(KEY, KEY_ID, {"id": 1, "region": None}), avro(VALUE, VALUE_ID, customer(1))),
               KafkaRecord(0, 1, MS, avro(KEY, KEY_ID, {"id": 1, "region": None}), None)]

    decoded = decode(topic, records, columnar=True)

    assert (decoded.rows_count, decoded.tombstones) == (1, 1)
    [table] = decoded.rows.values()
    assert table.column_names[-2:] == ["_kafka_key_id", "_kafka_key_region"]
    assert [c.name for c in table_columns(topic)][-2:] == ["_kafka_key_id", "_kafka_key_region"]


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "record by record"])
def test_a_json_topic_reads_its_keys_as_json_plain_or_framed(tmp_path, columnar):
    topic = topic_folder(tmp_path, fmt="json", placed="kafka_time")
    value = json.dumps({"id": 1, "email": "a@example.com", "updated_at": MS}).encode()
    keys = [b'{"id": 1, "region": "eu"}', b"\x00\x00\x00\x00\x09" + b'{"id": 2}', b'{"id": "one"}']
    records = [KafkaRecord(0, offset, MS, key, value) for offset, key in enumerate(keys)]

    decoded = decode(topic, records, columnar)

    assert [(r["_kafka_key_id"], r["_kafka_key_region"]) for r in rows_of(decoded)] == [(1, "eu"), (2, None)]
    [letters] = decoded.dead_letters.values()
    assert letters.column("_kafka_offset").to_pylist() == [2]
    assert "id" in letters.column("error")[0].as_py()


def test_the_table_declares_the_key_and_tombstone_columns_after_the_kafka_columns(tmp_path):
    topic = topic_folder(tmp_path, keep_tombstones=True)
    names = [column.name for column in table_columns(topic)]
    kafka = [field.name for field in KAFKA_COLUMNS]
    assert names == ["id", "email", "updated_at", *kafka, "_kafka_key_id", "_kafka_key_region", "_kafka_tombstone"]
    assert {c.name: c.type.hive() for c in table_columns(topic)}["_kafka_key_id"] == "bigint"
    assert pa.bool_() == trailing_columns(topic)[-1].type


def test_a_raw_archive_that_keeps_its_tombstones_lands_them_as_rows_with_a_null_value(tmp_path):
    folder = tmp_path / "archive" / "customers"
    folder.mkdir(parents=True)
    (folder / "topic.yaml").write_text(json.dumps({"topic": "db.server.customers", "owner": "team-test", "format": "raw",
                                                   "start_hour": "2026-11-01T00:00Z", "keep_tombstones": True}))
    topic = load_topic(folder / "topic.yaml")
    records = [KafkaRecord(0, 0, MS, b"k1", b"anything"), KafkaRecord(0, 1, MS, b"k1", None)]

    decoded = BatchDecoder(topic, CatalogSchemas(topic), None, kafka_hour=None).decode(records)

    assert [(row["value"], row["_kafka_key"], row["_kafka_tombstone"]) for row in rows_of(decoded)] == [
        (b"anything", b"k1", False), (None, b"k1", True)]
    assert (decoded.rows_count, decoded.tombstones) == (2, 0)
    assert [c.name for c in table_columns(topic)][-1] == "_kafka_tombstone"


def _mangled_key(data, good: bytes) -> bytes | None:
    """A key as a broken or hostile producer sends it: good, cut short, a byte flipped, random bytes, or none."""
    how = data.draw(st.sampled_from(["good", "cut", "flip", "random", "none"]))
    if how == "good":
        return good
    if how == "none":
        return None
    if how == "random":
        return data.draw(st.binary(max_size=40))
    if how == "cut":
        return good[:data.draw(st.integers(0, len(good) - 1))]
    position = data.draw(st.integers(0, len(good) - 1))
    return good[:position] + bytes([good[position] ^ data.draw(st.integers(1, 255))]) + good[position + 1:]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_given_hostile_keys_then_each_record_is_one_row_or_dead_letter_and_both_paths_agree(tmp_path_factory, data):
    """Keys broken every way, beside good values and tombstones: every record is exactly one row (with its key's
    columns, or nulls for no key) or one dead letter, and the columnar and record paths land the same."""
    topic = topic_folder(tmp_path_factory.mktemp("catalog"), keep_tombstones=True)
    records = []
    for offset in range(data.draw(st.integers(1, 30))):
        good = avro(KEY, KEY_ID, {"id": offset, "region": data.draw(st.sampled_from([None, "eu", "é" * 3]))})
        value = None if data.draw(st.booleans()) and offset % 3 == 0 else avro(VALUE, VALUE_ID, customer(offset))
        records.append(KafkaRecord(0, offset, MS, _mangled_key(data, good), value))

    columnar, by_record = decode(topic, records, True), decode(topic, records, False)

    rows = [(r["_kafka_offset"], r["_kafka_key_id"], r["_kafka_key_region"], r["_kafka_tombstone"]) for r in rows_of(columnar)]
    assert rows == [(r["_kafka_offset"], r["_kafka_key_id"], r["_kafka_key_region"], r["_kafka_tombstone"])
                    for r in rows_of(by_record)]
    letters = sorted(o for t in columnar.dead_letters.values() for o in t.column("_kafka_offset").to_pylist())
    assert letters == sorted(o for t in by_record.dead_letters.values() for o in t.column("_kafka_offset").to_pylist())
    assert sorted([offset for offset, *_ in rows] + letters) == list(range(len(records))), "each record once"
    for offset, key_id, _, _ in rows:
        if records[offset].key is None:
            assert key_id is None
