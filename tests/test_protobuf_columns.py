"""The columnar path of Protobuf values, proven equal to the record path value for value: random messages of every
type the lake maps (hypothesis, built by the protobuf library), pii fields among them, corrupted and hand-built bytes
among good ones, and the versions it leaves to the record path with the reason. Both paths run on the same bytes; the
record path (`columnar=False`) is the reference.
"""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.decoding.protobuf.columns import SMALLEST_SPLIT
from kafka_lake.decoding.protobuf.wire import encode_protobuf
from kafka_lake.kafka.schema_resolution import CatalogSchemas
from kafka_lake.table_spec import TableSpec
from tests.otel_spans import otel_topic, random_span
from tests.test_columnar import assert_same, decode_both, decoders, records_of
from tests.test_columnar import corrupt as corrupt_payload
from tests.test_decoding import PII_KEY
from tests.test_protobuf import ORDERS_V1, ZOO_FILES, framed, message_class, order, orders, protobuf_topic, zoo

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ZOO_PII = ["name", "user_id", "color", "small", "flag", "coupon", "limit", "gift", "unsigned_small", "payment.card",
           "first_item.sku"]
FIRST_SECOND, LAST_SECOND = -62_135_596_800, 253_402_300_799  # 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z
PROTO2 = """
syntax = "proto2";
package acme.legacy;
message Reading {
  optional string sensor = 1;
  required int64 value = 2;
  optional int32 level = 3 [default = 7];
}
"""


def flat_zoo(root: Path, **keys) -> TableSpec:
    """The zoo without its message that contains itself: every type the lake maps, and nothing that recurs."""
    folder = root / "test" / "flat_zoo"
    shutil.copytree(ZOO_FILES, folder)
    (folder / "zoo.proto").write_text((folder / "zoo.proto").read_text().replace("  Node tree = 38;\n", ""))
    return protobuf_topic(root, {}, [{"version": 1, "file": "zoo.proto", "message": "test.zoo.Zoo", "registry_id": 41}],
                          folder="test/flat_zoo", **{"time_partitioning": {"source": "event_time", "field": "occurred_at"},
                                                     **keys})


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> TableSpec:
    return flat_zoo(tmp_path_factory.mktemp("flat"), pii_fields=ZOO_PII)


# --- which versions take the columnar path ------------------------------------------------------------------------


def path_of(topic: TableSpec) -> str:
    """The decoding path the table's version 1 takes: "columnar", or the record path's name and why."""
    decoder = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY)
    decoder._version_decoding(topic.version(1))
    return decoder.decoding_paths[1]


def test_given_protobuf_versions_then_those_with_and_without_recursion_are_decoded_as_columns(tmp_path):
    assert path_of(orders(tmp_path / "a")) == "columnar"
    assert path_of(flat_zoo(tmp_path / "b", pii_fields=ZOO_PII)) == "columnar"
    assert path_of(zoo(tmp_path / "c")) == "columnar"  # where Node recurs, its JSON text is read value by value
    assert path_of(otel_topic(tmp_path / "d")) == "columnar"


@pytest.mark.parametrize("pii, time_field, reason", [
    (["items"], "occurred_at", "pii field 'items' is a repeated field"),
    (["counts"], "occurred_at", "pii field 'counts' is a map"),
    (["total"], "occurred_at", "pii field 'total' is no plain string, number, bool or enum"),
    (["precise"], "occurred_at", "pii field 'precise' is no plain string, number, bool or enum"),
    (["payment"], "occurred_at", "pii field 'payment' is a oneof"),
    (["name"], "name", "the event time field is pseudonymized"),
])
def test_given_pii_the_columns_cannot_pseudonymize_exactly_then_the_version_takes_the_record_path(
        tmp_path, pii, time_field, reason):
    topic = flat_zoo(tmp_path, pii_fields=pii, time_partitioning={"source": "event_time", "field": time_field})

    assert path_of(topic).startswith(f"protobuf: {reason}")


# --- random messages of every type, both paths ---------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
INT32, INT64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
UINT32, UINT64 = st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)
COLORS = st.sampled_from([0, 1, 2, 9, -4])  # 9 and -4: numbers the enum lacks
# Seconds around both ends of the years a timestamp lands in, and far beyond; nanos as any int32 a writer may put.
SECONDS = st.one_of(st.integers(1_700_000_000, 1_900_000_000), st.integers(FIRST_SECOND - 2, FIRST_SECOND + 2),
                    st.integers(LAST_SECOND - 2, LAST_SECOND + 2), INT64)
NANOS = st.one_of(st.integers(0, 999_999_999), INT32)
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                           max_leaves=6)


def _timestamp(target, drawn: tuple[int, int]) -> None:
    target.seconds, target.nanos = drawn


def _item(target, drawn: dict) -> None:
    target.sku, target.qty = drawn["sku"], drawn["qty"]
    target.packed_ids.extend(drawn["packed_ids"])
    target.tags.extend(drawn["tags"])


ITEMS = st.fixed_dictionaries({"sku": TEXT, "qty": INT32, "packed_ids": st.lists(INT64, max_size=3),
                               "tags": st.lists(TEXT, max_size=3)})
MONEY = st.tuples(TEXT, INT64, INT32)
ZOO_FIELDS = st.fixed_dictionaries({}, optional={
    "occurred_at": st.tuples(SECONDS, NANOS), "precise": st.floats(), "ratio": st.floats(width=32), "small": INT32,
    "big": INT64, "unsigned_small": UINT32, "unsigned_big": UINT64, "zig_small": INT32, "zig_big": INT64,
    "fixed_small": UINT32, "fixed_big": UINT64, "sfixed_small": INT32, "sfixed_big": INT64, "flag": st.booleans(),
    "name": TEXT, "raw": st.binary(max_size=8), "color": COLORS, "user_id": TEXT, "maybe": INT32,
    "first_item": ITEMS, "items": st.lists(ITEMS, max_size=3), "scores": st.lists(st.floats(), max_size=3),
    "counts": st.dictionaries(TEXT, INT64, max_size=3), "by_slot": st.dictionaries(INT32, ITEMS, max_size=3),
    "by_flag": st.dictionaries(st.booleans(), TEXT, max_size=2),
    "payment": st.one_of(st.tuples(st.just("card"), TEXT), st.tuples(st.just("account"), INT64),
                         st.tuples(st.just("voucher"), MONEY)),
    "coupon": TEXT, "limit": INT64, "huge": UINT64, "gift": st.booleans(), "discount": st.floats(), "total": MONEY,
    "seen_at": st.lists(st.tuples(SECONDS, NANOS), max_size=3),
    "attributes": st.dictionaries(TEXT, JSON_VALUES, max_size=3), "palette": st.lists(COLORS, max_size=3),
})


def zoo_built(topic: TableSpec, drawn: dict):
    """A Zoo message with the drawn fields set, through the protobuf library."""
    message = message_class(topic)()
    for name, value in drawn.items():
        if name in ("occurred_at",):
            _timestamp(message.occurred_at, value)
        elif name == "first_item":
            _item(message.first_item, value)
        elif name == "items":
            for item in value:
                _item(message.items.add(), item)
        elif name == "by_slot":
            for slot, item in value.items():
                _item(message.by_slot[slot], item)
        elif name in ("counts", "by_flag"):
            getattr(message, name).update(value)
        elif name in ("scores", "palette"):
            getattr(message, name).extend(value)
        elif name == "payment":
            member, chosen = value
            if member == "voucher":
                message.voucher.currency, message.voucher.units, message.voucher.nanos = chosen
            else:
                setattr(message, member, chosen)
        elif name in ("coupon", "limit", "huge", "gift", "discount"):
            getattr(message, name).value = value
        elif name == "total":
            message.total.currency, message.total.units, message.total.nanos = value
        elif name == "seen_at":
            for moment in value:
                _timestamp(message.seen_at.add(), moment)
        elif name == "attributes":
            message.attributes.update(value)
        else:
            setattr(message, name, value)
    return message


@SETTINGS
@given(drawn=st.lists(ZOO_FIELDS, min_size=1, max_size=10))
def test_given_random_messages_of_every_type_when_decoded_both_ways_then_every_value_is_equal(flat, drawn):
    values = [framed(flat, zoo_built(flat, fields)) for fields in drawn]

    columnar, reference, left = decode_both(flat, values)

    assert_same(columnar, reference)
    # Only what the record path refuses, or an event time it must place, is left to it.
    assert not set(left) & {offset for offset, fields in enumerate(drawn) if lands(fields)}


def lands(fields: dict) -> bool:
    """Whether a drawn message has an event time and every Timestamp inside the years 1..9999 (some others do too)."""
    times = [fields["occurred_at"]] if "occurred_at" in fields else []
    return bool(times) and all(FIRST_SECOND <= seconds <= LAST_SECOND and 0 <= nanos < 10**9
                               for seconds, nanos in times + fields.get("seen_at", []))


CORRUPTIONS = st.one_of(
    st.tuples(st.just("truncate"), st.integers(1, 40)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=6)),
    # Unknown fields of every wire type, which the parser skips; a known number with another wire type; a group that
    # never ends; a length far past the end; a map entry without its key; a repeated double written unpacked.
    st.tuples(st.just("append"), st.sampled_from([
        b"\xf8\x3f\x05", b"\xfa\x3f\x03abc", b"\xfd\x3f\x01\x02\x03\x04", b"\xf9\x3f" + b"\x01" * 8, b"\x08\x96\x01",
        b"\x0d\x01\x02\x03\x04", b"\xfb\x3f", b"\xfb\x3f\xfc\x3f", b"\x0a\xff\xff\xff\xff\x7f", b"\xba\x01\x02\x10\x07",
        b"\xb1\x01" + b"\x00" * 7 + b"\x40"])),
    st.tuples(st.just("flip"), st.integers(0, 500), st.sampled_from([1, 2, 4, 0x40, 0x80, 0xFF])),
    st.tuples(st.just("indexes"), st.sampled_from([b"\x02\x00", b"\x02\x02", b"\x04\x00\x02", b"\x7f", b"\x01"])),
    st.tuples(st.just("replace"), st.binary(max_size=30)),
)


def corrupt(value: bytes, corruption: tuple) -> bytes:
    """The Avro tests' corruptions, and message indexes rewritten: [0] spelled out, another message, a broken count."""
    if corruption[0] == "indexes":
        return value[:5] + corruption[1] + value[6:]
    return corrupt_payload(value, corruption, other_id=b"")


@SETTINGS
@given(drawn=st.lists(ZOO_FIELDS, min_size=2, max_size=10), data=st.data())
def test_given_corrupted_messages_among_good_ones_when_decoded_both_ways_then_the_batches_are_equal(flat, drawn, data):
    values = []
    for fields in drawn:
        fields["occurred_at"] = (1_800_000_000, 5)
        values.append(framed(flat, zoo_built(flat, fields)))
    broken = data.draw(st.sets(st.integers(0, len(values) - 1), min_size=1, max_size=3))
    for index in broken:
        values[index] = corrupt(values[index], data.draw(CORRUPTIONS))

    columnar, reference, left = decode_both(flat, values)

    assert_same(columnar, reference)
    assert set(left) <= broken | {offset for offset, fields in enumerate(drawn) if not lands(fields)}  # only itself


# --- bytes by hand --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("position", [0, 57, 99], ids=["first", "middle", "last"])
def test_given_one_message_the_columns_cannot_gather_then_it_alone_takes_the_record_path(tmp_path, position):
    """A proto2 string that is no UTF-8 parses (proto2 does not check it) but lands as no string column."""
    topic = protobuf_topic(tmp_path, {"v1.proto": PROTO2},
                           [{"version": 1, "file": "v1.proto", "message": "acme.legacy.Reading", "registry_id": 7}],
                           time_partitioning={"source": "kafka_time"})
    Reading = message_class(topic)
    values = [framed(topic, Reading(sensor=f"s{n}", value=n)) for n in range(100)]
    values[position] = b"\x00" + struct.pack(">I", 7) + b"\x00" + b"\x0a\x02\xff\xfe\x10\x05"

    columnar, reference, left = decode_both(topic, values)

    assert_same(columnar, reference)
    assert columnar.rows_count == 99 and sum(columnar.dead_letter_causes.values()) == 1
    assert position in left and len(left) <= SMALLEST_SPLIT


def test_given_proto2_defaults_and_presence_when_decoded_both_ways_then_they_are_equal(tmp_path):
    topic = protobuf_topic(tmp_path, {"v1.proto": PROTO2},
                           [{"version": 1, "file": "v1.proto", "message": "acme.legacy.Reading", "registry_id": 7}],
                           time_partitioning={"source": "kafka_time"})
    Reading = message_class(topic)
    values = [framed(topic, Reading(value=1)), framed(topic, Reading(value=2, level=7, sensor="")),
              framed(topic, Reading(value=3, level=0))]

    columnar, reference, left = decode_both(topic, values)

    assert_same(columnar, reference)
    assert not left
    assert [row["level"] for table in columnar.rows.values() for row in table.to_pylist()] == [None, 7, 0]


def test_given_message_indexes_spelled_out_or_naming_the_second_message_then_both_paths_land_alike(tmp_path):
    refunds = protobuf_topic(tmp_path, {"v1.proto": ORDERS_V1},
                             [{"version": 1, "file": "v1.proto", "message": "acme.orders.Refund", "registry_id": 3001}])
    refund = message_class(refunds)(order_id="r-1")
    refund.placed_at.seconds = 1_800_000_000
    orders_table = orders(tmp_path / "o")
    spelled_out = b"\x00" + struct.pack(">I", 3001) + b"\x02\x00" + order(orders_table).SerializeToString()

    columnar, reference, left = decode_both(refunds, [framed(refunds, refund)] * 3)
    assert_same(columnar, reference)
    assert not left and columnar.rows_count == 3

    columnar, reference, left = decode_both(orders_table, [framed(orders_table, order(orders_table)), spelled_out])
    assert_same(columnar, reference)
    assert columnar.rows_count == 2
    assert left == [1]  # [0] spelled out as a count and an index: the record path reads what producers rarely write


def test_given_a_proto_key_when_decoded_both_ways_then_the_key_columns_are_equal(tmp_path):
    key_proto = 'syntax = "proto3";\npackage acme.orders;\nmessage OrderKey { string id = 1; int32 shard = 2; }'
    (tmp_path / "shop" / "orders").mkdir(parents=True)
    (tmp_path / "shop" / "orders" / "key.proto").write_text(key_proto)
    topic = orders(tmp_path, key_schema="key.proto")
    key_class = topic.key_schema.parsed.message_class
    values = [framed(topic, order(topic, id=f"o-{n}")) for n in range(5)]
    columnar, reference = decoders(topic)
    records = [record.__class__(record.partition, record.offset, record.timestamp_ms,
                                encode_protobuf(3001, [0], key_class(id=f"o-{n}", shard=n)), record.value)
               for n, record in enumerate(records_of(values))]

    assert_same(columnar.decode(records), reference.decode(records))
    assert list(columnar._keys.decoding_paths.values()) == ["columnar"]  # the keys too are read as columns


# --- where a message recurs, and what real producers send ---------------------------------------------------------

TREES = st.recursive(st.fixed_dictionaries({"label": TEXT}),
                     lambda inner: st.fixed_dictionaries({"label": TEXT, "children": st.lists(inner, max_size=3)}),
                     max_leaves=8)


def _tree(target, drawn: dict) -> None:
    target.label = drawn["label"]
    for child in drawn.get("children", []):
        _tree(target.children.add(), child)


@pytest.fixture(scope="module")
def full_zoo(tmp_path_factory) -> TableSpec:
    return zoo(tmp_path_factory.mktemp("zoo"))


@SETTINGS
@given(drawn=st.lists(st.tuples(ZOO_FIELDS, st.one_of(st.none(), TREES)), min_size=1, max_size=8))
def test_given_messages_holding_a_recursive_tree_when_decoded_both_ways_then_its_json_text_is_equal(full_zoo, drawn):
    values = []
    for fields, tree in drawn:
        message = zoo_built(full_zoo, fields)
        if tree is not None:
            _tree(message.tree, tree)
        values.append(framed(full_zoo, message))

    columnar, reference, left = decode_both(full_zoo, values)

    assert_same(columnar, reference)
    assert not set(left) & {offset for offset, (fields, _) in enumerate(drawn) if lands(fields)}


def test_given_a_tree_nested_past_the_parsers_depth_then_both_paths_make_it_the_same_dead_letter(full_zoo):
    """The runtime parses 100 messages deep (and JSON text holds 100 levels, a node's object and its list of children
    two): a tree of 30 lands, one of 120 is a dead letter either way."""
    values = []
    for depth in (30, 120):
        message = zoo_built(full_zoo, {"occurred_at": (1_800_000_000, 0)})
        node = message.tree
        for _ in range(depth):
            node = node.children.add()
        values.append(framed(full_zoo, message))

    columnar, reference, _ = decode_both(full_zoo, values)

    assert_same(columnar, reference)
    assert columnar.rows_count == 1 and sum(columnar.dead_letter_causes.values()) == 1


@pytest.mark.parametrize("seed", range(4))
def test_given_otel_spans_of_every_kind_when_decoded_both_ways_then_every_value_is_equal(tmp_path, seed):
    """Spans with recursive AnyValues (lists and key-value lists in lists), Struct, Any, Duration, wrappers, a map, a
    oneof, enums with numbers they lack and uint64s up to 2^64 - 1, as the protobuf library writes them."""
    topic = otel_topic(tmp_path)
    rng = random.Random(seed)
    span_class = topic.version(1).parsed.message_class
    values = [framed(topic, random_span(span_class, rng, n)) for n in range(150)]

    columnar, reference, left = decode_both(topic, values)

    assert_same(columnar, reference)
    assert columnar.rows_count == len(values) and not left


def test_given_fields_written_twice_or_packed_both_ways_then_the_record_path_reads_what_the_columns_cannot_vouch_for(
        flat):
    """Encodings no serializer writes by default but parsers take: a singular field twice (the last counts), two members
    of a oneof, a map key twice, a sub-message twice (merged); and a repeated double both packed and not (read as
    columns)."""
    base = zoo_built(flat, {"occurred_at": (1_800_000_000, 0), "name": "a", "payment": ("card", "x"), "counts": {"k": 1},
                            "total": ("EUR", 1, 2)})
    good = framed(flat, base)
    twice = {
        "name": b"\x7a\x01b",  # field 15 again
        "oneof": b"\xd8\x01\x05",  # account (27) after card (26)
        "map key": b"\xba\x01\x05\x0a\x01k\x10\x02",  # counts {"k": 2} again
        "message": b"\x92\x02\x03\x0a\x01U",  # total (34) again: merged, currency replaced
    }
    values = [good] + [good + extra for extra in twice.values()]
    values.append(good + b"\xb1\x01" + struct.pack("<d", 2.5) + b"\xb2\x01\x08" + struct.pack("<d", 3.5))

    columnar, reference, left = decode_both(flat, values)

    assert_same(columnar, reference)
    assert columnar.rows_count == len(values)
    assert sorted(left) == [1, 2, 3, 4]  # the packed and unpacked scores were read as columns


def test_given_structs_nested_around_the_parsers_depth_then_both_paths_land_and_refuse_the_same(flat):
    """A Struct holds Structs (each level three messages deep: Struct, its map entry, Value): near the runtime's limit
    of 100 the record path's parse of the whole message refuses what a parse of the Struct alone would take."""
    values = []
    for levels in range(29, 34):  # at 31 the Struct alone parses and the message holding it does not
        message = zoo_built(flat, {"occurred_at": (1_800_000_000, 0)})
        nested: dict = {"leaf": [[[]]]}
        for _ in range(levels):
            nested = {"inner": nested}
        message.attributes.update(nested)
        values.append(framed(flat, message))

    columnar, reference, _ = decode_both(flat, values)

    assert_same(columnar, reference)
    assert 0 < columnar.rows_count < len(values)
