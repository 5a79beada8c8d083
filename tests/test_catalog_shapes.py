"""Topic shapes in the catalog: formats, routes, copies placed otherwise, keys, tombstones, the archive rule.

Several folders may name one Kafka topic when no record could land twice in the same way; every ambiguous pair is
refused at load naming both files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_lake.topics.loader import CatalogError, archived_table_name, load_catalog, load_topic

CART_OPEN = {"type": "record", "name": "CartOpen", "namespace": "shop.events", "fields": [
    {"name": "type", "type": "string"}, {"name": "ts", "type": "long"}, {"name": "cart_id", "type": "string"}]}
TAP = {"type": "record", "name": "Tap", "namespace": "shop.events", "fields": [
    {"name": "type", "type": "string"}, {"name": "ts", "type": "long"}, {"name": "x", "type": "int"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["SHORT", "LONG"]}},
    {"name": "level", "type": ["null", "int"]}, {"name": "test", "type": "boolean"}]}
KEY = {"type": "record", "name": "Key", "namespace": "db.server", "fields": [{"name": "id", "type": "long"}]}


def entry(root: Path, name: str, schema: dict | None = CART_OPEN, registry_id: int | None = 501, **keys) -> Path:
    """`<database>/<table>/topic.yaml` (name `database.table`) of Kafka topic `shop.events` unless `topic` says."""
    folder = root.joinpath(*name.split("."))
    folder.mkdir(parents=True, exist_ok=True)
    document = {"topic": "shop.events", "owner": "team-test", "start_hour": "2026-11-01T00:00Z",
                "time_partitioning": {"source": "kafka_time"}}
    if schema is not None:
        (folder / "v1.avsc").write_text(json.dumps(schema))
        version = {"version": 1, "file": "v1.avsc", **({"registry_id": registry_id} if registry_id is not None else {})}
        document["schema_versions"] = [version]
    document.update(keys)
    (folder / "topic.yaml").write_text(json.dumps({k: v for k, v in document.items() if v is not None}))
    return folder / "topic.yaml"


def refused(root: Path, tolerant: bool = False) -> str:
    with pytest.raises(CatalogError) as failure:
        load_catalog(root, tolerant=tolerant)
    return str(failure.value)


# --- several tables of one topic ----------------------------------------------------------------------------


def test_given_disjoint_routes_and_a_copy_placed_otherwise_when_loaded_then_the_topic_has_every_table(tmp_path):
    entry(tmp_path, "events.cart_open", format="json", registry_id=None, route={"field": "type", "equals": "cartOpen"})
    entry(tmp_path, "events.taps", TAP, format="json", registry_id=None, route={"field": "type", "in": ["tap", "longTap"]})
    entry(tmp_path, "archive.events", None, format="raw")
    entry(tmp_path, "warehouse.cart_open", format="json", registry_id=None,
          time_partitioning={"source": "event_time", "field": "ts", "unit": "ms"})

    catalog = load_catalog(tmp_path)

    tables = catalog.tables_of("shop.events")
    assert [t.name for t in tables] == ["archive/events", "events/cart_open", "events/taps", "warehouse/cart_open"]
    routed = {t.name: t.route for t in tables if t.route is not None}
    assert routed["events/taps"].takes("longTap") and not routed["events/taps"].takes("cartOpen")
    assert str(routed["events/cart_open"]) == "type = 'cartOpen'" and str(routed["events/taps"]) == "type in ['tap', 'longTap']"
    with pytest.raises(KeyError, match="landed by 4 tables"):
        catalog.by_topic("shop.events")


@pytest.mark.parametrize(
    ("second", "problem"),
    [
        ({"route": {"field": "type", "in": ["tap", "cartOpen"]}},
         "route type in ['tap', 'cartOpen'] of Kafka topic 'shop.events' overlaps route type = 'cartOpen' of {first} "
         "(type 'cartOpen' would land in both tables)"),
        ({"route": {"field": "cart_id", "equals": "c1"}},
         "the routes of Kafka topic 'shop.events' must all name one field, or a record could match two tables: this one "
         "routes by cart_id, {first} by type"),
        ({"route": {"field": "type", "equals": "tap"}, "format": "json", "registry_id": None},
         "the routed tables of Kafka topic 'shop.events' must read it in one format: this one is json, {first} is avro"),
        ({},
         None),  # a copy of every record beside a routed table: no clash
    ],
    ids=["overlapping values", "another field", "another format", "a copy beside a route"],
)
def test_given_two_routed_tables_that_could_both_take_a_record_then_the_catalog_refuses_both_naming_each_file(
        tmp_path, second, problem):
    first = entry(tmp_path, "events.a_first", route={"field": "type", "equals": "cartOpen"})
    registry_id = second.pop("registry_id", 501)
    other = entry(tmp_path, "events.b_second", registry_id=registry_id, **second)

    if problem is None:
        assert len(load_catalog(tmp_path).tables_of("shop.events")) == 2
        return
    assert refused(tmp_path) == f"{other}: {problem.format(first=first)}"
    tolerant = load_catalog(tmp_path, tolerant=True)
    assert tolerant.topics == () and {b.path for b in tolerant.broken} == {str(first), str(other)}
    mine = next(b for b in tolerant.broken if b.path == str(first))
    assert str(mine.error).startswith(f"{first}: ") and str(other) in str(mine.error)


def test_given_two_copies_of_a_topic_placed_alike_then_the_catalog_refuses_them_and_another_placement_is_accepted(tmp_path):
    first = entry(tmp_path, "events.archive", time_partitioning={"source": "event_time", "field": "ts"})
    second = entry(tmp_path, "events.warehouse", time_partitioning={"source": "event_time", "field": "ts"})
    assert refused(tmp_path) == (
        f"{second}: Kafka topic 'shop.events' is already landed by {first} in the same way (format avro, placed by "
        f"event_time field ts); give one a route, or another time_partitioning or format")

    entry(tmp_path, "events.warehouse", time_partitioning={"source": "kafka_time"})
    assert [t.time_source for t in load_catalog(tmp_path).tables_of("shop.events")] == ["event_time", "kafka_time"]


def test_a_second_entry_reading_a_topic_in_another_format_is_refused_beside_a_raw_copy_which_is_not(tmp_path):
    """Given a topic's entry reading its records as Protobuf, and a second entry naming the same topic with the same
    time placement but as Avro (a new entry that took another's topic name by mistake); then both are refused naming
    each other, as a duplicate topic is; a raw copy of the same topic (its bytes) is accepted."""
    proto = tmp_path / "shop" / "orders"
    proto.mkdir(parents=True)
    (proto / "v1.proto").write_text('syntax = "proto3";\npackage acme;\nmessage Order { int64 placed_at = 1; }\n')
    (proto / "topic.yaml").write_text(json.dumps({
        "topic": "shop.events", "owner": "team-test", "format": "protobuf", "start_hour": "2026-11-01T00:00Z",
        "time_partitioning": {"source": "event_time", "field": "placed_at", "unit": "ms"},
        "schema_versions": [{"version": 1, "file": "v1.proto", "message": "acme.Order", "registry_id": 601}]}))
    avro = entry(tmp_path, "warehouse.orders", {"type": "record", "name": "Order", "fields": [{"name": "placed_at", "type": "long"}]},
                 time_partitioning={"source": "event_time", "field": "placed_at", "unit": "ms"})

    assert refused(tmp_path) == (
        f"{avro}: Kafka topic 'shop.events' is already read as protobuf by {proto / 'topic.yaml'}, this entry reads it "
        "as avro; a topic's records have one format; check the topic name, or keep the bytes with format: raw")
    tolerant = load_catalog(tmp_path, tolerant=True)
    assert tolerant.topics == () and {b.path for b in tolerant.broken} == {str(avro), str(proto / "topic.yaml")}

    avro.unlink()
    entry(tmp_path, "archive.events", None, format="raw")
    assert sorted(t.payload_format for t in load_catalog(tmp_path).tables_of("shop.events")) == ["protobuf", "raw"]


def test_one_registry_id_may_name_one_schema_in_several_tables_but_never_two_schemas(tmp_path):
    entry(tmp_path, "events.a_cart", route={"field": "type", "equals": "cartOpen"})
    entry(tmp_path, "events.b_other", route={"field": "type", "equals": "other"})
    assert len(load_catalog(tmp_path).topics) == 2

    other = entry(tmp_path, "events.b_other", TAP, route={"field": "type", "equals": "other"})
    assert refused(tmp_path) == (f"{other}: registry_id 501 (version 1) is already used by "
                                 f"{tmp_path / 'events' / 'a_cart' / 'topic.yaml'} version 1 with another schema")


# --- routes, formats and keys of one entry ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "schema", "message"),
    [
        ({"route": {"field": "x", "equals": "5"}}, TAP, "route.field 'x' is a int in version 1 (v1.avsc), which holds "
                                                        "whole numbers; route value '5' could never match"),
        ({"route": {"field": "kind", "in": ["SHORT", 1]}}, TAP, "route value 1 could never match"),
        ({"route": {"field": "test", "equals": "yes"}}, TAP, "which holds true or false; route value 'yes'"),
        ({"route": {"field": "missing", "equals": "a"}}, TAP, "route.field 'missing' is not a field of any schema version"),
        ({"route": {"field": "type"}}, TAP, "route takes exactly one of equals and in"),
        ({"route": {"field": "type", "equals": "a", "in": ["b"]}}, TAP, "route takes exactly one of equals and in"),
        ({"route": {"field": "type", "in": ["a", "a"]}}, TAP, "route.in lists a value twice"),
        ({"route": {"field": "type", "in": []}}, TAP, "route.in must be a list of strings"),
        ({"route": {"field": "record_name", "equals": "shop.events.CartOpen"}}, TAP,
         "version 1 (v1.avsc) is record shop.events.Tap, which route record_name does not take (shop.events.CartOpen)"),
        ({"route": {"field": "record_name", "equals": 3}}, TAP, "route by record_name takes record full names"),
        ({"route": {"field": "record_name", "equals": "shop.events.Tap"}, "format": "json"}, TAP,
         "route by record_name needs a format whose values name their record (avro or protobuf): a json value names no record"),
        ({"format": "raw"}, TAP, "format raw lands the value's bytes as they are, without a schema; remove schema_versions"),
        ({"format": "raw", "time_partitioning": {"source": "event_time", "field": "ts"}}, None,
         "format raw is placed by Kafka time: time_partitioning.source must be kafka_time"),
        ({"format": "parquet"}, TAP, "format must be avro, json, protobuf or raw, got 'parquet'"),
        ({"keep_tombstones": True, "route": {"field": "type", "equals": "tap"}}, TAP,
         "keep_tombstones and route exclude each other"),
        ({"keep_tombstones": "yes"}, TAP, "keep_tombstones must be true or false, got 'yes'"),
        ({"table_format": "delta"}, TAP, "table_format must be one of hive, iceberg, got 'delta'"),
        ({"format": "raw", "table_format": "iceberg", "time_partitioning": {"source": "kafka_time"}}, None,
         "table_format iceberg: a raw archive (format: raw) has no schema versions to make a iceberg table of; leave table_format out"),
        ({"key_schema": "nokey.avsc"}, TAP, "nokey.avsc: schema file does not exist"),
        ({"key_schema": "../key.avsc"}, TAP, "key_schema must sit beside topic.yaml"),
        ({"time_partitioning": None}, TAP, "missing required key 'time_partitioning'"),
    ],
)
def test_a_wrong_shape_key_fails_at_load_naming_the_file_and_the_key(tmp_path, keys, schema, message):
    path = entry(tmp_path, "events.taps", schema, **keys)

    with pytest.raises(CatalogError) as failure:
        load_topic(path)

    assert str(failure.value).startswith(str(path)) or str(path.parent) in str(failure.value)
    assert message in str(failure.value)


def test_a_raw_archive_is_in_the_hive_layout_whatever_the_deployments_table_format(tmp_path):
    """An Iceberg schema is folded from schema versions, and an archive has none."""
    path = entry(tmp_path, "archive.events", None, format="raw")
    assert load_topic(path, table_format="iceberg").table_format == "hive"
    assert load_topic(entry(tmp_path, "events.taps", TAP), table_format="iceberg").table_format == "iceberg"


def test_an_avro_version_needs_its_registry_id_and_a_json_one_may_go_without(tmp_path):
    with pytest.raises(CatalogError, match=r"schema_versions\[0\].registry_id is required for format avro"):
        load_topic(entry(tmp_path, "events.taps", TAP, registry_id=None))

    topic = load_topic(entry(tmp_path, "events.taps", TAP, registry_id=None, format="json"))
    assert topic.payload_format == "json" and topic.version(1).registry_id is None


def test_a_raw_table_needs_no_schema_and_lands_by_kafka_time(tmp_path):
    topic = load_topic(entry(tmp_path, "archive.events", None, format="raw", time_partitioning=None, retention_days=30))
    assert (topic.payload_format, topic.schema_versions, topic.time_source, topic.retention_days) == ("raw", (), "kafka_time", 30)


def test_a_key_schema_and_kept_tombstones_load(tmp_path):
    path = entry(tmp_path, "db.customers", TAP, key_schema="key.avsc", keep_tombstones=True)
    (path.parent / "key.avsc").write_text(json.dumps(KEY))

    topic = load_topic(path)

    assert topic.keep_tombstones and topic.key_schema.file == "key.avsc" and topic.key_schema.version == 0
    assert topic.key_schema.schema["fields"] == KEY["fields"]


# --- the archive rule ---------------------------------------------------------------------------------------


def test_given_an_archive_rule_then_archived_topics_that_match_and_have_no_folder_become_raw_tables(tmp_path):
    entry(tmp_path, "audit.logins", None, topic="audit.logins", format="raw")
    (tmp_path / "_archive.yaml").write_text(
        'pattern: "audit\\\\..*|Legacy-.*"\ndatabase: archive\nowner: team-platform\nstart_hour: "2026-11-01T00:00Z"\n'
        'retention_days: 30\n')

    catalog = load_catalog(tmp_path, archived_topics=["audit.Payments-v2", "audit.logins", "orders", "Legacy-9",
                                                      "__consumer_offsets"])

    archived = {t.topic: t for t in catalog.topics if t.archived}
    assert sorted(archived) == ["Legacy-9", "audit.Payments-v2"]
    payments = archived["audit.Payments-v2"]
    assert (payments.database, payments.table, payments.payload_format, payments.retention_days) == (
        "archive", "audit_payments_v2", "raw", 30)
    assert payments.source_file == str(tmp_path / "_archive.yaml") and payments.owner == "team-platform"
    assert catalog.archive.matches("audit.new") and not catalog.archive.matches("__audit.x")
    assert archived_table_name("9lives.x") == "t_9lives_x"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('owner: x\nstart_hour: "2026-11-01T00:00Z"\n', "missing required key 'pattern'"),
        ('pattern: "("\nowner: x\nstart_hour: "2026-11-01T00:00Z"\n', "pattern '(' is not a regular expression"),
        ('pattern: ".*"\nstart_hour: "2026-11-01T00:00Z"\n', "missing required key 'owner'"),
        ('pattern: ".*"\nowner: x\nstart_hour: "2026-11-01T00:00Z"\npii_fields: [user]\n',
         "format raw lands the value's bytes as they are, without a schema; remove pii_fields"),
        ('pattern: ".*"\nowner: x\nstart_hour: "2026-11-01T00:00Z"\nformat: json\n', "format is set by the archive"),
        ('pattern: ".*"\ndatabase: Archive\nowner: x\nstart_hour: "2026-11-01T00:00Z"\n', "database 'Archive' must be"),
        ('pattern: ".*"\nowner: x\nstart_hour: "2026-11-01T00:00Z"\nretention_days: "30"\n',
         "retention_days must be a positive whole number of days"),
    ],
)
def test_a_wrong_archive_rule_fails_at_load_naming_its_file_and_tolerantly_costs_only_the_archive(tmp_path, text, message):
    entry(tmp_path, "events.taps", TAP)
    (tmp_path / "_archive.yaml").write_text(text)

    problem = refused(tmp_path)
    tolerant = load_catalog(tmp_path, tolerant=True, archived_topics=["audit.x"])

    assert problem.startswith(f"{tmp_path / '_archive.yaml'}: ") and message in problem
    assert [t.name for t in tolerant.topics] == ["events/taps"]
    assert [(b.database, b.table) for b in tolerant.broken] == [("_archive", "rule")]


def test_an_archived_topic_whose_table_name_is_taken_is_refused_naming_both(tmp_path):
    taken = entry(tmp_path, "archive.audit_x", None, topic="other", format="raw")
    (tmp_path / "_archive.yaml").write_text('pattern: "audit.*"\nowner: x\nstart_hour: "2026-11-01T00:00Z"\n')

    assert refused_with_archived(tmp_path, ["audit.x"]) == (
        f"{tmp_path / '_archive.yaml'}: archived topic 'audit.x' would be table archive/audit_x, which {taken} "
        f"already is; give the topic a folder of its own")
    tolerant = load_catalog(tmp_path, tolerant=True, archived_topics=["audit.x", "audit.y"])
    assert [t.topic for t in tolerant.topics] == ["other", "audit.y"]
    assert [(b.database, b.table) for b in tolerant.broken] == [("archive", "audit_x")]


def refused_with_archived(root: Path, archived: list[str]) -> str:
    with pytest.raises(CatalogError) as failure:
        load_catalog(root, archived_topics=archived)
    return str(failure.value)
