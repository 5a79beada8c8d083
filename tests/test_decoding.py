"""Decoding Confluent-framed Avro into the lake's Arrow tables: types, PII, dead letters, placement.

Records are framed with the project's own encoder and decoded back; no mocks, a real HTTP registry stand-in.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import io
import json
import uuid
from decimal import Decimal
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.decoding.decoded_batch import DEAD_LETTER_SCHEMA, DecodedBatch, Placement
from kafka_lake.decoding.formats import schemas_for
from kafka_lake.decoding.pii import MissingPiiKey, Pseudonymizer
from kafka_lake.event_time import parse_event_time
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.kafka.records import KAFKA_COLUMNS, KafkaRecord
from kafka_lake.kafka.schema_resolution import CatalogSchemas, RegistrySchemas, SchemaRegistryUnavailable
from kafka_lake.lake import layout
from kafka_lake.schemas.arrow_mapping import MAX_JSON_DEPTH, arrow_mapping_for, arrow_schema_for, column_comment
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import CatalogError, load_catalog, load_topic
from tests.registry_stand_in import RegistryStandIn

UTC = dt.timezone.utc
CATALOG = Path(__file__).resolve().parent.parent / "schema_catalog"
PII_KEY = b"test-pii-key"
KAFKA_TIME = dt.datetime(2026, 11, 1, 13, 30, tzinfo=UTC)
KAFKA_MS = int(KAFKA_TIME.timestamp() * 1000)
HOUR_13 = dt.datetime(2026, 11, 1, 13, tzinfo=UTC)
HOUR_11 = dt.datetime(2026, 11, 1, 11, tzinfo=UTC)

ZOO_SCHEMA = {
    "type": "record",
    "name": "Zoo",
    "namespace": "test.zoo",
    "fields": [
        {"name": "occurred_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "precise", "type": "double"},
        {"name": "name", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "checksum", "type": {"type": "fixed", "name": "Checksum", "size": 4}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "huge", "type": {
            "type": "fixed", "name": "Huge", "size": 20, "logicalType": "decimal", "precision": 45, "scale": 5,
        }},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "lunch", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "lap", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "at_micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "wall_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "wall_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "street", "type": "string"},
            {"name": "zip", "type": ["null", "string"]},
        ]}},
        {"name": "previous_address", "type": ["null", "Address"]},
        {"name": "favorite", "type": ["null", "Color"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "scores", "type": {"type": "map", "values": "long"}},
        {"name": "nickname", "type": ["string", "null"]},
        {"name": "choice", "type": ["null", "int", "long", "string", "Color", "Address"]},
        {"name": "amount", "type": ["double", "string"]},
    ],
}

# Every column, struct field, list item and map value is nullable (SPEC), so only the types differ.
ZOO_TYPES = {
    "occurred_at": pa.timestamp("ms", tz="UTC"),
    "flag": pa.bool_(),
    "small": pa.int32(),
    "big": pa.int64(),
    "ratio": pa.float32(),
    "precise": pa.float64(),
    "name": pa.string(),
    "raw": pa.binary(),
    "color": pa.string(),
    "checksum": pa.binary(),
    "price": pa.decimal128(9, 2),
    "huge": pa.string(),  # decimal(45, 5): wider than readers hold, as its exact text
    "day": pa.date32(),
    "lunch": pa.time32("ms"),
    "lap": pa.time64("us"),
    "at_micros": pa.timestamp("us", tz="UTC"),
    "wall_ms": pa.timestamp("ms"),
    "wall_us": pa.timestamp("us"),
    "id": pa.string(),
    "address": pa.struct([pa.field("street", pa.string()), pa.field("zip", pa.string())]),
    "previous_address": pa.struct([pa.field("street", pa.string()), pa.field("zip", pa.string())]),
    "favorite": pa.string(),
    "tags": pa.list_(pa.field("element", pa.string())),
    "scores": pa.map_(pa.string(), pa.field("value", pa.int64())),
    "nickname": pa.string(),
    "choice": pa.struct([
        pa.field("member0", pa.int32()),
        pa.field("member1", pa.int64()),
        pa.field("member2", pa.string()),
        pa.field("member3", pa.string()),
        pa.field("member4", pa.struct([pa.field("street", pa.string()), pa.field("zip", pa.string())])),
    ]),
    "amount": pa.struct([pa.field("member0", pa.float64()), pa.field("member1", pa.string())]),
}


# --- helpers ---------------------------------------------------------------------------------


def write_topic(
    tmp_path: Path,
    schemas: list[dict],
    *,
    time_partitioning: dict | None = None,
    pii_fields: list[str] | None = None,
    first_registry_id: int = 501,
) -> TableSpec:
    """Writes `zoo/animals/topic.yaml` plus one .avsc per schema version, and loads it like the catalog does."""
    folder = tmp_path / "zoo" / "animals"
    folder.mkdir(parents=True, exist_ok=True)
    versions = []
    for number, schema in enumerate(schemas, start=1):
        (folder / f"v{number}.avsc").write_text(json.dumps(schema))
        versions.append({"version": number, "file": f"v{number}.avsc", "registry_id": first_registry_id + number - 1})
    document = {
        "topic": "zoo.animals",
        "owner": "team-test",
        "time_partitioning": time_partitioning or {"source": "event_time", "field": "occurred_at"},
        "start_hour": "2026-11-01T00:00Z",
        "schema_versions": versions,
    }
    if pii_fields:
        document["pii_fields"] = pii_fields
    (folder / "topic.yaml").write_text(json.dumps(document))
    return load_topic(folder / "topic.yaml")


def small_schema(time_type, extra_fields: tuple = ()) -> dict:
    return {
        "type": "record",
        "name": "Small",
        "fields": [{"name": "occurred_at", "type": time_type}, {"name": "n", "type": "int"}, *extra_fields],
    }


def framed(topic: TableSpec, value: dict, version: int = 1) -> bytes:
    schema_version = topic.version(version)
    return encode_confluent(schema_version.registry_id, schema_version.parsed, value)


def kafka_record(value: bytes | None, offset: int = 0, *, partition: int = 0, timestamp_ms: int = KAFKA_MS) -> KafkaRecord:
    return KafkaRecord(partition=partition, offset=offset, timestamp_ms=timestamp_ms, key=b"key-%d" % offset, value=value)


def decode(topic: TableSpec, *values: bytes | None, pii_key: bytes | None = PII_KEY) -> DecodedBatch:
    records = [kafka_record(value, offset) for offset, value in enumerate(values)]
    return BatchDecoder(topic, CatalogSchemas(topic), pii_key).decode(records)


def only_rows(batch: DecodedBatch) -> list[dict]:
    assert len(batch.rows) == 1, f"expected one placement, got {sorted(batch.rows)}"
    return next(iter(batch.rows.values())).to_pylist()


def dead_letter_rows(batch: DecodedBatch) -> list[dict]:
    return [row for table in batch.dead_letters.values() for row in table.to_pylist()]


def hmac_hex(text: str) -> str:
    return hmac.new(PII_KEY, text.encode("utf-8"), hashlib.sha256).hexdigest()


def zoo_value(**overrides) -> dict:
    value = {
        "occurred_at": dt.datetime(2026, 11, 1, 12, 5, 6, 789000, tzinfo=UTC),
        "flag": True,
        "small": -7,
        "big": 2**40,
        "ratio": 1.5,
        "precise": 2.25,
        "name": "Zoë",
        "raw": b"\x00\xff",
        "color": "GREEN",
        "checksum": b"abcd",
        "price": Decimal("1234567.89"),
        "huge": Decimal("1234567890123456789012345678901234567890.12345"),
        "day": dt.date(2026, 11, 1),
        "lunch": dt.time(12, 30, 15, 250000),
        "lap": dt.time(0, 0, 1, 123456),
        "at_micros": dt.datetime(2026, 11, 1, 12, 5, 6, 123456, tzinfo=UTC),
        "wall_ms": dt.datetime(2026, 11, 1, 14, 5, 6, 789000),
        "wall_us": dt.datetime(2026, 11, 1, 14, 5, 6, 123456),
        "id": uuid.UUID("3f2504e0-4f89-11d3-9a0c-0305e82c3301"),
        "address": {"street": "Main St 1", "zip": None},
        "previous_address": {"street": "Old Rd 2", "zip": "12345"},
        "favorite": "RED",
        "tags": ["a", "b"],
        "scores": {"x": 1, "y": 2**35},
        "nickname": None,
        "choice": None,
        "amount": 9.5,
    }
    value.update(overrides)
    return value


@pytest.fixture
def zoo(tmp_path) -> TableSpec:
    return write_topic(tmp_path, [ZOO_SCHEMA])


# --- the Avro → Arrow mapping ----------------------------------------------------------------


def test_given_the_schema_zoo_when_mapped_then_every_avro_type_has_its_arrow_type(zoo):
    schema = arrow_schema_for(zoo.version(1), pii_fields=())

    assert schema.names == [*ZOO_TYPES, *(f.name for f in KAFKA_COLUMNS)]
    for name, arrow_type in ZOO_TYPES.items():
        assert schema.field(name).type == arrow_type, name
    assert all(field.nullable for field in schema), "every column is nullable"
    assert list(schema)[len(ZOO_TYPES):] == list(KAFKA_COLUMNS)
    assert schema.metadata == {b"kafka_lake.schema_version": b"1"}


def test_given_the_kafka_columns_then_they_have_the_contract_types():
    assert [(f.name, f.type, f.nullable) for f in KAFKA_COLUMNS] == [
        ("_kafka_topic", pa.string(), True),
        ("_kafka_partition", pa.int32(), True),
        ("_kafka_offset", pa.int64(), True),
        ("_kafka_timestamp", pa.timestamp("ms", tz="UTC"), True),
        ("_kafka_key", pa.binary(), True),
        ("_kafka_headers", pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])), True),
    ]
    assert DEAD_LETTER_SCHEMA.names[-2:] == ["value", "error"]
    assert DEAD_LETTER_SCHEMA.field("value").type == pa.binary()


def test_given_a_zoo_record_when_decoded_then_every_value_round_trips(zoo):
    batch = decode(zoo, framed(zoo, zoo_value()))

    [row] = only_rows(batch)
    table = batch.rows[Placement(1, dt.datetime(2026, 11, 1, 12, tzinfo=UTC))]
    assert table.schema == arrow_schema_for(zoo.version(1), ())
    assert row == {
        "occurred_at": dt.datetime(2026, 11, 1, 12, 5, 6, 789000, tzinfo=UTC),
        "flag": True,
        "small": -7,
        "big": 2**40,
        "ratio": 1.5,
        "precise": 2.25,
        "name": "Zoë",
        "raw": b"\x00\xff",
        "color": "GREEN",
        "checksum": b"abcd",
        "price": Decimal("1234567.89"),
        "huge": "1234567890123456789012345678901234567890.12345",
        "day": dt.date(2026, 11, 1),
        "lunch": dt.time(12, 30, 15, 250000),
        "lap": dt.time(0, 0, 1, 123456),
        "at_micros": dt.datetime(2026, 11, 1, 12, 5, 6, 123456, tzinfo=UTC),
        "wall_ms": dt.datetime(2026, 11, 1, 14, 5, 6, 789000),
        "wall_us": dt.datetime(2026, 11, 1, 14, 5, 6, 123456),
        "id": "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
        "address": {"street": "Main St 1", "zip": None},
        "previous_address": {"street": "Old Rd 2", "zip": "12345"},
        "favorite": "RED",
        "tags": ["a", "b"],
        "scores": [("x", 1), ("y", 2**35)],
        "nickname": None,
        "choice": None,
        "amount": {"member0": 9.5, "member1": None},
        "_kafka_topic": "zoo.animals",
        "_kafka_partition": 0,
        "_kafka_offset": 0,
        "_kafka_timestamp": KAFKA_TIME,
        "_kafka_key": b"key-0",
        "_kafka_headers": None,
    }


def test_given_nullable_unions_when_null_then_the_columns_are_null(zoo):
    value = zoo_value(previous_address=None, favorite=None, nickname="Zed", tags=[], scores={})

    [row] = only_rows(decode(zoo, framed(zoo, value)))

    assert (row["previous_address"], row["favorite"], row["nickname"]) == (None, None, "Zed")
    assert (row["tags"], row["scores"]) == ([], [])


@pytest.mark.parametrize(
    ("choice", "expected_member", "expected_value"),
    [
        (7, "member0", 7),
        (2**40, "member1", 2**40),  # too big for the int member: the long member holds it
        ("seven", "member2", "seven"),
        (("test.zoo.Color", "GREEN"), "member3", "GREEN"),  # an enum written as (name, symbol) to pick the branch
        ({"street": "Elm 3", "zip": "999"}, "member4", {"street": "Elm 3", "zip": "999"}),
    ],
)
def test_given_a_general_union_when_decoded_then_the_value_sits_in_its_member(zoo, choice, expected_member, expected_value):
    [row] = only_rows(decode(zoo, framed(zoo, zoo_value(choice=choice, amount="n/a"))))

    assert row["choice"] == {f"member{i}": None for i in range(5)} | {expected_member: expected_value}
    assert row["amount"] == {"member0": None, "member1": "n/a"}


def test_given_a_record_typed_by_a_name_defined_earlier_when_decoded_then_the_reference_maps_like_the_definition(zoo):
    schema = arrow_schema_for(zoo.version(1), ())

    assert schema.field("previous_address").type == schema.field("address").type
    assert schema.field("favorite").type == schema.field("color").type == pa.string()


def test_given_a_decimal_wider_than_its_precision_when_decoded_then_only_that_record_is_a_dead_letter(tmp_path):
    narrow = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}
    topic = write_topic(tmp_path, [small_schema("long", ({"name": "price", "type": narrow},))])
    # A producer with a wider decimal writes the same bytes layout: the value cannot fit decimal(4, 2).
    wide = fastavro.parse_schema(small_schema("long", ({"name": "price", "type": dict(narrow, precision=20)},)))
    too_wide = encode_confluent(501, wide, {"occurred_at": KAFKA_MS, "n": 1, "price": Decimal("123456.78")})
    fits = framed(topic, {"occurred_at": KAFKA_MS, "n": 2, "price": Decimal("12.34")})

    batch = decode(topic, fits, too_wide)

    assert [(r["n"], r["price"]) for r in only_rows(batch)] == [(2, Decimal("12.34"))]
    [dead] = dead_letter_rows(batch)
    assert dead["value"] == too_wide
    assert dead["error"].startswith("undecodable_payload: ") and "fit" in dead["error"]


# A recursive record as Avro's own test schemas have them (the interop `Node`, the IDL tests' `Person`), with
# a value of every kind the JSON text must carry.
PERSON = {
    "type": "record", "name": "Person", "namespace": "org.example",
    "fields": [
        {"name": "occurred_at", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "photo", "type": ["null", "bytes"], "default": None},
        {"name": "balance", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "born", "type": {"type": "int", "logicalType": "date"}},
        {"name": "mood", "type": {"type": "enum", "name": "Mood", "symbols": ["HAPPY", "SAD"]}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
        {"name": "friends", "type": {"type": "array", "items": "Person"}},
        {"name": "spouse", "type": ["null", "Person"], "default": None},
        {"name": "pet", "type": ["null", "string", {"type": "record", "name": "Pet", "fields": [
            {"name": "species", "type": "string"}]}], "default": None},
    ],
}


def person(name: str, **overrides) -> dict:
    value = {"occurred_at": KAFKA_MS, "name": name, "photo": None, "balance": Decimal("-12.500"),
             "born": dt.date(1949, 5, 13), "mood": "HAPPY", "scores": {"x": 1.5, "nan": float("nan")},
             "friends": [], "spouse": None, "pet": None}
    return value | overrides


def independently_serialized(value) -> str:
    """fastavro's value as JSON by `json.dumps` itself: the form the lake promises (README, Recursive records)."""
    def encode(item):
        if isinstance(item, bytes):
            return base64.b64encode(item).decode()
        if isinstance(item, Decimal):
            return format(item, "f")
        if isinstance(item, (dt.date, dt.datetime, dt.time)):
            return item.isoformat()
        raise TypeError(item)

    def finite(item):
        if isinstance(item, float) and item != item:
            return "NaN"
        if isinstance(item, dict):
            return {key: finite(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [finite(inner) for inner in item]
        return item

    return json.dumps(finite(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=encode)


def test_given_a_recursive_record_when_decoded_then_the_fields_where_it_recurs_hold_fastavros_value_as_json(tmp_path):
    topic = write_topic(tmp_path, [PERSON])
    ada = person("Ada", photo=b"\x00\xffpng", pet={"species": "cat"},
                 friends=[person("Bob", mood="SAD", friends=[person("Cy", pet="goldfish")])],
                 spouse=person("Dan", scores={}, balance=Decimal("0.000")))
    value = framed(topic, ada)

    [row] = only_rows(decode(topic, value))

    decoded = fastavro.schemaless_reader(io.BytesIO(value[5:]), topic.version(1).parsed, None)
    assert row["friends"] == independently_serialized(decoded["friends"])
    assert row["spouse"] == independently_serialized(decoded["spouse"])
    assert json.loads(row["spouse"])["balance"] == "0.000" and json.loads(row["friends"])[0]["friends"][0]["pet"] == "goldfish"
    assert row["pet"] == {"member0": None, "member1": {"species": "cat"}}  # no recursion here: columns as ever
    assert (row["name"], row["photo"], row["balance"]) == ("Ada", b"\x00\xffpng", Decimal("-12.500"))
    schema = arrow_schema_for(topic.version(1), ())
    assert schema.field("friends").type == schema.field("spouse").type == pa.string()
    assert "JSON text of a value of recursive record org.example.Person" in column_comment(schema.field("spouse"))
    assert column_comment(schema.field("name")) == ""


def test_given_a_recursive_field_in_pii_fields_when_decoded_then_its_json_text_is_pseudonymized(tmp_path):
    topic = write_topic(tmp_path, [PERSON], pii_fields=["spouse", "name"])
    value = framed(topic, person("Ada", spouse=person("Dan")))

    [row] = only_rows(decode(topic, value))

    decoded = fastavro.schemaless_reader(io.BytesIO(value[5:]), topic.version(1).parsed, None)
    assert row["spouse"] == hmac_hex(independently_serialized(decoded["spouse"])) and row["name"] == hmac_hex("Ada")
    assert column_comment(arrow_schema_for(topic.version(1), topic.pii_fields).field("spouse")).startswith(
        "pseudonymized JSON text")


def test_given_a_recursive_value_nested_past_the_limit_or_a_hostile_depth_then_it_is_a_dead_letter(tmp_path):
    """The compiled reader would crash the process on the hostile one (measured: a segfault at 5,000 levels)."""
    linked = small_schema("long", ({"name": "next", "type": ["null", "Small"], "default": None},))
    topic = write_topic(tmp_path, [linked])

    def nested(levels: int) -> dict:
        value = {"occurred_at": KAFKA_MS, "n": levels, "next": None}
        for level in range(levels):
            value = {"occurred_at": KAFKA_MS, "n": level, "next": value}
        return value

    header = framed(topic, {"occurred_at": KAFKA_MS, "n": 0, "next": None})[:5]
    hostile = header + b"\x80\xa0\xc4\x8c\x9a\x34\x00" + b"\x02\x80\xa0\xc4\x8c\x9a\x34\x00" * 100_000 + b"\x00"
    at_limit, past_limit = framed(topic, nested(MAX_JSON_DEPTH)), framed(topic, nested(MAX_JSON_DEPTH + 1))

    batch = decode(topic, at_limit, past_limit, hostile)

    assert [row["n"] for row in only_rows(batch)] == [MAX_JSON_DEPTH - 1]
    assert batch.dead_letter_causes == {"undecodable_payload": 2}
    errors = {row["_kafka_offset"]: row["error"] for row in dead_letter_rows(batch)}
    assert f"nested more than {MAX_JSON_DEPTH} levels deep" in errors[1]
    assert "nested" in errors[2] and "Error" not in errors[2], errors[2]


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "fastavro"])
def test_given_renamed_fields_when_decoded_then_they_land_as_their_columns_placed_and_pseudonymized_by_avro_name(
        tmp_path, columnar):
    when = {"type": "record", "name": "When", "fields": [{"name": "occurred_at", "type": "string"},
                                                         {"name": "user", "type": "string"}]}
    schema = {"type": "record", "name": "Order", "fields": [
        {"name": "date", "type": when}, {"name": "hour", "type": "int"}, {"name": "schema_version", "type": "string"}]}
    folder = tmp_path / "zoo" / "animals"
    folder.mkdir(parents=True)
    (folder / "v1.avsc").write_text(json.dumps(schema))
    (folder / "topic.yaml").write_text(json.dumps({
        "topic": "zoo.animals", "owner": "team-test", "start_hour": "2026-11-01T00:00Z",
        "time_partitioning": {"source": "event_time", "field": "date.occurred_at"},
        "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": 501}],
        "rename": {"date": "order_date", "hour": "order_hour", "schema_version": "producer_schema"},
        "pii_fields": ["date.user"],
    }))
    topic = load_topic(folder / "topic.yaml")
    values = [framed(topic, {"date": {"occurred_at": "2026-11-01T11:15:00Z", "user": f"u{n}"}, "hour": n,
                             "schema_version": "v9"}) for n in range(12)]

    batch = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar).decode(
        [kafka_record(value, offset) for offset, value in enumerate(values)])

    assert set(batch.rows) == {Placement(1, HOUR_11)}
    table = batch.rows[Placement(1, HOUR_11)]
    assert table.column_names[:3] == ["order_date", "order_hour", "producer_schema"]
    assert table.to_pylist()[3]["order_date"] == {"occurred_at": "2026-11-01T11:15:00Z", "user": hmac_hex("u3")}
    assert table.column("order_hour").to_pylist() == list(range(12))
    if columnar:
        decoder = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY)
        decoder.decode([kafka_record(values[0])])
        assert decoder.decoding_paths == {1: "columnar"}


# --- the sample catalog ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(CATALOG)


def page_view(version: int, **overrides) -> dict:
    value = {
        "view_id": uuid.UUID("0b6e1c2a-8d5f-4e3b-9a7c-1d2e3f405162"),
        "occurred_at": dt.datetime(2026, 11, 1, 11, 59, 59, 999000, tzinfo=UTC),
        "user_id": "user-42",
        "url": "https://shop.example/p/123",
        "referrer": None,
        "client": {"ip_address": "10.1.2.3", "user_agent": "Mozilla/5.0"},
        "duration_ms": 1500,
    }
    if version == 2:
        value |= {"session_id": "s-1", "experiments": {"checkout": "B"}}
    return value | overrides


def test_given_page_views_of_both_versions_when_decoded_then_each_lands_in_its_partition_in_the_tables_columns(catalog):
    topic = catalog.by_name("shop", "page_views")

    batch = decode(topic, framed(topic, page_view(1), 1), framed(topic, page_view(2, duration_ms=2**33), 2))

    assert set(batch.rows) == {Placement(1, HOUR_11), Placement(2, HOUR_11)}
    [v1] = batch.rows[Placement(1, HOUR_11)].to_pylist()
    [v2] = batch.rows[Placement(2, HOUR_11)].to_pylist()
    assert v1["view_id"] == "0b6e1c2a-8d5f-4e3b-9a7c-1d2e3f405162"
    assert v1["url"] == "https://shop.example/p/123" and v1["duration_ms"] == 1500
    assert v1["session_id"] is None and v1["experiments"] is None, "v2's fields, which v1 lacks"
    assert v2["duration_ms"] == 2**33 and v2["experiments"] == [("checkout", "B")] and v2["session_id"] == "s-1"
    # Both in the table's columns: v1's int in the long v2 widened it to, so every file of the table reads alike.
    v1_schema, v2_schema = batch.rows[Placement(1, HOUR_11)].schema, batch.rows[Placement(2, HOUR_11)].schema
    assert v1_schema.field("duration_ms").type == v2_schema.field("duration_ms").type == pa.int64()
    assert v1_schema.remove_metadata() == v2_schema.remove_metadata()
    assert (v1_schema.metadata, v2_schema.metadata) == ({b"kafka_lake.schema_version": b"1"},
                                                         {b"kafka_lake.schema_version": b"2"})


def test_given_a_transaction_when_decoded_then_decimals_enums_unions_and_times_land(catalog):
    topic = catalog.by_name("payments", "transactions")
    transaction = {
        "transaction_id": uuid.UUID("9c5b94b1-35ad-49bb-b118-8e8fc24abf80"),
        "customer_id": 314,
        "customer_email": "ada@example.com",
        "amount": Decimal("149.90"),
        "fee": Decimal("1.2345"),
        "currency": "EUR",
        "status": "CAPTURED",
        "card": {"scheme": "visa", "pan_last4": "4242", "expiry": dt.date(2028, 12, 1)},
        "line_items": [{"sku": "SKU-1", "quantity": 2, "unit_price": Decimal("74.95")}],
        "attributes": {"channel": "web"},
        "risk_score": 0.12,
        "authorized_at": dt.datetime(2026, 11, 1, 9, 0, 0, 123456, tzinfo=UTC),
        "settlement_time": dt.time(23, 59, 0),
        "terminal_signature": b"\x01\x02",
    }

    batch = decode(topic, framed(topic, transaction), framed(topic, transaction | {"risk_score": "manual", "fee": None}))

    first, second = batch.rows[Placement(1, HOUR_13)].to_pylist()  # kafka_time: placed by the Kafka hour
    assert first["amount"] == Decimal("149.90") and first["fee"] == Decimal("1.2345")
    assert (first["currency"], first["status"]) == ("EUR", "CAPTURED")
    assert first["card"] == {"scheme": "visa", "pan_last4": hmac_hex("4242"), "expiry": dt.date(2028, 12, 1)}
    assert first["customer_email"] == hmac_hex("ada@example.com")
    assert first["line_items"] == [{"sku": "SKU-1", "quantity": 2, "unit_price": Decimal("74.95")}]
    assert first["risk_score"] == {"member0": 0.12, "member1": None}
    assert second["risk_score"] == {"member0": None, "member1": "manual"} and second["fee"] is None
    assert first["settlement_time"] == dt.time(23, 59) and first["terminal_signature"] == b"\x01\x02"
    assert first["authorized_at"] == dt.datetime(2026, 11, 1, 9, 0, 0, 123456, tzinfo=UTC)
    assert batch.rows[Placement(1, HOUR_13)].schema.field("fee").type == pa.decimal128(10, 4)


# --- PII -------------------------------------------------------------------------------------


def test_given_pii_fields_when_decoded_then_they_hold_the_hmac_hex_and_null_stays_null(catalog):
    topic = catalog.by_name("shop", "page_views")

    rows = only_rows(decode(topic, framed(topic, page_view(1)), framed(topic, page_view(1, user_id=None))))

    # HMAC-SHA256 under b"test-pii-key" of "user-42" and of "10.1.2.3", computed independently.
    assert rows[0]["user_id"] == "69673af590212b91082a6c4a33a4600e4a10b5189f1d3d6a33c5d7cca8f7e0c4"
    assert rows[0]["client"]["ip_address"] == "9573432b69f41c8b461a5355108dcdea6d1a4438bc9ec46317783be55e22328b"
    assert rows[0]["client"]["user_agent"] == "Mozilla/5.0"
    assert rows[1]["user_id"] is None
    assert arrow_schema_for(topic.version(1), topic.pii_fields).field("client").type.field("ip_address").nullable


def test_given_a_pii_field_in_a_record_under_a_nullable_union_when_decoded_then_it_is_pseudonymized(tmp_path):
    contact = {"type": "record", "name": "Contact", "fields": [
        {"name": "email", "type": "string"}, {"name": "age", "type": "int"}, {"name": "vip", "type": "boolean"},
    ]}
    tier = {"type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}
    topic = write_topic(
        tmp_path,
        [small_schema("long", ({"name": "contact", "type": ["null", contact]}, {"name": "tier", "type": ["null", tier]}))],
        pii_fields=["contact.email", "contact.age", "contact.vip", "n", "tier"],
    )
    contact_value = {"email": "ada@example.com", "age": 36, "vip": True}

    rows = only_rows(decode(
        topic,
        framed(topic, {"occurred_at": KAFKA_MS, "n": 42, "contact": contact_value, "tier": "GOLD"}),
        framed(topic, {"occurred_at": KAFKA_MS, "n": 43, "contact": None, "tier": None}),
    ))

    assert rows[0]["contact"] == {"email": hmac_hex("ada@example.com"), "age": hmac_hex("36"), "vip": hmac_hex("true")}
    assert rows[0]["n"] == "1ef53a2b9409351e9efc69babc49aef320a387a609bb5554a2728f98869616e3"  # of "42"
    assert rows[0]["tier"] == hmac_hex("GOLD")
    assert (rows[1]["contact"], rows[1]["tier"]) == (None, None)
    assert arrow_schema_for(topic.version(1), topic.pii_fields).field("n").type == pa.string()


def test_given_a_pseudonymizer_then_texts_follow_the_contract_and_the_key_stays_hidden():
    pseudonymizer = Pseudonymizer(PII_KEY)

    assert pseudonymizer.pseudonymize(None) is None
    assert pseudonymizer.pseudonymize(True) == "1c6f8b38d86477d86e19fa3ebb4850c241f1210256bbdfccca2d145d77524057"
    assert pseudonymizer.pseudonymize(42) == pseudonymizer.pseudonymize("42")
    assert "test-pii-key" not in repr(pseudonymizer)


def test_given_a_topic_with_pii_fields_and_no_key_when_building_a_decoder_then_it_refuses(catalog):
    topic = catalog.by_name("shop", "page_views")

    with pytest.raises(MissingPiiKey, match="topic shop.page_views declares pii_fields but PII_HMAC_KEY is not set"):
        BatchDecoder(topic, CatalogSchemas(topic), pii_key=None)


def test_given_pii_fields_when_mapping_without_a_pseudonymizer_then_it_refuses_to_land_them_in_clear(catalog):
    topic = catalog.by_name("shop", "page_views")

    with pytest.raises(ValueError, match="refusing to land them in clear"):
        arrow_mapping_for(topic.version(1), topic.pii_fields, pseudonymize=None)


def test_given_a_topic_without_pii_fields_when_no_key_then_it_decodes(zoo):
    assert decode(zoo, framed(zoo, zoo_value()), pii_key=None).rows_count == 1


# --- dead letters, tombstones, placement -----------------------------------------------------


@pytest.fixture
def views(catalog) -> TableSpec:
    return catalog.by_name("shop", "page_views")


def good_view(views: TableSpec) -> bytes:
    return framed(views, page_view(1))


@pytest.mark.parametrize(
    ("make_value", "cause", "detail"),
    [
        (lambda good: b"\x01" + good[1:], "bad_magic_byte", "magic byte is 0x01"),
        (lambda good: good[:1] + (9999).to_bytes(4, "big") + good[5:], "unknown_schema_id", "schema id 9999"),
        (lambda good: good[:3], "undecodable_payload", "shorter than the 5-byte header"),
        (lambda good: good[:-8], "undecodable_payload", "does not decode"),
        (lambda good: good + b"garbage", "undecodable_payload", "7 bytes left after the record"),
    ],
    ids=["wrong magic byte", "unknown schema id", "truncated header", "truncated payload", "trailing bytes"],
)
def test_given_a_broken_value_when_decoded_then_it_is_a_dead_letter_with_its_raw_bytes(views, make_value, cause, detail):
    broken = make_value(good_view(views))

    batch = decode(views, good_view(views), broken)

    assert batch.rows_count == 1 and batch.dead_letter_causes == {cause: 1}
    [dead] = batch.dead_letters[HOUR_13].to_pylist()  # dead letters sit in their Kafka hour
    assert dead["value"] == broken and dead["_kafka_offset"] == 1 and dead["_kafka_key"] == b"key-1"
    assert dead["error"].startswith(f"{cause}: ") and detail in dead["error"]
    assert batch.dead_letters[HOUR_13].schema == DEAD_LETTER_SCHEMA


@pytest.mark.parametrize(
    ("occurred_at", "cause", "detail"),
    [
        (None, "missing_event_time", "'occurred_at' is absent or null"),
        ("2026-11-01T13:05:00", "unparseable_event_time", "has no UTC offset"),
        ("yesterday after lunch", "unparseable_event_time", '"yesterday after lunch" is not an RFC 3339 time'),
        ("0000-12-31T23:59:59Z", "unparseable_event_time", "is not a real time"),
        ("2026-02-30T10:00:00Z", "unparseable_event_time", "is not a real time"),
    ],
)
def test_given_a_bad_event_time_when_decoded_then_it_is_a_dead_letter(tmp_path, occurred_at, cause, detail):
    topic = write_topic(tmp_path, [small_schema(["null", "string"])])
    value = framed(topic, {"occurred_at": occurred_at, "n": 1})

    batch = decode(topic, value)

    assert batch.rows == {} and batch.dead_letter_causes == {cause: 1}
    [dead] = dead_letter_rows(batch)
    assert dead["value"] == value and dead["error"].startswith(f"{cause}: ") and detail in dead["error"]


def test_given_a_nested_event_time_under_a_null_record_when_decoded_then_it_is_missing(tmp_path):
    meta = {"type": "record", "name": "Meta", "fields": [{"name": "occurred_at", "type": "string"}]}
    topic = write_topic(
        tmp_path,
        [{"type": "record", "name": "Event", "fields": [{"name": "meta", "type": ["null", meta]}]}],
        time_partitioning={"source": "event_time", "field": "meta.occurred_at"},
    )

    batch = decode(
        topic,
        framed(topic, {"meta": {"occurred_at": "2026-11-01T13:05:00+02:00"}}),
        framed(topic, {"meta": None}),
    )

    assert only_rows(batch)[0]["meta"] == {"occurred_at": "2026-11-01T13:05:00+02:00"}
    assert set(batch.rows) == {Placement(1, HOUR_11)}  # 13:05 at +02:00 is 11:05 UTC
    assert batch.dead_letter_causes == {"missing_event_time": 1}


@pytest.mark.parametrize(
    ("time_type", "occurred_at"),
    [
        ({"type": "long", "logicalType": "timestamp-millis"}, dt.datetime(2026, 11, 1, 11, 59, tzinfo=UTC)),
        ({"type": "long", "logicalType": "timestamp-micros"}, dt.datetime(2026, 11, 1, 11, 59, tzinfo=UTC)),
        ("long", int(dt.datetime(2026, 11, 1, 11, 59, tzinfo=UTC).timestamp() * 1000)),
        ("string", "2026-11-01T11:59:00.123456789Z"),
        ("string", "2026-11-01T13:59:00+02:00"),
    ],
    ids=["timestamp-millis", "timestamp-micros", "epoch millis", "rfc3339 utc nanos", "rfc3339 offset"],
)
def test_given_an_event_time_topic_when_decoded_then_rows_land_in_their_event_hour(tmp_path, time_type, occurred_at):
    topic = write_topic(tmp_path, [small_schema(time_type)])

    batch = decode(topic, framed(topic, {"occurred_at": occurred_at, "n": 1}))

    assert set(batch.rows) == {Placement(1, HOUR_11)}  # two hours before its Kafka time: late, in its own hour


HOUR_1949 = dt.datetime(1949, 5, 13, 7, tzinfo=UTC)
OCCURRED_1949 = dt.datetime(1949, 5, 13, 7, 59, 30, 250000, tzinfo=UTC)


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "fastavro"])
@pytest.mark.parametrize(
    ("time_type", "occurred_at"),
    [
        ({"type": "long", "logicalType": "timestamp-millis"}, OCCURRED_1949),
        ({"type": "long", "logicalType": "timestamp-micros"}, OCCURRED_1949),
        ("long", -651_254_429_750),  # epoch milliseconds, as in Avro's weather.avro (1949-50)
        ("string", "1949-05-13T08:59:30.25+01:00"),
        ("string", "1949-05-13T07:59:30.25Z"),
    ],
    ids=["timestamp-millis", "timestamp-micros", "epoch millis", "rfc3339 offset", "rfc3339 utc"],
)
def test_given_an_event_time_before_1970_when_decoded_then_it_lands_in_its_hour(tmp_path, time_type, occurred_at, columnar):
    topic = write_topic(tmp_path, [small_schema(time_type)])
    values = [framed(topic, {"occurred_at": occurred_at, "n": n}) for n in range(10)]

    batch = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar).decode(
        [kafka_record(value, offset) for offset, value in enumerate(values)])

    assert set(batch.rows) == {Placement(1, HOUR_1949)} and batch.rows_count == 10
    assert layout.hour_directory(HOUR_1949) == "date=1949-05-13/hour=07"


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "fastavro"])
def test_given_an_event_time_in_the_first_and_the_last_years_when_decoded_then_their_paths_hold_four_digit_years(
        tmp_path, columnar):
    topic = write_topic(tmp_path, [small_schema("string")])
    texts = ["0001-01-01T00:30:00Z", "0002-03-04T05:06:07-01:00", "9999-12-31T23:59:59.999Z"]

    batch = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar).decode(
        [kafka_record(framed(topic, {"occurred_at": text, "n": 1}), offset) for offset, text in enumerate(texts)])

    assert sorted(layout.hour_directory(p.hour) for p in batch.rows) == [
        "date=0001-01-01/hour=00", "date=0002-03-04/hour=06", "date=9999-12-31/hour=23"]


def epoch_count(moment: dt.datetime, per_second: int) -> int:
    return (moment - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1) * per_second // 10**6


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "fastavro"])
@pytest.mark.parametrize(("unit", "per_second"), [("s", 1), ("ms", 1000), ("us", 10**6), ("ns", 10**9), (None, 1000)])
def test_given_a_plain_long_event_time_with_a_unit_when_decoded_then_it_is_placed_in_that_unit(
        tmp_path, unit, per_second, columnar):
    partitioning = {"source": "event_time", "field": "occurred_at", **({"unit": unit} if unit else {})}
    topic = write_topic(tmp_path, [small_schema(["null", "long"])], time_partitioning=partitioning)
    moments = [dt.datetime(2026, 11, 1, 11, 59, 59, tzinfo=UTC), dt.datetime(1949, 5, 13, 7, 1, tzinfo=UTC)] * 5

    batch = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar).decode(
        [kafka_record(framed(topic, {"occurred_at": epoch_count(m, per_second), "n": 1}), o) for o, m in enumerate(moments)])

    assert topic.time_unit == unit
    assert {p: t.num_rows for p, t in batch.rows.items()} == {Placement(1, HOUR_11): 5, Placement(1, HOUR_1949): 5}


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "fastavro"])
@pytest.mark.parametrize(("unit", "per_second", "looks_like"), [
    (None, 10**6, "it looks like epoch microseconds: time_partitioning.unit set `unit: us`"),
    (None, 10**9, "it looks like epoch nanoseconds: time_partitioning.unit set `unit: ns`"),
    ("s", 1000, "it looks like epoch milliseconds: time_partitioning.unit is s; set `unit: ms`"),
])
def test_given_plain_long_event_times_in_another_unit_than_the_topic_says_then_the_dead_letter_says_which_to_set(
        tmp_path, unit, per_second, looks_like, columnar):
    partitioning = {"source": "event_time", "field": "occurred_at", **({"unit": unit} if unit else {})}
    topic = write_topic(tmp_path, [small_schema("long")], time_partitioning=partitioning)
    values = [framed(topic, {"occurred_at": epoch_count(KAFKA_TIME, per_second) + n, "n": n}) for n in range(10)]

    batch = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar).decode(
        [kafka_record(value, offset) for offset, value in enumerate(values)])

    assert batch.rows == {} and batch.dead_letter_causes == {"unparseable_event_time": 10}
    assert all(looks_like in row["error"] for row in dead_letter_rows(batch)), dead_letter_rows(batch)[0]["error"]


def test_given_a_unit_for_an_event_time_that_is_no_plain_long_then_the_catalog_refuses_it_naming_the_field(tmp_path):
    for time_type, shown in [({"type": "long", "logicalType": "timestamp-micros"}, "timestamp-micros"), ("string", "string")]:
        with pytest.raises(CatalogError, match=f"unit is for a plain long event time, but field 'occurred_at' is a {shown}"):
            write_topic(tmp_path, [small_schema(time_type)],
                        time_partitioning={"source": "event_time", "field": "occurred_at", "unit": "us"})
    with pytest.raises(CatalogError, match="unit must be one of s, ms, us, ns, got 'µs'"):
        write_topic(tmp_path, [small_schema("long")], time_partitioning={"source": "event_time", "field": "occurred_at", "unit": "µs"})
    with pytest.raises(CatalogError, match="time_partitioning.unit is only for source event_time"):
        write_topic(tmp_path, [small_schema("long")], time_partitioning={"source": "kafka_time", "unit": "ms"})


def test_given_a_kafka_time_topic_when_decoded_then_rows_land_in_their_kafka_hour(tmp_path):
    topic = write_topic(tmp_path, [small_schema("string")], time_partitioning={"source": "kafka_time"})

    batch = decode(topic, framed(topic, {"occurred_at": "not even a time", "n": 1}))

    assert set(batch.rows) == {Placement(1, HOUR_13)}


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "fastavro"])
@pytest.mark.parametrize("source", ["kafka_time", "event_time"])
def test_given_kafka_timestamps_that_name_no_hour_when_decoded_then_nothing_raises_and_the_kafka_hour_keeps_them(
        tmp_path, source, columnar):
    partitioning = {"source": "kafka_time"} if source == "kafka_time" else {"source": "event_time", "field": "occurred_at"}
    topic = write_topic(tmp_path, [small_schema("string")], time_partitioning=partitioning)
    value = framed(topic, {"occurred_at": "2026-11-01T11:05:00Z", "n": 1})
    stamps = [KAFKA_MS, -1, -5000, 253_402_300_800_000, 2**62, 0] + [KAFKA_MS] * 10
    records = [kafka_record(value, offset, timestamp_ms=stamp) for offset, stamp in enumerate(stamps)]

    batch = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar,
                         kafka_hour=KafkaHour(HOUR_13)).decode(records)

    absurd = {1, 2, 3, 4}
    if source == "kafka_time":
        assert batch.dead_letter_causes == {"unplaceable_kafka_timestamp": 4}
        [letters] = [table.to_pylist() for hour, table in batch.dead_letters.items() if hour == HOUR_13]
        assert [d["_kafka_offset"] for d in letters] == sorted(absurd)
        assert "Kafka timestamp -1 (-1, Kafka's \"no timestamp\")" in letters[0]["error"]
        assert all(d["_kafka_timestamp"] is None for d in letters)
        assert {p.hour for p in batch.rows} == {HOUR_13, dt.datetime(1970, 1, 1, tzinfo=UTC)}
    else:
        assert batch.dead_letters == {} and set(batch.rows) == {Placement(1, HOUR_11)}
        timestamps = {row["_kafka_offset"]: row["_kafka_timestamp"] for row in only_rows(batch)}
        assert {offset for offset, stamp in timestamps.items() if stamp is None} == absurd
        assert timestamps[5] == dt.datetime(1970, 1, 1, tzinfo=UTC) and timestamps[0] == KAFKA_TIME


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "fastavro"])
def test_given_records_with_headers_when_decoded_then_rows_and_dead_letters_carry_them_in_order(views, columnar):
    traced = [("trace-id", b"\x00\x01"), ("empty", None), ("trace-id", b"again")]  # keys repeat, values may be null
    records = [KafkaRecord(0, offset, KAFKA_MS, b"k", good_view(views), traced if offset % 2 else None)
               for offset in range(10)]
    records.append(KafkaRecord(0, 10, KAFKA_MS, b"k", b"\x07broken", [("source", b"svc")]))
    records.append(KafkaRecord(0, 11, KAFKA_MS, b"k", good_view(views), []))  # an empty list: none

    batch = BatchDecoder(views, CatalogSchemas(views), PII_KEY, columnar=columnar).decode(records)

    as_pairs = [[(h["key"], h["value"]) for h in row["_kafka_headers"]] if row["_kafka_headers"] else None
                for row in only_rows(batch)]
    assert as_pairs == [traced if offset % 2 else None for offset in range(10)] + [None]
    [dead] = dead_letter_rows(batch)
    assert dead["_kafka_headers"] == [{"key": "source", "value": b"svc"}]


def test_given_tombstones_when_decoded_then_they_are_counted_and_skipped(views):
    batch = decode(views, None, good_view(views), None)

    assert (batch.tombstones, batch.rows_count, batch.dead_letters, batch.records) == (2, 1, {}, 3)


def test_given_records_out_of_order_when_decoded_then_rows_are_in_partition_and_offset_order(views):
    positions = [(1, 5), (0, 9), (1, 2), (0, 3)]
    records = [kafka_record(good_view(views), offset, partition=partition) for partition, offset in positions]

    batch = BatchDecoder(views, CatalogSchemas(views), PII_KEY).decode(records)

    rows = only_rows(batch)
    assert [(r["_kafka_partition"], r["_kafka_offset"]) for r in rows] == [(0, 3), (0, 9), (1, 2), (1, 5)]


def test_given_rfc3339_texts_when_parsed_then_offsets_are_applied():
    assert parse_event_time("2026-11-01T13:05:00Z") == dt.datetime(2026, 11, 1, 13, 5, tzinfo=UTC)
    assert parse_event_time("2026-11-01t13:05:00.5-01:30") == dt.datetime(2026, 11, 1, 14, 35, 0, 500000, tzinfo=UTC)
    with pytest.raises(ValueError, match="outside the years 0001..9999"):
        parse_event_time(-62_135_596_800_001)


FRAMINGS = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.binary(max_size=64).map(lambda payload: b"\x00\x00\x00\x03\xe9" + payload),  # schema id 1001: v1
    st.binary(max_size=64).map(lambda payload: b"\x00\x00\x00\x03\xea" + payload),  # schema id 1002: v2
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(FRAMINGS, max_size=20))
def test_given_random_bytes_when_decoded_then_nothing_raises_and_every_record_lands_once(views, values):
    batch = decode(views, *values)

    dead = sum(table.num_rows for table in batch.dead_letters.values())
    assert batch.rows_count + dead + batch.tombstones == batch.records == len(values)
    assert sum(batch.dead_letter_causes.values()) == dead
    landed = [*batch.rows.values(), *batch.dead_letters.values()]
    offsets = sorted(offset for table in landed for offset in table.column("_kafka_offset").to_pylist())
    assert offsets == [offset for offset, value in enumerate(values) if value is not None]


# --- schema registry -------------------------------------------------------------------------


@pytest.fixture
def registry(views):
    # The registry knows v2 under another id than the catalog's, with a different doc, plus a stranger schema.
    renamed_v2 = views.version(2).schema | {"doc": "registered by the producer team"}
    stranger = {"type": "record", "name": "Stranger", "fields": [{"name": "x", "type": "int"}]}
    with RegistryStandIn({77: renamed_v2, 78: stranger}) as server:
        yield server


def test_given_a_registry_id_with_a_catalog_schema_when_resolved_then_it_is_that_version(views, registry):
    schemas = RegistrySchemas(views, registry.url)

    assert schemas.version_for(77).version == 2
    assert schemas.version_for(77).version == 2
    assert registry.requests == ["/schemas/ids/77"]  # cached per id


def test_given_ids_the_registry_does_not_know_or_the_catalog_lacks_when_resolved_then_none_with_the_reason(views, registry):
    schemas = RegistrySchemas(views, registry.url)

    assert schemas.version_for(404) is None and schemas.version_for(78) is None
    assert "not known to the schema registry" in schemas.unknown_reason(404)
    assert "none of the catalog's schema versions of topic shop.page_views" in schemas.unknown_reason(78)


def test_given_a_registry_when_decoding_then_ids_resolve_through_it(views, registry):
    v2 = views.version(2)
    by_registry = encode_confluent(77, v2.parsed, page_view(2))
    stranger = encode_confluent(78, v2.parsed, page_view(2))
    decoder = BatchDecoder(views, RegistrySchemas(views, registry.url), PII_KEY)

    batch = decoder.decode([kafka_record(by_registry, 0), kafka_record(stranger, 1)])

    assert set(batch.rows) == {Placement(2, HOUR_11)} and batch.dead_letter_causes == {"unknown_schema_id": 1}
    [dead] = dead_letter_rows(batch)
    assert dead["error"].startswith("unknown_schema_id: schema id 78 in the schema registry at http://127.0.0.1:")


def test_given_the_registry_is_down_when_decoding_then_it_raises_naming_the_url_and_id(views, registry):
    registry.shutdown()
    registry.server_close()
    port = registry.server_address[1]
    schemas = RegistrySchemas(views, f"http://svc:s3cret@127.0.0.1:{port}", {"max.retries": 0})
    decoder = BatchDecoder(views, schemas, PII_KEY)

    value = encode_confluent(77, views.version(2).parsed, page_view(2))

    with pytest.raises(SchemaRegistryUnavailable, match=rf"at http://127.0.0.1:{port} failed to answer for schema id 77") as raised:
        decoder.decode([kafka_record(value)])
    assert "s3cret" not in str(raised.value)


def registered_page_views(registry: RegistryStandIn, views: TableSpec) -> dict:
    """The catalog's two versions of the page views and a third the catalog lacks, registered in that order under the
    topic's value subject through confluent-kafka's client; returns the third."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    third = {**views.version(2).schema, "fields": [*views.version(2).schema["fields"],
                                                   {"name": "referrer", "type": ["null", "string"], "default": None}]}
    client = SchemaRegistryClient({"url": registry.url})
    for schema in (views.version(1).schema, views.version(2).schema, third):
        client.register_schema("shop.page_views-value", Schema(json.dumps(schema)))
    return third


def test_given_an_id_the_catalog_lacks_and_the_registry_has_then_the_dead_letter_names_its_version_and_the_command(views):
    with RegistryStandIn(first_id=1001) as registry:  # the catalog's ids for its versions, 1003 for the third
        third = registered_page_views(registry, views)
        value = encode_confluent(1003, fastavro.parse_schema(third), {**page_view(2), "referrer": "news"})
        decoder = BatchDecoder(views, RegistrySchemas(views, registry.url), PII_KEY)

        batch = decoder.decode([kafka_record(value, 0), kafka_record(good_view(views), 1), kafka_record(value, 2)])

    assert batch.unknown_schema_ids == {1003: 2} and batch.dead_letter_causes == {"unknown_schema_id": 2}
    errors = {row["error"] for row in dead_letter_rows(batch)}
    assert errors == {
        f"unknown_schema_id: schema id 1003 in the schema registry at {registry.url} is none of the catalog's schema "
        f"versions of topic shop.page_views ({views.source_file}): it is version 3 of subject shop.page_views-value; "
        "add it with `python -m deploy.add_topic --topic shop.page_views --database shop --table page_views --update`"
    }


def test_given_a_json_table_and_a_registry_then_an_id_the_catalog_lacks_is_named_as_the_registrys_version(catalog):
    """JSON ids resolve through the catalog's registry ids; the registry only names the one the catalog lacks."""
    carts = catalog.by_name("shop", "cart_opens").model_copy(update={"route": None, "routed_siblings": ()})
    with RegistryStandIn(first_id=950) as registry:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        SchemaRegistryClient({"url": registry.url}).register_schema(
            f"{carts.topic}-value", Schema(json.dumps({"type": "object", "properties": {"x": {"type": "string"}}}), "JSON"))
        value = b"\x00" + (950).to_bytes(4, "big") + b'{"x": "y"}'
        batch = BatchDecoder(carts, schemas_for(carts, registry.url), PII_KEY).decode([kafka_record(value)])
        without_registry = BatchDecoder(carts, schemas_for(carts, None), PII_KEY).decode([kafka_record(value)])

    assert batch.unknown_schema_ids == {950: 1} == without_registry.unknown_schema_ids
    [named] = [row["error"] for row in dead_letter_rows(batch)]
    assert f"it is version 1 of subject {carts.topic}-value in the schema registry" in named
    assert f"--topic {carts.topic} --database shop --table cart_opens --update" in named
    [plain] = [row["error"] for row in dead_letter_rows(without_registry)]
    assert plain.endswith("add its schema there as a new version")
