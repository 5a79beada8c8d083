"""Protobuf values (`format: protobuf`): `.proto` files compiled at load into the Avro shape every column follows
from, messages in Confluent's framing with message indexes (built by the protobuf library and by hand from the wire
format), every field path of the catalog, the schema registry's PROTOBUF schemas, and bad input as dead letters or
load errors naming the file.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import struct
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.decoding.decoded_batch import DecodedBatch
from kafka_lake.decoding.formats import payload_format
from kafka_lake.decoding.protobuf.wire import encode_protobuf, message_indexes_bytes, read_message_indexes
from kafka_lake.kafka.records import KafkaRecord
from kafka_lake.kafka.schema_resolution import CatalogSchemas
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import CatalogError, load_catalog, load_topic
from tests.registry_stand_in import Registered, RegistryStandIn
from tests.test_decoding import KAFKA_MS, PII_KEY, dead_letter_rows, hmac_hex

UTC = dt.timezone.utc
ZOO_FILES = Path(__file__).resolve().parent / "protobuf_zoo"
OCCURRED = dt.datetime(2026, 11, 1, 12, 15, 30, 123456, tzinfo=UTC)
ORDERS_V1 = """
syntax = "proto3";
package acme.orders;
import "google/protobuf/timestamp.proto";

message Order {
  string id = 1;
  google.protobuf.Timestamp placed_at = 2;
  string customer = 3;
  int64 cents = 4;
}
message Refund {
  string order_id = 1;
  google.protobuf.Timestamp placed_at = 2;
}
"""


def protobuf_topic(root: Path, files: dict[str, str], versions: list[dict], *, folder: str = "shop/orders",
                   **keys) -> TableSpec:
    """A protobuf table written to `root/<folder>`: its files, and a topic.yaml with `versions` and `keys`."""
    path = root / folder
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    document = {"topic": "acme.orders", "owner": "team-test", "format": "protobuf", "start_hour": "2026-11-01T00:00Z",
                "time_partitioning": {"source": "event_time", "field": "placed_at"}, "schema_versions": versions,
                **keys}
    (path / "topic.yaml").write_text(json.dumps(document))
    return load_topic(path / "topic.yaml")


def orders(root: Path, **keys) -> TableSpec:
    return protobuf_topic(root, {"v1.proto": ORDERS_V1},
                          [{"version": 1, "file": "v1.proto", "message": "acme.orders.Order", "registry_id": 3001}],
                          **keys)


def zoo(root: Path, **keys) -> TableSpec:
    folder = root / "test" / "zoo"
    shutil.copytree(ZOO_FILES, folder)
    return protobuf_topic(root, {}, [{"version": 1, "file": "zoo.proto", "message": "test.zoo.Zoo", "registry_id": 41}],
                          folder="test/zoo", **{"time_partitioning": {"source": "event_time", "field": "occurred_at"},
                                                **keys})


def message_class(topic: TableSpec, name: str | None = None, version: int = 1):
    compiled = topic.version(version).parsed
    if name is None:
        return compiled.message_class
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(compiled.message.file.pool.FindMessageTypeByName(name))


def framed(topic: TableSpec, message, version: int = 1) -> bytes:
    compiled = topic.version(version).parsed
    return encode_protobuf(topic.version(version).registry_id, compiled.indexes_of(message.DESCRIPTOR), message)


def records(values: list[bytes | None], key: bytes | None = None) -> list[KafkaRecord]:
    return [KafkaRecord(0, offset, KAFKA_MS + offset, key if key is not None else b"k%d" % offset, value)
            for offset, value in enumerate(values)]


def decode(topic: TableSpec, values: list[bytes | None], columnar: bool = True, key: bytes | None = None) -> DecodedBatch:
    return BatchDecoder(topic, CatalogSchemas(topic), PII_KEY, columnar=columnar).decode(records(values, key))


def rows(batch: DecodedBatch) -> list[dict]:
    return [row for table in batch.rows.values() for row in table.to_pylist()]


def order(topic: TableSpec, **fields):
    message = message_class(topic)(id=fields.pop("id", "o-1"), customer=fields.pop("customer", "c-7"),
                                   cents=fields.pop("cents", 1250))
    message.placed_at.FromDatetime(fields.pop("placed_at", OCCURRED))
    assert not fields
    return message


# --- the wire format, by hand --------------------------------------------------------------------------------------


def varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _key(field_number: int, wire_type: int) -> bytes:
    return varint(field_number << 3 | wire_type)


def _length_delimited(field_number: int, data: bytes) -> bytes:
    return _key(field_number, 2) + varint(len(data)) + data


def hand_built_order(order_id: str, seconds: int, nanos: int, customer: str, cents: int) -> bytes:
    """An acme.orders.Order written field by field from the Protobuf encoding rules, no protobuf library involved."""
    timestamp = _key(1, 0) + varint(seconds) + _key(2, 0) + varint(nanos)
    return (_length_delimited(1, order_id.encode()) + _length_delimited(2, timestamp)
            + _length_delimited(3, customer.encode()) + _key(4, 0) + varint(cents))


def test_given_message_indexes_then_they_read_and_write_as_confluent_frames_them():
    assert message_indexes_bytes([0]) == b"\x00"  # the first message: one zero byte, no count
    assert message_indexes_bytes([1]) == b"\x02\x02"  # count 1, index 1, both zigzag varints
    assert message_indexes_bytes([0, 2]) == b"\x04\x00\x04"
    assert read_message_indexes(b"\x00rest") == ([0], 1)
    assert read_message_indexes(b"\x02\x02rest") == ([1], 2)
    assert read_message_indexes(b"\x04\x00\x04rest") == ([0, 2], 3)
    assert read_message_indexes(b"\x02\x80\x01") == ([64], 3)  # zigzag 128 is 64, two varint bytes


def test_given_an_order_built_by_hand_from_the_wire_format_when_decoded_then_it_lands_as_the_library_builds_it(tmp_path):
    topic = orders(tmp_path)
    seconds = int(OCCURRED.timestamp())
    by_hand = b"\x00" + struct.pack(">I", 3001) + b"\x00" + hand_built_order("o-9", seconds, 123456789, "c-1", 77)
    by_library = framed(topic, order(topic, id="o-9", customer="c-1", cents=77,
                                     placed_at=OCCURRED.replace(microsecond=123456)))
    by_library_message = message_class(topic).FromString(by_library[6:])
    by_library_message.placed_at.nanos = 123456789

    [by_hand_row] = rows(decode(topic, [by_hand]))
    [library_row] = rows(decode(topic, [by_library[:6] + by_library_message.SerializeToString()]))

    expected = {"id": "o-9", "placed_at": OCCURRED.replace(microsecond=123456), "customer": "c-1", "cents": 77}
    assert {name: by_hand_row[name] for name in expected} == expected  # nanoseconds cut to microseconds
    assert {name: library_row[name] for name in expected} == expected


def test_given_the_second_message_of_the_file_named_by_its_index_when_its_table_decodes_then_it_lands(tmp_path):
    topic = protobuf_topic(tmp_path, {"v1.proto": ORDERS_V1},
                           [{"version": 1, "file": "v1.proto", "message": "acme.orders.Refund", "registry_id": 3001}])
    refund = message_class(topic)(order_id="o-1")
    refund.placed_at.FromDatetime(OCCURRED)
    by_hand = b"\x00" + struct.pack(">I", 3001) + b"\x02\x02" + refund.SerializeToString()

    batch = decode(topic, [by_hand, framed(topic, refund)])

    assert [row["order_id"] for row in rows(batch)] == ["o-1", "o-1"]
    assert topic.version(1).parsed.indexes_of(refund.DESCRIPTOR) == [1]


# --- what lands for each type ------------------------------------------------------------------------------------------


def zoo_message(topic: TableSpec):
    Zoo = message_class(topic)
    message = Zoo(precise=2.5, ratio=0.25, small=-7, big=-(2**40), unsigned_small=2**32 - 1, unsigned_big=2**64 - 1,
                  zig_small=-3, zig_big=-(2**62), fixed_small=7, fixed_big=2**63, sfixed_small=-8, sfixed_big=-9,
                  flag=True, name="zoë", raw=b"\x00\xff", color=Zoo.Color.BLUE, user_id="user-7",
                  scores=[1.5, -0.5], palette=[Zoo.Color.GREEN, 9])
    message.occurred_at.FromDatetime(OCCURRED)
    message.first_item.sku = "sku-1"
    message.first_item.packed_ids.extend([1, 2, 3])
    item = message.items.add(sku="sku-2", qty=3, tags=["a", "b"])
    item.packed_ids.append(-1)
    message.counts["b"] = 2
    message.counts["a"] = 1
    message.by_slot[10].sku = "ten"
    message.by_slot[-2].sku = "minus two"
    message.by_flag[True] = "yes"
    message.voucher.currency = "EUR"
    message.voucher.units = 5
    message.coupon.value = ""
    message.huge.value = 2**64 - 1
    message.total.currency = "USD"
    message.seen_at.add().FromDatetime(OCCURRED)
    message.attributes.update({"size": "XL", "count": 2})
    message.tree.label = "root"
    message.tree.children.add(label="leaf")
    return message


def test_given_a_message_of_every_type_when_decoded_then_each_lands_as_the_mapping_says(tmp_path):
    topic = zoo(tmp_path)
    batch = decode(topic, [framed(topic, zoo_message(topic))], columnar=False)

    [row] = rows(batch)
    schema = next(iter(batch.rows.values())).schema
    assert row["occurred_at"] == OCCURRED and schema.field("occurred_at").type == pa.timestamp("us", tz="UTC")
    assert (row["precise"], row["ratio"], row["small"], row["big"]) == (2.5, 0.25, -7, -(2**40))
    assert row["unsigned_small"] == 2**32 - 1 and schema.field("unsigned_small").type == pa.int64()
    assert row["unsigned_big"] == Decimal(2**64 - 1) and schema.field("unsigned_big").type == pa.decimal128(20, 0)
    assert row["fixed_big"] == Decimal(2**63) and row["fixed_small"] == 7
    assert (row["zig_small"], row["zig_big"], row["sfixed_small"], row["sfixed_big"]) == (-3, -(2**62), -8, -9)
    assert (row["flag"], row["name"], row["raw"], row["color"]) == (True, "zoë", b"\x00\xff", "BLUE")
    assert row["palette"] == ["GREEN", "9"]  # a number the enum lacks lands as its decimal text
    assert (row["user_id"], row["maybe"]) == ("user-7", None)  # optional: null when absent
    assert row["first_item"] == {"sku": "sku-1", "qty": 0, "packed_ids": [1, 2, 3], "tags": []}
    assert row["items"] == [{"sku": "sku-2", "qty": 3, "packed_ids": [-1], "tags": ["a", "b"]}]
    assert row["scores"] == [1.5, -0.5]
    assert row["counts"] == [("a", 1), ("b", 2)]  # entries in key order
    assert [key for key, _ in row["by_slot"]] == ["-2", "10"]  # int keys as their decimal text, in number order
    assert row["by_flag"] == [("true", "yes")]
    assert row["payment"] == {"card": None, "account": None, "voucher": {"currency": "EUR", "units": 5, "nanos": 0}}
    assert row["coupon"] == "" and row["limit"] is None  # a wrapper set to its default is not null
    assert row["huge"] == Decimal(2**64 - 1) and row["gift"] is None and row["discount"] is None
    assert row["total"] == {"currency": "USD", "units": 0, "nanos": 0}
    assert row["seen_at"] == [OCCURRED]
    assert json.loads(row["attributes"]) == {"size": "XL", "count": 2}
    # A message that contains itself: the field where it recurs lands as JSON text, as a recursive Avro record does.
    assert row["tree"] == {"label": "root", "children": '[{"children":[],"label":"leaf"}]'}


def test_given_a_message_with_nothing_set_when_decoded_then_scalars_land_their_default_and_messages_null(tmp_path):
    topic = zoo(tmp_path, time_partitioning={"source": "kafka_time"})

    [row] = rows(decode(topic, [framed(topic, message_class(topic)())], columnar=False))

    assert (row["small"], row["name"], row["flag"], row["raw"], row["color"]) == (0, "", False, b"", "RED")
    assert row["unsigned_big"] == Decimal(0)
    for nullable in ("occurred_at", "user_id", "maybe", "first_item", "payment", "coupon", "total", "attributes"):
        assert row[nullable] is None, nullable
    assert (row["items"], row["counts"], row["seen_at"]) == ([], [], [])


# --- dead letters --------------------------------------------------------------------------------------------------------


def test_given_broken_values_when_decoded_then_each_is_a_dead_letter_with_its_cause_and_the_good_one_lands(tmp_path):
    topic = orders(tmp_path)
    good = framed(topic, order(topic))
    header = good[:5]
    refund = message_class(topic, "acme.orders.Refund")(order_id="r-1")
    values = [
        good,
        b"\x00" + struct.pack(">I", 4444) + good[5:],  # a schema id the catalog lacks
        header + b"\x02\x0a" + good[6:],  # message index 5: the file has two messages
        header + b"\x02\x02" + refund.SerializeToString(),  # the file's other message, which this table does not land
        header + b"\x00" + b"\x0a\xff\xff\xff\xff\x0f",  # a length prefix far past the end
        header + b"\x7f",  # a message index count past any nesting
        header,  # no message indexes at all
        b"\x01" + good[1:],  # wrong magic byte
    ]

    batch = decode(topic, values)

    assert len(rows(batch)) == 1 and batch.rows_count == 1
    assert batch.dead_letter_causes == {"unknown_schema_id": 1, "unknown_message_index": 2,
                                        "undecodable_payload": 3, "bad_magic_byte": 1}
    errors = {row["_kafka_offset"]: row["error"] for row in dead_letter_rows(batch)}
    assert "schema id 4444 is no registry_id of topic acme.orders" in errors[1]
    assert "message indexes [5] of schema id 3001 (version 1, v1.proto) name no message of v1.proto" in errors[2]
    assert "name acme.orders.Refund, but the version lands acme.orders.Order" in errors[3]
    assert "does not parse as acme.orders.Order" in errors[4]
    assert "ends inside its message indexes" in errors[6]


def test_given_a_timestamp_past_the_year_9999_when_decoded_then_it_is_a_dead_letter_naming_the_message(tmp_path):
    topic = orders(tmp_path, time_partitioning={"source": "kafka_time"})
    message = order(topic)
    message.placed_at.seconds = 300_000_000_000  # year ~11476

    batch = decode(topic, [framed(topic, message)])

    [dead] = dead_letter_rows(batch)
    assert dead["error"].startswith("undecodable_payload: schema id 3001 (version 1, v1.proto): a value of "
                                    "acme.orders.Order cannot land")


def test_given_an_absent_event_time_when_decoded_then_it_is_a_missing_event_time_dead_letter(tmp_path):
    topic = orders(tmp_path)
    message = message_class(topic)(id="o-1")

    batch = decode(topic, [framed(topic, message)])

    assert batch.dead_letter_causes == {"missing_event_time": 1}


# --- load errors, naming the file ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("files, version, expected", [
    ({"v1.proto": 'syntax = "proto3";\nmessage Order { strin id = 1; }'}, {"message": "Order"},
     r'v1\.proto: does not compile: v1\.proto:2:17: "strin" is not defined'),
    ({"v1.proto": ORDERS_V1}, {"message": "acme.orders.Missing"},
     r"v1\.proto: has no message 'acme\.orders\.Missing' \(its messages: acme\.orders\.Order, acme\.orders\.Refund\)"),
    ({"v1.proto": ORDERS_V1}, {"message": "Order"}, r"has no message 'Order'.*by its full name, package included"),
    ({"v1.proto": 'syntax = "proto3";\nimport "../elsewhere.proto";\nmessage A { int32 x = 1; }'}, {"message": "A"},
     r"v1\.proto: (does not compile|imports '\.\./elsewhere\.proto')"),
    ({"v1.proto": 'syntax = "proto3";\nimport "common.proto";\nmessage A { M m = 1; }',
      "common.proto": 'syntax = "proto3";\nmessage M { int32 x = 1; }'}, {"message": "M"},
     r"message 'M' is defined in common\.proto, which it imports"),
    ({"v1.proto": 'syntax = "proto3";\nmessage Empty {}\nmessage A { Empty e = 1; }'}, {"message": "A"},
     r"v1\.proto: message Empty has no fields, so no column to land as"),
    ({"v1.proto": ORDERS_V1}, {}, r"schema_versions\[0\]\.message is required for format protobuf"),
])
def test_given_a_broken_proto_or_message_when_loaded_then_it_fails_naming_the_file(tmp_path, files, version, expected):
    (tmp_path / "elsewhere.proto").write_text('syntax = "proto3";\nmessage E { int32 x = 1; }')
    with pytest.raises(CatalogError, match=expected):
        protobuf_topic(tmp_path, files, [{"version": 1, "file": "v1.proto", "registry_id": 3001, **version}])


@pytest.mark.parametrize("change, expected", [
    ("int64 cents = 4;", "string cents = 4;",),
    ("int64 cents = 4;", "int64 amount = 4;",),
])
def test_given_a_field_number_whose_type_or_name_changed_when_loaded_then_it_fails_naming_both_files(
        tmp_path, change, expected):
    v2 = ORDERS_V1.replace(change, expected)
    with pytest.raises(CatalogError, match=r"version 2 \(v2\.proto\) is not a compatible evolution of version 1 "
                                           r"\(v1\.proto\): field number 4 of acme\.orders\.Order( \(cents\))? was"):
        protobuf_topic(tmp_path, {"v1.proto": ORDERS_V1, "v2.proto": v2}, [
            {"version": 1, "file": "v1.proto", "message": "acme.orders.Order", "registry_id": 3001},
            {"version": 2, "file": "v2.proto", "message": "acme.orders.Order", "registry_id": 3002}])


def test_given_a_version_adding_a_field_when_both_versions_decode_then_each_lands_with_its_columns(tmp_path):
    v2 = ORDERS_V1.replace("int64 cents = 4;", "int64 cents = 4;\n  repeated string tags = 5;")
    topic = protobuf_topic(tmp_path, {"v1.proto": ORDERS_V1, "v2.proto": v2}, [
        {"version": 1, "file": "v1.proto", "message": "acme.orders.Order", "registry_id": 3001},
        {"version": 2, "file": "v2.proto", "message": "acme.orders.Order", "registry_id": 3002}])
    newer = message_class(topic, version=2)(id="o-2", tags=["x"])
    newer.placed_at.FromDatetime(OCCURRED)

    batch = decode(topic, [framed(topic, order(topic)), framed(topic, newer, version=2)])

    assert sorted(placement.schema_version for placement in batch.rows) == [1, 2]
    assert [row.get("tags") for row in rows(batch)] == [None, ["x"]]


def test_given_message_on_an_avro_version_when_loaded_then_it_is_refused(tmp_path):
    folder = tmp_path / "shop" / "views"
    folder.mkdir(parents=True)
    (folder / "v1.avsc").write_text(json.dumps({"type": "record", "name": "V", "fields": [{"name": "x", "type": "int"}]}))
    (folder / "topic.yaml").write_text(json.dumps({
        "topic": "shop.views", "owner": "o", "start_hour": "2026-11-01T00:00Z",
        "time_partitioning": {"source": "kafka_time"},
        "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": 1, "message": "V"}]}))

    with pytest.raises(CatalogError, match=r"message is for formats whose files hold several messages \(protobuf\)"):
        load_topic(folder / "topic.yaml")


# --- every key that names a field ------------------------------------------------------------------------------------


def test_given_pii_rename_and_subject_field_when_decoded_then_they_apply_to_protobuf_fields(tmp_path):
    topic = orders(tmp_path, pii_fields=["customer"], subject_field="customer", rename={"id": "order_id"})
    [row] = rows(decode(topic, [framed(topic, order(topic))]))

    assert row["customer"] == hmac_hex("c-7") and row["order_id"] == "o-1" and "id" not in row


def test_given_a_proto_key_schema_when_decoded_then_the_key_lands_as_its_columns(tmp_path):
    key_proto = 'syntax = "proto3";\npackage acme.orders;\nmessage OrderKey { string id = 1; int32 shard = 2; }'
    (tmp_path / "shop" / "orders").mkdir(parents=True)
    (tmp_path / "shop" / "orders" / "key.proto").write_text(key_proto)
    topic = orders(tmp_path, key_schema="key.proto")
    compiled = topic.key_schema.parsed
    key = encode_protobuf(3001, [0], compiled.message_class(id="o-1", shard=3))

    [row] = rows(decode(topic, [framed(topic, order(topic))], key=key))

    assert (row["_kafka_key_id"], row["_kafka_key_shard"]) == ("o-1", 3)


def test_given_one_file_with_two_messages_routed_by_record_name_then_each_table_takes_its_message(tmp_path):
    def table(name: str, message: str) -> TableSpec:
        return protobuf_topic(tmp_path, {"v1.proto": ORDERS_V1},
                              [{"version": 1, "file": "v1.proto", "message": message, "registry_id": 3001}],
                              folder=f"shop/{name}", route={"field": "record_name", "equals": message})

    table("orders", "acme.orders.Order")
    table("refunds", "acme.orders.Refund")
    catalog = load_catalog(tmp_path)
    orders_table, refunds_table = catalog.by_name("shop", "orders"), catalog.by_name("shop", "refunds")
    refund = message_class(refunds_table)(order_id="o-1")
    refund.placed_at.FromDatetime(OCCURRED)
    values = [framed(orders_table, order(orders_table)), framed(refunds_table, refund)]

    landed_orders, landed_refunds = decode(orders_table, values), decode(refunds_table, values)

    assert [row["id"] for row in rows(landed_orders)] == ["o-1"] and landed_orders.routed_away == 1
    assert [row["order_id"] for row in rows(landed_refunds)] == ["o-1"] and landed_refunds.routed_away == 1


def test_given_a_route_by_an_enum_field_when_decoded_then_its_symbol_routes(tmp_path):
    proto = ORDERS_V1.replace("int64 cents = 4;", "int64 cents = 4;\n  enum Kind { SALE = 0; RETURN = 1; }\n  Kind kind = 5;")
    topic = protobuf_topic(tmp_path, {"v1.proto": proto},
                           [{"version": 1, "file": "v1.proto", "message": "acme.orders.Order", "registry_id": 3001}],
                           route={"field": "kind", "equals": "RETURN"})
    sale, returned = order(topic), order(topic, id="o-2")
    returned.kind = 1

    batch = decode(topic, [framed(topic, sale), framed(topic, returned)])

    assert [row["id"] for row in rows(batch)] == ["o-2"]


# --- the schema registry's PROTOBUF schemas -----------------------------------------------------------------------------


def test_given_a_registry_when_ids_resolve_then_protobuf_schemas_match_by_their_compiled_form(tmp_path):
    common = 'syntax = "proto3";\npackage acme.common;\nmessage Money { string currency = 1; int64 units = 2; }'
    v1 = ORDERS_V1.replace('import "google/protobuf/timestamp.proto";',
                           'import "google/protobuf/timestamp.proto";\nimport "common.proto";').replace(
        "int64 cents = 4;", "acme.common.Money total = 4;")
    topic = protobuf_topic(tmp_path, {"v1.proto": v1, "common.proto": common},
                           [{"version": 1, "file": "v1.proto", "message": "acme.orders.Order", "registry_id": 3001}])
    reference = (json.dumps({"name": "common.proto", "subject": "common", "version": 1}, sort_keys=True),)
    reformatted = "// registered by the producer\n" + v1.replace("\n", "\n\n")
    with RegistryStandIn() as server:  # Confluent Schema Registry cannot run here: a stand-in speaking its REST API
        server.register("common", Registered(common, "PROTOBUF"))
        server.by_id[77] = Registered(reformatted, "PROTOBUF", reference)
        server.by_id[78] = Registered(v1.replace("string customer = 3;", "string buyer = 3;"), "PROTOBUF", reference)
        server.by_id[79] = Registered(json.dumps({"type": "record", "name": "A", "fields": []}), "AVRO")
        schemas = payload_format(topic).schemas(topic, server.url)
        message = order_with_total(topic)
        decoder = BatchDecoder(topic, schemas, PII_KEY)

        batch = decoder.decode(records([encode_protobuf(77, [0], message), encode_protobuf(78, [0], message),
                                        encode_protobuf(79, [0], message), encode_protobuf(80, [0], message)]))

    assert [row["id"] for row in rows(batch)] == ["o-1"]
    errors = sorted(row["error"] for row in dead_letter_rows(batch))
    assert "schema id 78 in the schema registry" in errors[0] and "none of the catalog's schema versions" in errors[0]
    assert "schema id 79 in the schema registry" in errors[1] and "is a AVRO schema, not Protobuf" in errors[1]
    assert "schema id 80 is not known to the schema registry" in errors[2]


def order_with_total(topic: TableSpec):
    message = message_class(topic)(id="o-1", customer="c-7")
    message.placed_at.FromDatetime(OCCURRED)
    message.total.currency = "EUR"
    return message
