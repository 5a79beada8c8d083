"""JSON values (`format: json`): read against the table's Avro schemas into exactly the columns Avro would land, as
columns a batch at a time, proven equal record by record to the record path (Python's JSON parser), which is the
reference; a value that is no JSON object or does not fit its schema is a dead letter naming the field, and costs only
itself.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.kafka.schema_resolution import CatalogSchemas
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import load_topic
from tests.test_columnar import assert_same, decode_both, decoders
from tests.test_columnar import records_of as records
from tests.test_decoding import KAFKA_MS, PII_KEY, dead_letter_rows

UTC = dt.timezone.utc
ITEM = {"type": "record", "name": "Item", "fields": [
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}]}]}
# Every type the JSON reader reads as columns, in the shapes event producers write.
EVENT = {
    "type": "record", "name": "CartOpen", "namespace": "shop.events", "fields": [
        {"name": "type", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "user_id", "type": ["null", "string"], "default": None},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "precise", "type": "double"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "lunch", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "lap", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "wall", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "items", "type": {"type": "array", "items": ITEM}},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "address", "type": ["null", {"type": "record", "name": "Address", "fields": [
            {"name": "street", "type": "string"}, {"name": "zip", "type": ["null", "string"]}]}]},
        {"name": "favorite", "type": ["null", "Color"]},
        {"name": "nothing", "type": "null"},
    ],
}
PII = ["user_id", "address.street"]


def json_topic(root: Path, schemas: list[dict], time_partitioning: dict | None = None, pii: list[str] | None = None,
               **keys) -> TableSpec:
    folder = root / "shop" / "cart_open"
    folder.mkdir(parents=True, exist_ok=True)
    versions = []
    for number, schema in enumerate(schemas, start=1):
        (folder / f"v{number}.avsc").write_text(json.dumps(schema))
        versions.append({"version": number, "file": f"v{number}.avsc", "registry_id": 900 + number})
    document = {"topic": "shop.events", "owner": "team-test", "format": "json", "start_hour": "2026-11-01T00:00Z",
                "time_partitioning": time_partitioning or {"source": "event_time", "field": "ts"},
                "schema_versions": versions, **({"pii_fields": pii} if pii else {}), **keys}
    (folder / "topic.yaml").write_text(json.dumps(document))
    return load_topic(folder / "topic.yaml")


def event(**overrides) -> dict:
    """A JSON event, as a producer writes it: times as epoch counts, a decimal as text, a UUID as text."""
    value = {
        "type": "cartOpen", "ts": 1_793_538_306_789, "user_id": "user-7", "flag": True, "small": -7, "big": 2**40,
        "ratio": 1.5, "precise": 2.25, "color": "GREEN", "total": "1234.5", "day": 20_393, "lunch": 45_015_250,
        "lap": 1_123_456, "at_us": 1_793_538_306_123_456, "wall": 1_793_545_506_789, "id": "3F2504E0-4F89-11D3-9A0C-0305E82C3301",
        "items": [{"sku": "a-1", "qty": 2, "price": 9.99}, {"sku": "b-2", "qty": 1, "price": None}],
        "tags": ["x", None], "address": {"street": "Main St 1", "zip": None, "country": "ignored"}, "favorite": "RED",
        "nothing": None, "extra": {"not": ["in", "the", "schema"]},
    }
    return value | overrides


def as_avro(value: dict) -> dict:
    """The same event as fastavro takes it, for the Avro twin of the topic."""
    return {
        **{k: v for k, v in value.items() if k not in ("extra",)},
        "ts": dt.datetime.fromtimestamp(value["ts"] / 1000, UTC),
        "total": Decimal(value["total"]).quantize(Decimal("0.001")),
        "day": None if value["day"] is None else dt.date(1970, 1, 1) + dt.timedelta(days=value["day"]),
        "lunch": (dt.datetime.min + dt.timedelta(milliseconds=value["lunch"])).time(),
        "lap": (dt.datetime.min + dt.timedelta(microseconds=value["lap"])).time(),
        "at_us": dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=value["at_us"]),
        "wall": dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=value["wall"]),
        "id": uuid.UUID(value["id"]),
        "items": [{**item, "price": None if item["price"] is None else Decimal(str(item["price"]))} for item in value["items"]],
        "address": value["address"] and {"street": value["address"]["street"], "zip": value["address"]["zip"]},
    }


def text(value: dict, **options) -> bytes:
    return json.dumps(value, **options).encode()


def framed_json(schema_id: int, value: dict) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + text(value)


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> TableSpec:
    return json_topic(tmp_path_factory.mktemp("json"), [EVENT], pii=PII)


@pytest.fixture(scope="module")
def avro_twin(tmp_path_factory) -> TableSpec:
    folder = tmp_path_factory.mktemp("avro") / "shop" / "cart_open"
    folder.mkdir(parents=True)
    (folder / "v1.avsc").write_text(json.dumps(EVENT))
    (folder / "topic.yaml").write_text(json.dumps({
        "topic": "shop.events", "owner": "team-test", "start_hour": "2026-11-01T00:00Z", "pii_fields": PII,
        "time_partitioning": {"source": "event_time", "field": "ts"},
        "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": 901}]}))
    return load_topic(folder / "topic.yaml")


def test_given_json_events_when_decoded_then_they_land_as_the_columns_avro_lands_them(events, avro_twin):
    values = [event(), event(user_id=None, day=None, address=None, favorite=None, items=[], tags=[])]
    as_json = [text(v) for v in values] + [framed_json(901, values[0])]
    in_avro = [encode_confluent(901, avro_twin.version(1).parsed, as_avro(v)) for v in values]
    in_avro.append(in_avro[0])

    columnar, reference, left = decode_both(events, as_json)
    avro = BatchDecoder(avro_twin, CatalogSchemas(avro_twin), PII_KEY).decode(records(in_avro))

    assert_same(columnar, reference)
    assert_same(columnar, avro)
    assert left == [] and BatchDecoder(events, CatalogSchemas(events), PII_KEY).decode(records(as_json[:1])) is not None
    columnar_decoder, _ = decoders(events)
    columnar_decoder.decode(records(as_json))
    assert columnar_decoder.decoding_paths == {1: "columnar"}


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (b"not json", "is not JSON: Expecting value: line 1 column 1 (char 0)"),
        (b'[1, 2]', "is JSON an array, not an object"),
        (b'{"type": "x"', "is not JSON: Expecting ',' delimiter"),
        (b'\xff{}', "is not UTF-8 text: byte 0 of 3"),
        (text(event(small=2**31)), "small: 2147483648 is not a whole number in -2147483648..2147483647"),
        (text(event(small=1.0)), "small: 1.0 is not a whole number"),
        (text(event(flag=1)), "flag: 1 is not true or false"),
        (text(event(ratio=1e39)), "ratio: 1E+39 is beyond the range of a float"),
        (text(event(color="PURPLE")), 'color: "PURPLE" is not one of the symbols ["RED", "GREEN", "BLUE"]'),
        (text(event(total="12.3456")), 'total: "12.3456" has more than 3 digits after the point (decimal(12,3))'),
        (text(event(total="1234567890.5")), 'total: "1234567890.5" has more than 9 digits before the point'),
        (text(event(total="1,5")), 'total: "1,5" is not a decimal number or its text'),
        (text(event(lunch=86_400_000)), "lunch: 86400000 is no time of day (0 to a day, in milliseconds)"),
        (text(event(day=3_000_000)), "day: 3000000 is no date of the years 0001..9999"),
        (text(event(id="nope")), 'id: "nope" is not a UUID'),
        (text({k: v for k, v in event().items() if k != "big"}), "big: absent or null, and its type has no null"),
        (text(event(items=[{"sku": "a", "qty": None}])), "items[0].qty: absent or null, and its type has no null"),
        (text(event(tags="x")), 'tags: "x" is not an array'),
        (text(event(nothing=0)), "nothing: 0 is not null"),
        (b'{"type": "\\ud800"}', 'type: "\\ud800" holds a lone surrogate escape'),
        (b'{"ts": NaN}', "is not JSON: NaN is not a JSON number"),
        (b'{"a":' * 101 + b"1" + b"}" * 101, "is nested more than 100 arrays and objects deep"),
        (b"\x00\x00\x00", "value is 3 bytes, shorter than the 5-byte header"),
    ],
)
def test_given_a_value_that_is_no_json_object_or_does_not_fit_then_it_alone_is_a_dead_letter_naming_why(
        events, value, error):
    good = text(event())
    columnar, reference, _ = decode_both(events, [good] * 10 + [value] + [good] * 10)

    assert_same(columnar, reference)
    [letter] = dead_letter_rows(columnar)
    assert letter["value"] == value and letter["_kafka_offset"] == 10
    assert letter["error"].startswith("undecodable_payload: ") and error in letter["error"], letter["error"]
    assert columnar.rows_count == 20


# Text a lenient parser reads but JSON (RFC 8259) does not: (what is replaced in the event's text, by what).
NOT_JSON = {
    "NaN in a double": ('"precise": 2.25', '"precise": NaN'),
    "Infinity in a double": ('"precise": 2.25', '"precise": Infinity'),
    "-Infinity in a float": ('"ratio": 1.5', '"ratio": -Infinity'),
    "NaN in a field no schema names": ('"extra": {', '"unnamed": NaN, "extra": {'),
    "Infinity deep in a field no schema names": ('"not": ["in"', '"not": [-Infinity, "in"'),
    "NaN in a record's field no schema names": ('"country": "ignored"', '"country": NaN'),
    "Inf, a spelling some parsers take": ('"precise": 2.25', '"precise": Inf'),
    "-NaN": ('"precise": 2.25', '"precise": -NaN'),
    "a leading zero": ('"small": -7', '"small": -07'),
    "a leading zero where no schema looks": ('"extra": {', '"unnamed": 007, "extra": {'),
    "a plus sign": ('"small": -7', '"small": +1'),
    "single quotes": ('"type": "cartOpen"', "'type': 'cartOpen'"),
    "a comment": ('"flag": true', '"flag": true /* yes */'),
    "a line comment at the end": ('"schema"]}}', '"schema"]}} // end'),
    "a trailing comma in an array": ('"tags": ["x", null]', '"tags": ["x", null,]'),
    "a trailing comma in an object": ('"schema"]}}', '"schema"]},}'),
    "a \\x escape": ('"type": "cartOpen"', '"type": "cart\\x4fpen"'),
    "a hexadecimal number": ('"small": -7', '"small": 0x10'),
    "a point without digits after it": ('"precise": 2.25', '"precise": 2.'),
    "a point without digits before it": ('"precise": 2.25', '"precise": .25'),
    "True in capitals": ('"flag": true', '"flag": True'),
    "undefined": ('"nothing": null', '"nothing": undefined'),
}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"small": True}, "small: true is not a whole number"),
        ({"small": 3.5}, "small: 3.5 is not a whole number"),
        ({"small": [1, None]}, "small: [1, null] is not a whole number"),
        ({"type": {"userid": 4711}}, 'type: {"userid": 4711} is not text'),
        ({"flag": "yes"}, 'flag: "yes" is not true or false'),
        ({"ts": "noon"}, 'ts: "noon" is not a whole number'),
        ({"address": {"street": False}}, "address.street: false is not text"),
        ({"items": [{"sku": "a", "qty": {"n": [None, True, "x", 1.50]}}]},
         'items[0].qty: {"n": [null, true, "x", 1.5]} is not a whole number'),
        ({"flag": "x" * 100}, 'flag: "' + "x" * 80 + '…" is not true or false'),
    ],
)
def test_dead_letter_causes_of_json_records_show_values_as_json(events, changes, error):
    """The people who read these causes wrote JSON: `null`, `true`, `3.5` and `{"userid": 4711}`, never Python's
    `None`, `True`, `Decimal('3.5')` or `{'userid': 4711}`."""
    columnar, reference, _ = decode_both(events, [text(event(**changes))])

    assert_same(columnar, reference)
    [letter] = dead_letter_rows(columnar)
    assert error in letter["error"], letter["error"]
    assert not any(python in letter["error"] for python in ("None", "True", "False", "Decimal(", "'")), letter["error"]


@pytest.mark.parametrize(("replaced", "by"), list(NOT_JSON.values()), ids=list(NOT_JSON))
def test_given_text_a_lenient_parser_reads_but_json_does_not_then_both_paths_make_it_a_dead_letter(events, replaced, by):
    good = text(event())
    assert replaced.encode() in good
    value = good.replace(replaced.encode(), by.encode(), 1)

    columnar, reference, _ = decode_both(events, [good] * 10 + [value] + [good] * 10)

    assert_same(columnar, reference)
    [letter] = dead_letter_rows(columnar)
    assert letter["value"] == value and letter["_kafka_offset"] == 10
    assert letter["error"].startswith("undecodable_payload: JSON value (version 1, v1.avsc) is not JSON: "), letter["error"]
    assert columnar.rows_count == 20


def test_numbers_past_what_a_decimal_or_a_whole_number_holds_have_one_verdict_on_both_paths(events):
    """JSON sets no limit on a number's digits or exponent; Python's decimal and int do. A double reads an exponent
    past every decimal's as 0, a decimal column refuses it, and a whole number longer than any column holds is refused
    by a field that reads it and ignored by the others."""
    good = text(event())
    tiny = good.replace(b'"precise": 2.25', b'"precise": 1e-30099999999999999999999')
    tiny_total = good.replace(b'"total": "1234.5"', b'"total": -1e-30099999999999999999999')
    huge_total = good.replace(b'"total": "1234.5"', b'"total": 1e30099999999999999999999')
    long_unnamed = good.replace(b'"extra": {', b'"unnamed": ' + b"9" * 5000 + b', "extra": {')
    long_big = good.replace(b'"big": 1099511627776', b'"big": -' + b"9" * 5000)

    columnar, reference, _ = decode_both(events, [good, tiny, tiny_total, huge_total, long_unnamed, long_big])

    assert_same(columnar, reference)
    [rows] = columnar.rows.values()
    assert rows.column("_kafka_offset").to_pylist() == [0, 1, 4] and rows.column("precise").to_pylist()[1] == 0.0
    errors = {row["_kafka_offset"]: row["error"] for row in dead_letter_rows(columnar)}
    assert "total: -1E-1999999999999999997 has more than 3 digits after the point" in errors[2]
    assert "total: 1E+999999999999999999 has more than 9 digits before the point" in errors[3]
    assert "big: -99999999" in errors[5] and "is not a whole number in -9223372036854775808..9223372036854775807" in errors[5]


def test_a_framed_json_value_names_its_version_and_a_plain_one_is_read_with_the_newest(tmp_path):
    v1 = {"type": "record", "name": "E", "fields": [{"name": "ts", "type": "long"}, {"name": "a", "type": "int"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "b", "type": ["null", "string"], "default": None}]}
    topic = json_topic(tmp_path, [v1, v2])
    values = [framed_json(901, {"ts": KAFKA_MS, "a": 1, "b": "ignored by v1"}), text({"ts": KAFKA_MS, "a": 2, "b": "two"}),
              framed_json(902, {"ts": KAFKA_MS, "a": 3}), framed_json(7, {"ts": KAFKA_MS, "a": 4}), None]

    columnar, reference, _ = decode_both(topic, values)

    assert_same(columnar, reference)
    landed = {p.schema_version: t.to_pylist() for p, t in columnar.rows.items()}
    assert [(r["a"], r.get("b")) for r in landed[1]] == [(1, None)]
    assert [(r["a"], r["b"]) for r in landed[2]] == [(2, "two"), (3, None)]
    [unknown] = dead_letter_rows(columnar)
    assert unknown["error"].startswith("unknown_schema_id: schema id 7 is no registry_id") and columnar.tombstones == 1


def test_json_values_of_every_spelling_decode_alike_on_both_paths(events):
    """Whitespace, escapes, key order, pretty printing (line breaks take the record path), unicode as text or
    escapes, numbers as their text: each spelling of one event lands the same row."""
    value = event(type="Zoë 😀", user_id="ü\u2028")
    spellings = [text(value), text(value, ensure_ascii=False), text(value, indent=2), text(value, separators=(",", ":")),
                 text(dict(reversed(list(value.items())))), b"  \t" + text(value) + b" \r", text(value, sort_keys=True)]

    columnar, reference, left = decode_both(events, spellings)

    assert_same(columnar, reference)
    rows = next(iter(columnar.rows.values())).to_pylist()
    assert len({repr({k: v for k, v in row.items() if not k.startswith("_kafka")}) for row in rows}) == 1
    assert sorted(left) == [2, 5], "only the values with line breaks were read record by record"


# --- hypothesis: random events, right and wrong, as columns and record by record ---------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                    st.decimals(allow_nan=False, allow_infinity=False, places=4).map(str),
                    st.sampled_from(["RED", "GREEN", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "1.5", "-0", "+1", ".5"]))
ANYTHING = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                           st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                        max_leaves=8)


def field_values(name: str):
    """Mostly values in or near the field's range, sometimes anything at all."""
    good = event()[name]
    near = {
        "small": st.integers(min_value=-(2**32), max_value=2**32), "big": st.integers(min_value=-(2**64), max_value=2**64),
        "ratio": st.floats(allow_nan=False, allow_infinity=False), "precise": st.floats(allow_nan=False, allow_infinity=False),
        "total": st.one_of(st.decimals(allow_nan=False, allow_infinity=False).map(str),
                           st.decimals(min_value=-10**10, max_value=10**10, places=3).map(Decimal),
                           st.integers(min_value=-10**12, max_value=10**12)),
        "day": st.integers(min_value=-800_000, max_value=3_000_000),
        "lunch": st.integers(min_value=-1, max_value=86_400_001), "lap": st.integers(min_value=-1, max_value=86_400_000_001),
        "ts": st.integers(min_value=-(2**63), max_value=2**63), "at_us": st.integers(min_value=-(2**63), max_value=2**63),
        "wall": st.integers(min_value=-(2**63), max_value=2**63),
        "id": st.one_of(st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()), st.uuids().map(lambda u: u.hex)),
        "color": st.sampled_from(["RED", "GREEN", "BLUE", "red", ""]),
        "items": st.lists(st.fixed_dictionaries({"sku": st.text(max_size=4), "qty": st.integers(-5, 5)},
                                                optional={"price": st.one_of(st.none(), st.decimals(places=2, min_value=-9999, max_value=9999, allow_nan=False))}),
                          max_size=3),
        "tags": st.lists(st.one_of(st.none(), st.text(max_size=4)), max_size=3),
    }.get(name, st.nothing())
    return st.one_of(near, near, near, ANYTHING) if near is not st.nothing() else st.one_of(st.just(good), ANYTHING)


# An event with a few fields changed: to values in or near their range, or to anything at all.
CHANGES = st.sampled_from(list(event())).flatmap(lambda name: field_values(name).map(lambda value: (name, value)))
EVENTS = st.lists(CHANGES, max_size=4).map(lambda changes: event(**dict(changes)))


def as_text(value: dict, style: int) -> bytes:
    def default(item):
        return str(item) if isinstance(item, Decimal) else item
    if style == 0:
        return json.dumps(value, default=default).encode()
    if style == 1:
        return json.dumps(value, default=default, ensure_ascii=False).encode("utf-8", "surrogatepass")
    # numbers written as JSON numbers, not text: a Decimal's own digits
    return json.dumps(value, default=lambda item: float(item) if isinstance(item, Decimal) else item).encode()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.data_too_large])
@given(values=st.lists(st.tuples(EVENTS, st.integers(0, 2)), min_size=1, max_size=12),
       drops=st.lists(st.sampled_from(list(event())), max_size=3))
def test_given_random_events_right_and_wrong_then_both_paths_land_and_refuse_the_same_records(events, values, drops):
    payloads = []
    for value, style in values:
        for name in drops:
            value.pop(name, None)
        payloads.append(as_text(value, style))

    columnar, reference, _ = decode_both(events, payloads)

    assert_same(columnar, reference)
    assert columnar.records == columnar.rows_count + sum(t.num_rows for t in columnar.dead_letters.values())


# --- JSON keys that are no Avro names, read through Avro aliases ------------------------------------------------

WIKI_EVENT = {
    "type": "record", "name": "RecentChange", "namespace": "org.wikimedia", "fields": [
        {"name": "schema_uri", "type": "string", "aliases": ["$schema"]},
        {"name": "timestamp", "type": "string", "aliases": ["@timestamp"]},
        {"name": "title", "type": ["null", "string"], "default": None},
        {"name": "reactions", "type": ["null", {"type": "record", "name": "Reactions", "fields": [
            {"name": "plus_one", "type": "int", "aliases": ["+1"]},
            {"name": "minus_one", "type": "int", "aliases": ["-1"]},
            {"name": "laugh", "type": "int"}]}], "default": None},
    ],
}


def wiki_event(**overrides) -> dict:
    value = {"$schema": "/mediawiki/recentchange/1.0.0", "@timestamp": "2026-11-01T13:05:06Z", "title": "Zoë",
             "reactions": {"+1": 3, "-1": 0, "laugh": 1}, "meta": {"domain": "en.wikipedia.org"}}
    return value | overrides


def test_json_keys_that_are_no_avro_names_land_in_the_columns_their_aliases_name(tmp_path):
    """Given Wikimedia's `$schema`, ECS's `@timestamp` (the event time) and GitHub's `+1` reactions, each named by an
    Avro alias of a field whose name a column can take."""
    topic = json_topic(tmp_path, [WIKI_EVENT], {"source": "event_time", "field": "timestamp"})
    values = [text(wiki_event()),
              text(wiki_event(schema_uri="/by/its/name", **{"$schema": "/by/its/alias"})),  # its name wins
              text(wiki_event(schema_uri=None)),  # a null under its name: the alias's value
              text(wiki_event(reactions={"plus_one": 5, "-1": 2, "laugh": 0})),
              text({k: v for k, v in wiki_event().items() if k != "$schema"}),  # under no key: absent
              text(wiki_event(reactions={"+1": "many", "-1": 0, "laugh": 1}))]

    columnar, reference, left = decode_both(topic, values)

    assert_same(columnar, reference)
    rows = {row["_kafka_offset"]: row for row in next(iter(columnar.rows.values())).to_pylist()}
    assert rows[0]["schema_uri"] == "/mediawiki/recentchange/1.0.0" and rows[0]["timestamp"] == "2026-11-01T13:05:06Z"
    assert rows[0]["reactions"] == {"plus_one": 3, "minus_one": 0, "laugh": 1}
    assert rows[1]["schema_uri"] == "/by/its/name" and rows[2]["schema_uri"] == "/mediawiki/recentchange/1.0.0"
    assert rows[3]["reactions"] == {"plus_one": 5, "minus_one": 2, "laugh": 0}
    assert list(columnar.rows)[0].hour == dt.datetime(2026, 11, 1, 13, tzinfo=UTC)
    errors = {row["_kafka_offset"]: row["error"] for row in dead_letter_rows(columnar)}
    assert errors[4].endswith("schema_uri: absent or null, and its type has no null")
    assert errors[5].endswith('reactions.plus_one: "many" is not a whole number in -2147483648..2147483647')
    assert 0 not in left, "aliases are read as columns"


@pytest.mark.parametrize("columnar", [True, False])
def test_a_route_field_is_read_under_its_aliases_too(tmp_path, columnar):
    from kafka_lake.topics.loader import load_catalog

    for table, kind in (("opens", "cartOpen"), ("closes", "cartClose")):
        schema = {"type": "record", "name": "Cart", "fields": [
            {"name": "kind", "type": "string", "aliases": ["@type"]}, {"name": "n", "type": "int"}]}
        folder = tmp_path / "shop" / table
        folder.mkdir(parents=True)
        (folder / "v1.avsc").write_text(json.dumps(schema))
        (folder / "topic.yaml").write_text(json.dumps({
            "topic": "shop.carts", "owner": "team-test", "format": "json", "start_hour": "2026-11-01T00:00Z",
            "time_partitioning": {"source": "kafka_time"}, "route": {"field": "kind", "equals": kind},
            "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": 901 if table == "opens" else 902}]}))
    catalog = load_catalog(tmp_path)
    values = [b'{"@type": "cartOpen", "n": 1}', b'{"kind": "cartOpen", "n": 2}', b'{"@type": "cartClose", "n": 3}',
              b'{"kind": null, "@type": "cartOpen", "n": 4}', b'{"n": 5}']

    opens, closes = (BatchDecoder(table, CatalogSchemas(table), None, columnar=columnar).decode(records(values))
                     for table in (catalog.by_name("shop", "opens"), catalog.by_name("shop", "closes")))

    assert sorted(n for t in opens.rows.values() for n in t.column("n").to_pylist()) == [1, 2, 4]
    assert sorted(n for t in closes.rows.values() for n in t.column("n").to_pylist()) == [3]
    assert [row["_kafka_offset"] for t in closes.unrouted.values() for row in t.to_pylist()] == [4], "no key: unrouted"


@pytest.mark.parametrize(("fields", "problem"), [
    ([{"name": "a", "type": "int", "aliases": ["b"]}, {"name": "b", "type": "int"}],
     "field 'a' of record 'R' has alias 'b', which is already field 'b''s name"),
    ([{"name": "a", "type": "int", "aliases": ["$x"]}, {"name": "b", "type": "int", "aliases": ["$x"]}],
     "field 'b' of record 'R' has alias '$x', which is already field 'a''s alias"),
    ([{"name": "a", "type": "int", "aliases": "$x"}], "aliases are a list of non-empty texts"),
])
def test_an_alias_that_would_name_two_fields_fails_at_load_naming_the_file(tmp_path, fields, problem):
    from kafka_lake.topics.loader import CatalogError

    with pytest.raises(CatalogError) as refused:
        json_topic(tmp_path, [{"type": "record", "name": "R", "fields": [{"name": "ts", "type": "long"}, *fields]}])
    assert "v1.avsc" in str(refused.value) and problem in str(refused.value), str(refused.value)
