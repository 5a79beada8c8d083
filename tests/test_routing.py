"""Routing a shared topic's records to its tables, in the core alone (no broker, no Spark): by the Avro record's full
name (several record types in one topic), by an Avro field, by a JSON field read as columns or record by record.
Each table decodes only its own records; one that no table takes is unrouted, and only the first routed table keeps it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import fastavro
import pytest

from kafka_lake.decoding.batch_decoder import BatchDecoder
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.kafka.records import KafkaRecord
from kafka_lake.kafka.schema_resolution import CatalogSchemas
from kafka_lake.lake.landing_checks import counts_balance, dead_letter_rate
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import HourManifest, PartitionLanding
from kafka_lake.topics.loader import load_catalog

KAFKA_MS = 1_793_538_000_000
ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "kind", "type": "string"}, {"name": "id", "type": "long"}]}
REFUND = {"type": "record", "name": "Refund", "namespace": "shop", "fields": [
    {"name": "kind", "type": "string"}, {"name": "amount", "type": "int"}]}


def write(root: Path, name: str, schema: dict, registry_id: int, **keys) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "v1.avsc").write_text(json.dumps(schema))
    (folder / "topic.yaml").write_text(json.dumps({
        "topic": "shop.mixed", "owner": "team-test", "start_hour": "2026-11-01T00:00Z",
        "time_partitioning": {"source": "kafka_time"},
        "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": registry_id}], **keys}))


def decoded(catalog, name: str, values: list[bytes | None]):
    table = catalog.by_name(*name.split("/"))
    records = [KafkaRecord(0, offset, KAFKA_MS + offset, None, value) for offset, value in enumerate(values)]
    return BatchDecoder(table, CatalogSchemas(table), None, columnar=True).decode(records)


def offsets(batch) -> list[int]:
    return sorted(o for table in batch.rows.values() for o in table.column("_kafka_offset").to_pylist())


def unrouted(batch) -> list[tuple[int, str]]:
    return sorted((row["_kafka_offset"], row["error"]) for table in batch.unrouted.values() for row in table.to_pylist())


def test_given_record_types_routed_by_full_name_then_each_table_decodes_its_own_and_the_first_keeps_the_unknown(tmp_path):
    write(tmp_path, "shop/orders", ORDER, 11, route={"field": "record_name", "equals": "shop.Order"})
    write(tmp_path, "shop/refunds", REFUND, 12, route={"field": "record_name", "equals": "shop.Refund"})
    catalog = load_catalog(tmp_path)
    order, refund = (fastavro.parse_schema(s) for s in (ORDER, REFUND))
    values = [encode_confluent(11, order, {"kind": "o", "id": 1}), encode_confluent(12, refund, {"kind": "r", "amount": 5}),
              encode_confluent(99, order, {"kind": "o", "id": 2}), b"\x01garbage", None]

    orders, refunds = decoded(catalog, "shop/orders", values), decoded(catalog, "shop/refunds", values)

    assert (offsets(orders), offsets(refunds)) == ([0], [1])
    assert not orders.dead_letters and not refunds.dead_letters
    assert [o for o, _ in unrouted(orders)] == [2, 3] and unrouted(refunds) == []
    assert "schema id 99 is a version of no table" in unrouted(orders)[0][1]
    assert (orders.routed_away, refunds.routed_away) == (1, 3), "records others take, and unrouted ones the first keeps"
    for batch in (orders, refunds):
        assert batch.rows_count + batch.routed_away + sum(t.num_rows for t in batch.unrouted.values()) \
            + batch.tombstones == batch.records == len(values)


def test_given_an_avro_field_route_then_records_of_one_schema_split_by_its_value(tmp_path):
    write(tmp_path, "shop/orders", ORDER, 11, route={"field": "kind", "equals": "o"})
    write(tmp_path, "shop/others", ORDER, 11, route={"field": "kind", "in": ["x", "y"]})
    catalog = load_catalog(tmp_path)
    order = fastavro.parse_schema(ORDER)
    values = [encode_confluent(11, order, {"kind": kind, "id": i}) for i, kind in enumerate("oxyz")]

    orders, others = decoded(catalog, "shop/orders", values), decoded(catalog, "shop/others", values)

    assert (offsets(orders), offsets(others)) == ([0], [1, 2])
    assert unrouted(orders) == [(3, "unrouted: no table of topic 'shop.mixed' takes kind = 'z'")]


@pytest.mark.parametrize("columnar", [True, False])
def test_a_json_field_route_reads_alike_as_columns_and_record_by_record(tmp_path, columnar):
    write(tmp_path, "shop/orders", ORDER, 11, format="json", route={"field": "kind", "equals": "o"})
    write(tmp_path, "shop/refunds", REFUND, 12, format="json", route={"field": "kind", "equals": "r"})
    catalog = load_catalog(tmp_path)
    framed = b"\x00" + struct.pack(">I", 12) + b'{"kind": "r", "amount": 3}'
    # A route value of the wrong kind, no object, a line break (read record by record): each where it belongs.
    values = [b'{"kind": "o", "id": 1}', framed, b'{"kind": 5, "id": 1}', b'{"kind": "o", "id": "x"}', b"[1]",
              b'{"kind": "o",\n "id": 9}']
    table = catalog.by_name("shop", "orders")
    records = [KafkaRecord(0, offset, KAFKA_MS + offset, None, value) for offset, value in enumerate(values)]
    orders = BatchDecoder(table, CatalogSchemas(table), None, columnar=columnar).decode(records)

    assert offsets(orders) == [0, 5]
    assert [(o, c) for o, c in orders.dead_letter_causes.items()] == [("undecodable_payload", 1)], "id 'x' fits no long"
    assert [o for o, _ in unrouted(orders)] == [2, 4]
    assert orders.routed_away == 1


@pytest.mark.parametrize("columnar", [True, False])
def test_framed_json_with_an_unknown_schema_id_is_a_dead_letter_of_the_table_its_route_names(tmp_path, columnar):
    """A JSON route field is read whatever schema id the framing names: a record whose id no version knows goes to the
    table its route value names, as a dead letter saying which id and which topic.yaml lacks it (so that table's
    dead-letter rate and owner see it, and it lands there once the version is added); only a route value no table
    takes makes it unrouted. On both decode paths."""
    write(tmp_path, "shop/orders", ORDER, 11, format="json", route={"field": "kind", "equals": "o"})
    write(tmp_path, "shop/refunds", REFUND, 12, format="json", route={"field": "kind", "equals": "r"})
    catalog = load_catalog(tmp_path)
    framed = lambda schema_id, text: b"\x00" + struct.pack(">I", schema_id) + text
    values = [framed(11, b'{"kind": "o", "id": 1}'), framed(99, b'{"kind": "o", "id": 2}'),
              framed(99, b'{"kind": "r", "amount": 3}'), framed(99, b'{"kind": "z", "id": 4}')]
    records = [KafkaRecord(0, offset, KAFKA_MS + offset, None, value) for offset, value in enumerate(values)]
    orders, refunds = (BatchDecoder(catalog.by_name("shop", name), CatalogSchemas(catalog.by_name("shop", name)), None,
                                    columnar=columnar).decode(records) for name in ("orders", "refunds"))

    [order_letter] = [row for table in orders.dead_letters.values() for row in table.to_pylist()]
    [refund_letter] = [row for table in refunds.dead_letters.values() for row in table.to_pylist()]
    assert (offsets(orders), order_letter["_kafka_offset"], refund_letter["_kafka_offset"]) == ([0], 1, 2)
    for letter, folder in ((order_letter, "orders"), (refund_letter, "refunds")):
        assert letter["error"].startswith("unknown_schema_id: schema id 99 is no registry_id of topic shop.mixed")
        assert f"shop/{folder}/topic.yaml" in letter["error"]
    assert unrouted(orders) == [(3, 'unrouted: no table of topic \'shop.mixed\' takes kind = "z"')]


@pytest.mark.parametrize("columnar", [True, False])
def test_why_a_json_record_is_unrouted_is_told_in_json(tmp_path, columnar):
    write(tmp_path, "shop/orders", ORDER, 11, format="json", route={"field": "kind", "equals": "o"})
    write(tmp_path, "shop/refunds", REFUND, 12, format="json", route={"field": "kind", "equals": "r"})
    catalog = load_catalog(tmp_path)
    values = [b"null", b'{"kind": {"userid": 4711}}', b'{"kind": true}', b'{"kind": "z"}', b'{"kind": null}', b"{}"]
    table = catalog.by_name("shop", "orders")
    records = [KafkaRecord(0, offset, KAFKA_MS + offset, None, value) for offset, value in enumerate(values)]

    orders = BatchDecoder(table, CatalogSchemas(table), None, columnar=columnar).decode(records)

    assert unrouted(orders) == [
        (0, "unrouted: its route field cannot be read: undecodable_payload: JSON value is JSON null, not an object"),
        (1, 'unrouted: no table of topic \'shop.mixed\' takes kind = {"userid": 4711}'),
        (2, "unrouted: no table of topic 'shop.mixed' takes kind = true"),
        (3, 'unrouted: no table of topic \'shop.mixed\' takes kind = "z"'),
        (4, "unrouted: route field 'kind' is absent or null"),
        (5, "unrouted: route field 'kind' is absent or null"),
    ]


def test_a_json_value_holding_nan_has_one_verdict_in_every_table_of_its_topic(tmp_path):
    """Given a JSON topic routed into a table read as columns and one read record by record (its map), and values
    holding NaN or Infinity, which JSON has not, where no schema looks."""
    with_map = {**ORDER, "fields": [*ORDER["fields"], {"name": "tags", "type": {"type": "map", "values": "string"}}]}
    write(tmp_path, "shop/orders", with_map, 11, format="json", route={"field": "kind", "equals": "o"})
    write(tmp_path, "shop/refunds", REFUND, 12, format="json", route={"field": "kind", "equals": "r"})
    catalog = load_catalog(tmp_path)
    values = [b'{"kind": "r", "amount": 3, "note": NaN}', b'{"kind": "o", "id": 1, "tags": {}, "rate": Infinity}',
              b'{"kind": "r", "amount": 4}']

    orders, refunds = decoded(catalog, "shop/orders", values), decoded(catalog, "shop/refunds", values)

    # Then neither table lands them: each is unrouted, kept once, saying why, whichever table reads it.
    assert (offsets(orders), offsets(refunds)) == ([], [2])
    assert [o for o, _ in unrouted(orders)] == [0, 1] and unrouted(refunds) == []
    assert all("is not JSON" in why for _, why in unrouted(orders)), unrouted(orders)
    assert not orders.dead_letters and not refunds.dead_letters


def test_the_dead_letter_rate_of_a_routed_table_counts_only_the_records_it_took():
    """Given a routed table that took 2 of 10 records and could not decode one; then its rate is 50%, not 10%."""
    counts = LandingCounts(records=10, rows=1, dead_letters=1, routed_away=7, unrouted=1)
    manifest = HourManifest("shop", "orders", "shop.mixed", "2026-11-01-10:00", (PartitionLanding(0, 0, 10, counts),), (), "")

    assert counts_balance(manifest).passed
    outcome = dead_letter_rate(manifest, threshold=0.4)
    assert not outcome.passed and outcome.metadata["rate"] == 0.5


def test_unrouted_dead_letters_expire_with_the_routed_table_that_lands_them(tmp_path):
    """The topic's unrouted dead letters are kept by its first routed table, so that table's retention expires them
    (and only it: the other table would expire them on a retention of its own)."""
    from datetime import datetime, timezone

    from kafka_lake.lake import layout
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.upkeep.expiry import expire_dead_letters

    write(tmp_path / "catalog", "shop/orders", ORDER, 11, route={"field": "record_name", "equals": "shop.Order"},
          dead_letter_retention_days=1)
    write(tmp_path / "catalog", "shop/refunds", REFUND, 12, route={"field": "record_name", "equals": "shop.Refund"},
          dead_letter_retention_days=1)
    catalog = load_catalog(tmp_path / "catalog")
    orders, refunds = catalog.by_name("shop", "orders"), catalog.by_name("shop", "refunds")
    storage = LakeStorage(str(tmp_path / "lake"))
    old, recent = datetime(2026, 11, 1, 3, tzinfo=timezone.utc), datetime(2026, 11, 10, 3, tzinfo=timezone.utc)
    for hour in (old, recent):
        storage.write_bytes(f"{layout.unrouted_directory('shop.mixed', hour)}/shop.mixed+0+0000000000000000000.parquet", b"x")
    now = datetime(2026, 11, 10, 12, tzinfo=timezone.utc)

    assert expire_dead_letters(storage, refunds, now) == [], "not the table that lands them"
    deleted = expire_dead_letters(storage, orders, now)
    assert deleted == [f"{layout.unrouted_directory('shop.mixed', old)}/shop.mixed+0+0000000000000000000.parquet"]
    assert [f.path for f in storage.list_files(layout.unrouted_prefix("shop.mixed"))] == [
        f"{layout.unrouted_directory('shop.mixed', recent)}/shop.mixed+0+0000000000000000000.parquet"]


NESTED = {"type": "record", "name": "Event", "namespace": "shop", "fields": [
    {"name": "meta", "type": ["null", {"type": "record", "name": "Meta", "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["ORDER", "REFUND", "OTHER"]}}]}],
     "default": None},
    {"name": "id", "type": "long"}]}


def test_an_avro_field_route_is_read_from_the_values_decoded_as_columns_not_record_by_record(tmp_path, monkeypatch):
    """Given a route on a nested enum field under a nullable record; when a batch is routed, then good records are
    routed from their columns (fastavro decodes none of them), a null parent leaves the route value absent, and a
    broken payload is unrouted with why."""
    from kafka_lake.decoding.avro.records import AvroRecords

    write(tmp_path, "shop/orders", NESTED, 11, route={"field": "meta.kind", "equals": "ORDER"})
    write(tmp_path, "shop/refunds", NESTED, 11, route={"field": "meta.kind", "equals": "REFUND"})
    catalog = load_catalog(tmp_path)
    event = fastavro.parse_schema(NESTED)
    values = [encode_confluent(11, event, {"meta": {"kind": kind}, "id": i}) for i, kind in enumerate(
        ["ORDER", "REFUND", "ORDER", "OTHER"] * 50)]
    values += [encode_confluent(11, event, {"meta": None, "id": 1000}), values[0][:-1]]
    read_by_fastavro = []
    reading = AvroRecords.read

    def counted(self, payload, schema_id):
        read_by_fastavro.append(bytes(payload))
        return reading(self, payload, schema_id)
    monkeypatch.setattr(AvroRecords, "read", counted)

    orders, refunds = decoded(catalog, "shop/orders", values), decoded(catalog, "shop/refunds", values)

    assert offsets(orders) == sorted([*range(0, 200, 4), *range(2, 200, 4)])
    assert offsets(refunds) == list(range(1, 200, 4))
    assert [offset for offset, _ in unrouted(orders)] == [*range(3, 200, 4), 200, 201] and unrouted(refunds) == []
    errors = dict(unrouted(orders))
    assert errors[3] == "unrouted: no table of topic 'shop.mixed' takes meta.kind = 'OTHER'"
    assert errors[200] == "unrouted: route field 'meta.kind' is absent or null"
    assert errors[201].startswith("unrouted: its route field cannot be read: undecodable_payload: ")
    # The columnar path isolates a broken payload with at most 8 neighbours, which fastavro reads to say why.
    framed = {encode_confluent(11, event, {"meta": {"kind": "ORDER"}, "id": 0})[:5] + p for p in read_by_fastavro}
    assert len(read_by_fastavro) <= 2 * 9 and values[201] in framed
    assert framed <= set(values[201 - 8:]), "no other record was decoded one by one"

