"""The columnar decoding path, proven equal to the fastavro path value for value.

A schema zoo over every Avro type and logical type (nullable and general unions, nested records, arrays of
records, maps, fixed and bytes decimals), schema evolution between versions, random records and corrupted
payloads from hypothesis, and a broken record inside a spliced block that must not cost its neighbours.
Both paths run on the same bytes; the fastavro path (`columnar=False`) is the reference.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import io
import re
import struct
import uuid
from decimal import Decimal

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_lake.decoding.avro.spliced_blocks import SMALLEST_SPLIT
from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.decoding.decoded_batch import DecodedBatch
from kafka_lake.decoding.pii import ColumnPseudonymizer, Pseudonymizer
from kafka_lake.event_time import hours_of_rfc3339, parse_event_time
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.kafka.records import KafkaBatch, KafkaRecord
from kafka_lake.kafka.schema_resolution import CatalogSchemas
from tests.test_decoding import CATALOG, KAFKA_MS, PII_KEY, load_catalog, write_topic

UTC = dt.timezone.utc
ADDRESS = {"type": "record", "name": "Address", "fields": [
    {"name": "street", "type": "string"},
    {"name": "zip", "type": ["null", "string"]},
]}
EVENT = {"type": "record", "name": "Event", "fields": [
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "labels", "type": {"type": "map", "values": "string"}},
    {"name": "level", "type": ["null", {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"]}]},
]}
# Every Avro type and logical type the lake maps, in the shapes producers write them.
ZOO = {
    "type": "record", "name": "Zoo", "namespace": "test.columnar", "fields": [
        {"name": "occurred_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "precise", "type": "double"},
        {"name": "name", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "nothing", "type": "null"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "checksum", "type": {"type": "fixed", "name": "Checksum", "size": 4}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "fee", "type": {"type": "fixed", "name": "Fee", "size": 8, "logicalType": "decimal", "precision": 10, "scale": 4}},
        {"name": "huge", "type": {"type": "bytes", "logicalType": "decimal", "precision": 45, "scale": 5}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "lunch", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "lap", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "at_micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "wall_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "wall_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "address", "type": ADDRESS},
        {"name": "previous_address", "type": ["null", "Address"]},
        {"name": "favorite", "type": ["null", "Color"]},
        {"name": "nickname", "type": ["string", "null"]},
        {"name": "lone", "type": ["string"]},
        {"name": "maybe_price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 3}]},
        {"name": "maybe_day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "maybe_id", "type": ["null", {"type": "string", "logicalType": "uuid"}]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "ratios", "type": {"type": "array", "items": ["null", "float"]}},
        {"name": "scores", "type": {"type": "map", "values": "long"}},
        {"name": "series", "type": {"type": "map", "values": {"type": "array", "items": "long"}}},
        {"name": "events", "type": {"type": "array", "items": EVENT}},
        {"name": "homes", "type": {"type": "map", "values": "Address"}},
        {"name": "choice", "type": ["null", "int", "string", "Color", "Address", "boolean"]},
        {"name": "amount", "type": ["double", "string", "bytes"]},
    ],
}
PII = ["nickname", "small", "flag", "address.street", "favorite", "maybe_id"]


def decoders(topic, columnar_only: bool = False):
    return (BatchDecoder(topic, CatalogSchemas(topic), PII_KEY),
            BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=False))


def records_of(values: list[bytes | None], partition: int = 0) -> list[KafkaRecord]:
    return [KafkaRecord(partition, offset, KAFKA_MS + offset, b"k%d" % offset, value) for offset, value in enumerate(values)]


def assert_same(columnar: DecodedBatch, reference: DecodedBatch) -> None:
    assert (columnar.records, columnar.tombstones) == (reference.records, reference.tombstones)
    assert columnar.dead_letter_causes == reference.dead_letter_causes
    for mine, theirs in ((columnar.rows, reference.rows), (columnar.dead_letters, reference.dead_letters)):
        assert sorted(mine) == sorted(theirs)
        for where, table in theirs.items():
            assert mine[where].schema == table.schema and mine[where].schema.metadata == table.schema.metadata, where
            # repr compares NaN, -0.0 and decimal scale exactly, which == would blur; fastavro's own error
            # texts may name an object's address, which differs between two runs of the same path
            assert _comparable(mine[where]) == _comparable(table), where


def _comparable(table: pa.Table) -> str:
    return re.sub(r" at 0x[0-9a-f]+", " at 0x…", repr(table.to_pylist()))


def decode_both(topic, values: list[bytes | None]) -> tuple[DecodedBatch, DecodedBatch, list[int]]:
    """(columnar result, fastavro result, offsets the columnar decoder left to fastavro)."""
    columnar, reference = decoders(topic)
    left: list[int] = []
    original = columnar._decode_records

    def spy(batch, indices, placed, dead):
        left.extend(batch.offsets[i] for i in indices if batch.values[i] is not None)
        return original(batch, indices, placed, dead)

    columnar._decode_records = spy
    records = records_of(values)
    return columnar.decode(records), reference.decode(records), left


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return write_topic(tmp_path_factory.mktemp("zoo"), [ZOO], pii_fields=PII)


def zoo_value(**overrides) -> dict:
    value = {
        "occurred_at": dt.datetime(2026, 11, 1, 12, 5, 6, 789000, tzinfo=UTC),
        "flag": True, "small": -7, "big": 2**40, "ratio": 1.5, "precise": 2.25, "name": "Zoë", "raw": b"\x00\xff",
        "nothing": None, "color": "GREEN", "checksum": b"abcd", "price": Decimal("1234567.89"),
        "fee": Decimal("-1.2345"), "huge": Decimal("1234567890123456789012345678901234567890.12345"),
        "day": dt.date(2026, 11, 1), "lunch": dt.time(12, 30, 15, 250000), "lap": dt.time(0, 0, 1, 123456),
        "at_micros": dt.datetime(2026, 11, 1, 12, 5, 6, 123456, tzinfo=UTC),
        "wall_ms": dt.datetime(2026, 11, 1, 14, 5, 6, 789000), "wall_us": dt.datetime(2026, 11, 1, 14, 5, 6, 123456),
        "id": uuid.UUID("3f2504e0-4f89-11d3-9a0c-0305e82c3301"), "address": {"street": "Main St 1", "zip": None},
        "previous_address": {"street": "Old Rd 2", "zip": "12345"}, "favorite": "RED", "nickname": None,
        "lone": "alone", "maybe_price": Decimal("-0.001"), "maybe_day": None, "maybe_id": uuid.UUID(int=7),
        "tags": ["a", "b"], "ratios": [0.5, None], "scores": {"x": 1, "y": 2**35}, "series": {"s": [1, -2**62], "t": []},
        "events": [{"at": dt.datetime(2026, 1, 1, tzinfo=UTC), "labels": {"k": "v"}, "level": "HIGH"}],
        "homes": {"main": {"street": "A", "zip": "1"}}, "choice": None, "amount": 9.5,
    }
    return value | overrides


def framed_zoo(topic, value: dict) -> bytes:
    return encode_confluent(topic.version(1).registry_id, topic.version(1).parsed, value)


# --- which path, decided per schema version before any record ----------------------------------------------


def test_given_the_zoo_and_the_sample_catalog_then_every_version_is_decoded_as_columns(zoo, tmp_path):
    columnar, _ = decoders(zoo)
    columnar.decode(records_of([framed_zoo(zoo, zoo_value())]))
    assert columnar.decoding_paths == {1: "columnar"}
    widest = {"type": "record", "name": "W", "fields": [{"name": "occurred_at", "type": "long"}, *[
        {"name": f"d{p}", "type": {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": 2}}
        for p in (37, 38, 39, 75)]]}
    wide = write_topic(tmp_path, [widest])
    decoder, _ = decoders(wide)
    decoder._version_decoding(wide.version(1))
    assert decoder.decoding_paths == {1: "columnar"}
    for topic in load_catalog(CATALOG).topics:
        if topic.payload_format == "raw":
            continue  # nothing to decode: the value's bytes are its column
        decoder = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY)
        for version in topic.schema_versions:
            decoder._version_decoding(version)
        assert set(decoder.decoding_paths.values()) == {"columnar"}, topic.topic


@pytest.mark.parametrize(
    ("extra", "pii", "reason"),
    [
        ({"name": "n", "type": ["null", "int", "long"]}, [], "members int and long that fastavro decodes to the same"),
        ({"name": "n", "type": ["float", "double"]}, [], "members float and double"),
        ({"name": "n", "type": ADDRESS}, ["n"], "pii field 'n' is Address"),
        ({"name": "n", "type": "double"}, ["n"], "pii field 'n' is double"),
        ({"name": "n", "type": {"type": "bytes", "logicalType": "decimal", "precision": 76}}, [], "decimal(76)"),
    ],
)
def test_given_a_schema_the_columnar_path_cannot_match_then_fastavro_decodes_it_and_says_why(tmp_path, extra, pii, reason):
    schema = {"type": "record", "name": "R", "fields": [{"name": "occurred_at", "type": "long"}, extra]}
    topic = write_topic(tmp_path, [schema], pii_fields=pii or None)
    decoder, _ = decoders(topic)
    decoder._version_decoding(topic.version(1))
    assert decoder.decoding_paths[1].startswith("fastavro: ") and reason in decoder.decoding_paths[1]


# --- hand-picked values ---------------------------------------------------------------------------------------


EDGE_VALUES = [
    {},
    {"ratio": float("nan"), "precise": float("-inf"), "small": -2**31, "big": 2**63 - 1, "name": "", "raw": b""},
    {"precise": -0.0, "ratio": 3.4e38, "tags": [], "scores": {}, "series": {}, "events": [], "homes": {}, "ratios": []},
    {"occurred_at": dt.datetime(1970, 1, 1, tzinfo=UTC), "day": dt.date(1, 1, 1), "lunch": dt.time(23, 59, 59, 999000)},
    {"wall_us": dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "at_micros": dt.datetime(1, 1, 1, tzinfo=UTC)},
    {"price": Decimal("-9999999.99"), "fee": Decimal("999999.9999"), "huge": Decimal("-0.00001"), "maybe_price": None},
    {"huge": Decimal("-" + "9" * 40 + ".99999"), "maybe_day": dt.date(2000, 2, 29), "maybe_id": None},
    {"choice": 7, "amount": "n/a"}, {"choice": "seven", "amount": b"\x01"}, {"choice": ("test.columnar.Color", "BLUE")},
    {"choice": {"street": "Elm", "zip": None}}, {"choice": False}, {"favorite": None, "nickname": "Zed", "lone": ""},
    {"previous_address": None, "address": {"street": "ß" * 70, "zip": "z"}, "id": uuid.UUID(int=0)},
    {"occurred_at": dt.datetime(1969, 12, 31, 23, 59, tzinfo=UTC)},  # before 1970: placed as columns too
    {"occurred_at": dt.datetime(1, 1, 1, 0, 0, 1, tzinfo=UTC)}, {"occurred_at": dt.datetime(9999, 12, 31, 23, tzinfo=UTC)},
    {"events": [{"at": dt.datetime(2026, 1, 1, tzinfo=UTC), "labels": {}, "level": None}] * 3, "tags": ["x"] * 200},
]


def test_given_hand_picked_zoo_records_when_decoded_both_ways_then_every_value_is_equal(zoo):
    values = [framed_zoo(zoo, zoo_value(**overrides)) for overrides in EDGE_VALUES] + [None]

    columnar, reference, left = decode_both(zoo, values)

    assert_same(columnar, reference)
    assert columnar.rows_count == len(EDGE_VALUES) and columnar.tombstones == 1
    assert left == []  # every event time of the years 0001..9999 is placed as a column


def encode_payload(schema, value) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def map_block(keys: list[str]) -> bytes:
    """An Avro map of ints, one block holding `keys` in this order (repeats included), each valued 1."""
    entries = b"".join(encode_payload("string", key) + encode_payload("int", 1) for key in keys)
    return encode_payload("long", len(keys)) + entries + b"\x00"


@pytest.mark.parametrize(
    ("field", "payload"),
    [
        ({"type": "int", "logicalType": "time-millis"}, encode_payload("int", 86_400_000)),  # 24:00 is no time of day
        ({"type": "long", "logicalType": "timestamp-micros"}, encode_payload("long", 2**62)),  # past year 9999
        ({"type": "int", "logicalType": "date"}, encode_payload("int", -800_000)),  # before year 1
        ({"type": "fixed", "name": "F", "size": 4, "logicalType": "decimal", "precision": 3, "scale": 0},
         struct.pack(">i", 1_000_000)),  # beyond its precision
        ({"type": "map", "values": "int"}, encode_payload({"type": "array", "items": ["string", "int"]}, [])[:0]
         + b"\x04\x02a\x02\x02a\x04\x00"),  # the key "a" twice: fastavro keeps the last
        ({"type": "map", "values": "int"}, b"\x06\x02a\x02\x02b\x04\x02a\x06\x00"),  # "a" twice, not side by side
        ({"type": "map", "values": "int"}, map_block([f"k{i}" for i in range(12)] + ["k3"])),  # in a wide map
        ({"type": "string", "logicalType": "uuid"}, encode_payload("string", "{3f2504e0-4f89-11d3-9a0c-0305e82c3301}")),  # braces: fastavro strips them
        ({"type": "string", "logicalType": "uuid"}, encode_payload("string", "not-a-uuid")),
        ({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}, encode_payload("bytes", b"\x00\x00\x05")),
        ("long", b"\x80\x00"),  # an over-long varint: valid, but not what a canonical writer writes
        ("int", encode_payload("long", 2**31)),  # too big for an int
        ("string", b"\x04\xff\xfe"),  # not UTF-8
    ],
)
def test_given_a_value_the_columnar_reader_would_read_otherwise_then_that_record_takes_fastavros_path(tmp_path, field, payload):
    schema = {"type": "record", "name": "R", "fields": [{"name": "occurred_at", "type": "long"}, {"name": "f", "type": field}]}
    topic = write_topic(tmp_path, [schema])
    good = topic.version(1)
    stamp = encode_payload("long", KAFKA_MS)
    odd = b"\x00" + struct.pack(">I", good.registry_id) + stamp + payload
    fine = [encode_confluent(good.registry_id, good.parsed, {"occurred_at": KAFKA_MS, "f": value})
            for value in _plain_values(field) * 4]  # more records than a stretch too short to bisect

    columnar, reference, left = decode_both(topic, [*fine, odd, *fine])

    assert_same(columnar, reference)
    # A value out of range is named by its record; one the reader refuses is cornered by bisecting the block.
    assert len(fine) in left and len(left) <= SMALLEST_SPLIT


def test_given_maps_wide_and_narrow_without_a_repeated_key_then_they_are_decoded_as_columns(tmp_path):
    schema = {"type": "record", "name": "R", "fields": [{"name": "occurred_at", "type": "long"},
                                                        {"name": "f", "type": {"type": "map", "values": "int"}}]}
    topic = write_topic(tmp_path, [schema])
    version = topic.version(1)
    maps = [{}, {"a": 1}, {"a": 1, "b": 2}, {f"k{i}": i for i in range(30)}, {"b": 1, "a": 2, "c": 3}] * 3
    values = [encode_confluent(version.registry_id, version.parsed, {"occurred_at": KAFKA_MS, "f": m}) for m in maps]

    columnar, reference, left = decode_both(topic, values)

    assert_same(columnar, reference)
    assert left == []


def _plain_values(field) -> list:
    kind = field if isinstance(field, str) else field.get("logicalType") or field["type"]
    return {
        "time-millis": [dt.time(1, 2, 3)] * 3, "timestamp-micros": [dt.datetime(2026, 1, 1, tzinfo=UTC)] * 3,
        "date": [dt.date(2026, 1, 1)] * 3, "decimal": [Decimal(5)] * 3, "map": [{"a": 1}, {}, {"b": 2, "c": 3}],
        "uuid": [uuid.UUID(int=5)] * 3, "long": [1, -1, 2**40], "int": [1, -1, 7], "string": ["x", "", "y"],
    }[kind]


# --- random records, evolution and corruption (hypothesis) -------------------------------------------------


def values_for(node, names: dict):
    """A hypothesis strategy of values fastavro writes for an Avro type."""
    if isinstance(node, str) and node in names:
        node = names[node]
    if isinstance(node, list):
        return st.one_of(*[branch_values(member, names) for member in node])
    if isinstance(node, dict) and node.get("type") in ("record",):
        names.setdefault("__namespace__", node.get("namespace"))
        names[node["name"]] = node
        return st.fixed_dictionaries({f["name"]: values_for(f["type"], names) for f in node["fields"]})
    kind = node["type"] if isinstance(node, dict) else node
    logical = node.get("logicalType") if isinstance(node, dict) else None
    if isinstance(kind, (dict, list)):
        return values_for(kind, names)
    if logical == "decimal":
        precision, scale = node["precision"], node.get("scale", 0)
        return st.integers(-(10**precision) + 1, 10**precision - 1).map(lambda u: Decimal(u).scaleb(-scale))
    moments = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30))
    logical_values = {
        "date": st.dates(), "time-millis": st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
        "time-micros": st.times(), "uuid": st.uuids(),
        "timestamp-millis": moments.map(lambda m: m.replace(microsecond=m.microsecond // 1000 * 1000, tzinfo=UTC)),
        "timestamp-micros": moments.map(lambda m: m.replace(tzinfo=UTC)),
        "local-timestamp-millis": moments.map(lambda m: m.replace(microsecond=m.microsecond // 1000 * 1000)),
        "local-timestamp-micros": moments,
    }
    if logical in logical_values:
        return logical_values[logical]
    if kind == "enum":
        names[node["name"]] = node
        return st.sampled_from(node["symbols"])
    if kind == "fixed":
        names[node["name"]] = node
        return st.binary(min_size=node["size"], max_size=node["size"])
    if kind == "array":
        return st.lists(values_for(node["items"], names), max_size=4)
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), values_for(node["values"], names), max_size=3)
    return {
        "null": st.none(), "boolean": st.booleans(), "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1), "float": st.floats(width=32), "double": st.floats(),
        "string": st.text(max_size=12), "bytes": st.binary(max_size=12),
    }[kind]


def branch_values(member, names: dict):
    """Values of one union branch, named branches written as (name, value) so fastavro picks exactly that one."""
    resolved = names.get(member, member) if isinstance(member, str) else member
    strategy = values_for(member, names)
    if isinstance(resolved, dict) and resolved.get("type") in ("enum", "record", "fixed"):
        namespace = names.get("__namespace__")
        full = f"{namespace}.{resolved['name']}" if namespace else resolved["name"]
        return strategy.map(lambda value: (full, value))
    return strategy


ZOO_VALUES = values_for(ZOO, {})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(values=st.lists(ZOO_VALUES, min_size=1, max_size=12))
def test_given_random_zoo_records_when_decoded_both_ways_then_every_value_is_equal(zoo, values):
    payloads = [framed_zoo(zoo, value) for value in values]

    columnar, reference, _ = decode_both(zoo, payloads)

    assert_same(columnar, reference)


V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "occurred_at", "type": ["null", "string"]},
    {"name": "quantity", "type": "int"},
    {"name": "price", "type": "float"},
    {"name": "note", "type": "string"},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "count", "type": "int"}]}}},
]}
V2 = {**V1, "fields": [
    {"name": "occurred_at", "type": ["null", "string"]},
    {"name": "quantity", "type": "long"},
    {"name": "price", "type": "double"},
    {"name": "note", "type": ["null", "string"]},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "count", "type": "long"}, {"name": "gift", "type": "boolean"}]}}},
    {"name": "channel", "type": ["null", {"type": "enum", "name": "Channel", "symbols": ["WEB", "APP"]}]},
]}
TIMES = st.one_of(
    st.none(), st.sampled_from(["2026-11-01T13:05:00Z", "2026-11-01T13:05:00.123456789+02:00", "yesterday",
                                "2026-02-30T10:00:00Z", "2026-11-01T13:05:00", "1969-12-31T23:59:59Z"]),
    st.datetimes(min_value=dt.datetime(1960, 1, 1), max_value=dt.datetime(2100, 1, 1)).map(lambda m: m.isoformat() + "Z"),
)


@pytest.fixture(scope="module")
def orders(tmp_path_factory):
    return write_topic(tmp_path_factory.mktemp("orders"), [V1, V2],
                       time_partitioning={"source": "event_time", "field": "occurred_at"})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), count=st.integers(1, 15))
def test_given_two_schema_versions_in_one_batch_when_decoded_both_ways_then_every_value_is_equal(orders, data, count):
    payloads = []
    for _ in range(count):
        version = orders.version(data.draw(st.sampled_from([1, 2])))
        value = data.draw(values_for(version.schema, {}))
        value["occurred_at"] = data.draw(TIMES)
        payloads.append(encode_confluent(version.registry_id, version.parsed, value))

    columnar, reference, _ = decode_both(orders, payloads)

    assert_same(columnar, reference)


CORRUPTIONS = st.one_of(
    st.tuples(st.just("truncate"), st.integers(1, 30)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("flip"), st.integers(0, 400), st.integers(1, 255)),
    st.tuples(st.just("splice"), st.integers(0, 400), st.binary(min_size=1, max_size=10)),
    st.tuples(st.just("replace"), st.binary(max_size=40)),
    st.tuples(st.just("other_version"), st.just(0)),
)


def corrupt(payload: bytes, corruption: tuple, other_id: bytes) -> bytes:
    kind, *args = corruption
    header, body = payload[:5], payload[5:]
    if kind == "truncate":
        return header + body[: max(len(body) - args[0], 0)]
    if kind == "append":
        return payload + args[0]
    if kind == "flip":
        at = args[0] % max(len(body), 1)
        return header + body[:at] + bytes([body[at] ^ args[1]]) + body[at + 1:] if body else payload
    if kind == "splice":
        at = args[0] % max(len(body), 1)
        return header + body[:at] + args[1] + body[at + len(args[1]):]
    if kind == "replace":
        return header + args[0]
    return b"\x00" + other_id + body  # written with one version, framed as the other


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), count=st.integers(2, 20))
def test_given_corrupted_payloads_among_good_ones_when_decoded_both_ways_then_the_batches_are_equal(orders, data, count):
    payloads = []
    for _ in range(count):
        version = orders.version(data.draw(st.sampled_from([1, 2])))
        value = data.draw(values_for(version.schema, {}))
        value["occurred_at"] = "2026-11-01T13:05:00Z"
        payloads.append(encode_confluent(version.registry_id, version.parsed, value))
    broken = data.draw(st.sets(st.integers(0, count - 1), min_size=1, max_size=3))
    for index in broken:
        other = orders.version(2 if payloads[index][4] == orders.version(1).registry_id % 256 else 1)
        payloads[index] = corrupt(payloads[index], data.draw(CORRUPTIONS), struct.pack(">I", other.registry_id))

    columnar, reference, _ = decode_both(orders, payloads)

    assert_same(columnar, reference)


# --- a broken record inside a spliced block ------------------------------------------------------------------


@pytest.mark.parametrize(
    "breakage",
    [
        lambda good: good + b"\x02",  # a trailing byte: the reader must not be asked past the block
        lambda good: good[:-3],  # truncated: it would eat its neighbour's bytes
        lambda good: good[:5] + b"\xff" * 12,  # garbage
        lambda good: good[:5],  # nothing after the header
    ],
    ids=["trailing byte", "truncated", "garbage", "empty payload"],
)
@pytest.mark.parametrize("position", [0, 137, 299], ids=["first", "middle", "last"])
def test_given_one_broken_record_in_a_block_then_it_alone_goes_to_the_dead_letters(orders, breakage, position):
    v2 = orders.version(2)
    values = [encode_confluent(v2.registry_id, v2.parsed, {
        "occurred_at": "2026-11-01T13:05:00Z", "quantity": n, "price": n / 3, "note": None if n % 3 else f"n{n}",
        "lines": [{"sku": f"s{n}", "count": n, "gift": n % 2 == 0}] * (n % 4), "channel": "WEB",
    }) for n in range(300)]
    values[position] = breakage(values[position])

    columnar, reference, left = decode_both(orders, values)

    assert_same(columnar, reference)
    assert columnar.rows_count == 299 and sum(columnar.dead_letter_causes.values()) == 1
    assert position in left and len(left) <= 1 + SMALLEST_SPLIT


def test_given_records_out_of_order_when_decoded_as_a_column_batch_then_rows_are_in_log_order(orders):
    v1 = orders.version(1)
    value = encode_confluent(v1.registry_id, v1.parsed, {"occurred_at": "2026-11-01T13:05:00Z", "quantity": 1,
                                                         "price": 1.0, "note": "x", "lines": []})
    batch = KafkaBatch([1, 0, 1, 0], [5, 9, 2, 3], [KAFKA_MS] * 4, [None] * 4, [value] * 4)

    [table] = BatchDecoder(orders, CatalogSchemas(orders), PII_KEY).decode(batch).rows.values()

    assert list(zip(table["_kafka_partition"].to_pylist(), table["_kafka_offset"].to_pylist())) == [(0, 3), (0, 9), (1, 2), (1, 5)]


# --- pseudonyms ---------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(key=st.binary(min_size=1, max_size=100), texts=st.lists(st.one_of(st.none(), st.text(max_size=30)), max_size=20))
def test_given_a_column_of_texts_then_its_pseudonyms_are_the_pseudonymizers(key, texts):
    column = pa.array(texts, pa.string())
    pseudonyms = ColumnPseudonymizer(key)(column)

    assert pseudonyms.to_pylist() == [Pseudonymizer(key).pseudonymize(text) for text in texts]
    assert pseudonyms.to_pylist() == [None if t is None else hmac.new(key, t.encode(), hashlib.sha256).hexdigest() for t in texts]
    assert ColumnPseudonymizer(key)(column, repeats=False).equals(pseudonyms)  # hashed one by one, the same
    assert ColumnPseudonymizer(key)(column.slice(1), repeats=False).equals(pseudonyms.slice(1))
    assert repr(ColumnPseudonymizer(key)) == "ColumnPseudonymizer(key=<hidden>)"  # nothing of the key


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(values=st.lists(ZOO_VALUES, min_size=2, max_size=6), flips=st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 2000), st.sampled_from([1, 2, 3, 4, 0x7E, 0xFF])), min_size=1, max_size=3))
def test_given_zoo_records_with_flipped_bytes_when_decoded_both_ways_then_the_batches_are_equal(zoo, values, flips):
    # A flipped byte often lands on a union's branch index, nested in arrays, maps and records: the reader
    # folds ["null", T] and would read any index as T, which fastavro refuses.
    payloads = [bytearray(framed_zoo(zoo, value)) for value in values]
    for record, at, mask in flips:
        payload = payloads[record % len(payloads)]
        payload[5 + at % (len(payload) - 5)] ^= mask

    columnar, reference, _ = decode_both(zoo, [bytes(payload) for payload in payloads])

    assert_same(columnar, reference)


# --- event times as text ------------------------------------------------------------------------------------

def _digits(highest: int) -> st.SearchStrategy[str]:
    """Two-digit fields from 00 to `highest`, past the valid ones, so out-of-range values are drawn too."""
    return st.integers(0, highest).map("{:02d}".format)


RFC3339_TEXTS = st.one_of(
    st.builds(
        "{}-{}-{}{}{}:{}:{}{}{}".format,
        st.one_of(st.sampled_from([0, 1, 2, 1949, 1969, 1970, 1971, 2024, 2026, 9998, 9999]),
                  st.integers(0, 9999)).map("{:04d}".format),
        _digits(13), _digits(32), st.sampled_from("Tt "), _digits(25), _digits(61), _digits(99),
        st.sampled_from(["", ".5", ".123456789", "."]),
        st.one_of(st.sampled_from(["Z", "z", ""]), st.builds("{}{}:{}".format, st.sampled_from("+-"), _digits(25), _digits(99))),
    ),
    st.text(max_size=30),
    st.none(),
)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(RFC3339_TEXTS, max_size=30), skipped=st.integers(0, 3))
def test_given_event_times_as_text_then_the_columns_place_each_in_the_hour_parse_event_time_gives(texts, skipped):
    column = pa.array(["2026-11-01T13:05:00Z"] * skipped + texts, pa.string()).slice(skipped)  # offset, as a field's

    hours, unplaced = hours_of_rfc3339(column, column.is_valid().to_numpy(zero_copy_only=False))

    for text, hour, left in zip(texts, hours, unplaced):
        try:
            expected = epoch_hour(parse_event_time(text))
        except ValueError:
            expected = None
        if not left:
            assert hour == expected, text
        else:  # left to the record path: one it refuses, or outside the plain form the columns read
            assert expected is None or not text.isascii() or not 2 <= int(text[:4]) <= 9998, text


def epoch_hour(moment: dt.datetime) -> int:
    return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(hours=1)


def test_given_plain_event_times_as_text_then_the_columns_place_them_all():
    texts = ["2026-11-01T13:05:00Z", "2026-11-01t13:05:00.5-01:30", "2024-02-29 23:59:59.999999999+23:59",
             "2026-12-31T23:30:00-00:30", "1971-01-01T00:00:00z", "9998-12-31T23:59:59Z",
             "1949-05-13T07:00:00.5+01:00", "1969-12-31T23:59:59.999Z", "0002-01-01T00:30:00+00:45"]
    column = pa.array(texts)

    hours, unplaced = hours_of_rfc3339(column, np.ones(len(texts), dtype=bool))

    assert not unplaced.any()
    assert hours.tolist() == [epoch_hour(parse_event_time(text)) for text in texts]
