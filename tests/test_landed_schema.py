"""The versions of a table share its columns (`landed_schema`, `column_lineage`): a field renamed with an Avro alias
lands in the column of the field it renamed, a union that gains a member keeps its members' places and its struct
gains one, and every version's rows land in the table's widest types, so every file of a table holds the same
columns. In the core alone: both decode paths of Avro and JSON, the Hive/Glue columns, the Iceberg schema (the SQL
catalog, SQLite), and compaction of files landed before and after a version changed the columns.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.schemas.landed_schema import LandedSchema
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.table_schema import table_columns
from kafka_lake.topics.loader import CatalogError
from tests.test_columnar import assert_same, decode_both
from tests.test_decoding import HOUR_13, KAFKA_MS, PII_KEY, hmac_hex
from tests.test_json_decoding import json_topic

TS = {"name": "ts", "type": "long"}


def record(*fields: dict, name: str = "Event") -> dict:
    return {"type": "record", "name": name, "namespace": "shop", "fields": [TS, *fields]}


def topic_of(root: Path, schemas: list[dict], payload_format: str = "avro", **keys) -> TableSpec:
    """A topic of the schemas (placed by `ts`), of Avro or JSON values."""
    return json_topic(root, schemas, format=payload_format, **keys)


def payload(topic: TableSpec, version: int, value: dict) -> bytes:
    value = {"ts": KAFKA_MS, **value}
    if topic.payload_format == "json":
        return b"\x00" + topic.version(version).registry_id.to_bytes(4, "big") + json.dumps(value).encode()
    return encode_confluent(topic.version(version).registry_id, topic.version(version).parsed, value)


def landed_rows(batch) -> dict[int, list[dict]]:
    """The rows of each schema version, without the Kafka columns."""
    return {placement.schema_version: [{k: v for k, v in row.items() if not k.startswith("_kafka")}
                                       for row in table.to_pylist()]
            for placement, table in sorted(batch.rows.items())}


# --- a field renamed with an Avro alias -----------------------------------------------------------------------

DEVICE_V1 = record({"name": "device", "type": "string"}, {"name": "n", "type": "int"})
DEVICE_V2 = record({"name": "device_id", "type": "string", "aliases": ["device"]}, {"name": "n", "type": "long"})


@pytest.mark.parametrize("payload_format", ["avro", "json"])
def test_a_field_renamed_with_an_alias_lands_in_the_column_of_the_field_it_renamed(tmp_path, payload_format):
    """Given `device` renamed to `device_id` the Avro way (v2 names it in its aliases), pseudonymized under its new
    name and erased by it."""
    topic = topic_of(tmp_path, [DEVICE_V1, DEVICE_V2], payload_format, pii_fields=["device_id"],
                     subject_field="device_id")
    values = [payload(topic, 1, {"device": "d-1", "n": 1}), payload(topic, 2, {"device_id": "d-2", "n": 2**40})]

    columnar, reference, _ = decode_both(topic, values)

    # Then both versions' values are in one column, which keeps its first name, pseudonymized alike.
    assert_same(columnar, reference)
    assert landed_rows(columnar) == {1: [{"ts": KAFKA_MS, "device": hmac_hex("d-1"), "n": 1}],
                                     2: [{"ts": KAFKA_MS, "device": hmac_hex("d-2"), "n": 2**40}]}
    assert [c.name for c in table_columns(topic)][:3] == ["ts", "device", "n"]
    assert "device_id" not in [c.name for c in table_columns(topic)]
    assert topic.subject_columns == (("device",),) and topic.column_path(("device",)) == ("device",)
    from kafka_lake.tables.iceberg.schema import table_schema

    assert [f.name for f in table_schema(topic).fields][:3] == ["ts", "device", "n"]


def test_a_json_record_of_the_renamed_version_may_still_hold_the_old_key(tmp_path):
    topic = topic_of(tmp_path, [DEVICE_V1, DEVICE_V2], "json")
    columnar, reference, _ = decode_both(topic, [payload(topic, 2, {"device": "old-key", "n": 3})])

    assert_same(columnar, reference)
    assert landed_rows(columnar)[2][0]["device"] == "old-key"


def test_a_renamed_field_inside_a_record_and_a_top_level_rename_follow_the_same_column(tmp_path):
    inner_v1 = {"type": "record", "name": "Meta", "fields": [{"name": "host", "type": "string"}]}
    inner_v2 = {"type": "record", "name": "Meta", "fields": [{"name": "hostname", "type": "string", "aliases": ["host"]}]}
    topic = topic_of(tmp_path, [record({"name": "date", "type": "string"}, {"name": "meta", "type": inner_v1}),
                                record({"name": "day", "type": "string", "aliases": ["date"]},
                                       {"name": "meta", "type": inner_v2})],
                     rename={"day": "event_date"})
    values = [payload(topic, 1, {"date": "2026-11-01", "meta": {"host": "a"}}),
              payload(topic, 2, {"day": "2026-11-02", "meta": {"hostname": "b"}})]

    columnar, reference, _ = decode_both(topic, values)

    assert_same(columnar, reference)
    assert landed_rows(columnar) == {1: [{"ts": KAFKA_MS, "event_date": "2026-11-01", "meta": {"host": "a"}}],
                                     2: [{"ts": KAFKA_MS, "event_date": "2026-11-02", "meta": {"host": "b"}}]}
    assert topic.column_path(("meta", "hostname")) == ("meta", "host") == topic.column_path(("meta", "host"))
    assert topic.column_path(("date",)) == ("event_date",)


def test_two_fields_that_would_land_in_one_column_fail_at_load_naming_the_file_and_the_fields(tmp_path):
    v3 = record({"name": "device_id", "type": "string"}, {"name": "device", "type": "string"}, {"name": "n", "type": "long"})
    with pytest.raises(CatalogError) as refused:
        topic_of(tmp_path, [DEVICE_V1, DEVICE_V2, v3])
    assert "version 3 (v3.avsc)" in str(refused.value) and "topic.yaml" in str(refused.value)
    assert "fields 'device_id' and 'device' of the record would both land in column 'device'" in str(refused.value)


# --- a union that gains a member ------------------------------------------------------------------------------

@pytest.mark.parametrize(("older", "newer", "struct"), [
    (["null", "int", "string"], ["null", "int", "string", "boolean"], "struct<member0:int,member1:string,member2:boolean>"),
    (["null", "string"], ["null", "string", "long"], "struct<member0:string,member1:bigint>"),
    (["null", "string"], ["null", "long", "string"], "struct<member0:string,member1:bigint>"),
    ("string", ["boolean", "string", "null"], "struct<member0:string,member1:boolean>"),
])
def test_a_union_that_gains_a_member_loads_and_its_struct_gains_one_keeping_what_each_member_holds(
        tmp_path, older, newer, struct):
    """Avro's resolution and the registry's BACKWARD and FULL modes accept a union's new member: so does the lake."""
    topic = topic_of(tmp_path, [record({"name": "choice", "type": older}), record({"name": "choice", "type": newer})])
    first = "text" if "string" in (older if isinstance(older, list) else [older]) else 7
    added = True if "boolean" in newer else 2**40
    values = [payload(topic, 1, {"choice": first}), payload(topic, 2, {"choice": first}),
              payload(topic, 2, {"choice": added})]

    columnar, reference, _ = decode_both(topic, values)

    assert_same(columnar, reference)
    columns = {c.name: c.type.hive() for c in table_columns(topic)}
    assert columns["choice"] == struct
    members = struct[len("struct<"):-1].split(",")
    first_member = next(m.split(":")[0] for m in members if m.endswith(":string"))
    added_member = members[-1].split(":")[0]
    rows = landed_rows(columnar)
    assert rows[1][0]["choice"][first_member] == first and rows[2][0]["choice"][first_member] == first
    assert rows[2][1]["choice"][added_member] == added
    assert all(value is None for name, value in rows[1][0]["choice"].items() if name != first_member)


def test_a_pseudonymized_field_whose_union_gains_a_member_stays_one_column_of_pseudonyms(tmp_path):
    topic = topic_of(tmp_path, [record({"name": "user", "type": ["null", "string"]}),
                                record({"name": "user", "type": ["null", "string", "long"]})], pii_fields=["user"])
    values = [payload(topic, 1, {"user": "u-1"}), payload(topic, 2, {"user": "u-2"}), payload(topic, 2, {"user": 7})]

    columnar, reference, _ = decode_both(topic, values)

    assert_same(columnar, reference)
    assert landed_rows(columnar) == {1: [{"ts": KAFKA_MS, "user": hmac_hex("u-1")}],
                                     2: [{"ts": KAFKA_MS, "user": hmac_hex("u-2")}, {"ts": KAFKA_MS, "user": hmac_hex("7")}]}
    assert {c.name: c.type.hive() for c in table_columns(topic)}["user"] == "string"


def test_an_iceberg_table_made_at_one_version_follows_a_union_that_gains_a_member(tmp_path):
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog, table_location
    from kafka_lake.tables.iceberg.schema import ensure_table

    v1, v2 = record({"name": "choice", "type": ["null", "int", "string"]}), \
        record({"name": "choice", "type": ["null", "int", "string", "boolean"]})
    storage = LakeStorage(str(tmp_path / "lake"))
    catalog = open_catalog(IcebergCatalogConfig(storage.root))
    ensure_table(catalog, topic_of(tmp_path / "v1", [v1]), table_location(storage, "shop", "cart_open"))

    evolved = ensure_table(catalog, topic_of(tmp_path / "v2", [v1, v2]), table_location(storage, "shop", "cart_open"))

    members = evolved.schema().find_type("choice").fields
    assert [(m.name, str(m.field_type)) for m in members] == [("member0", "int"), ("member1", "string"),
                                                              ("member2", "boolean")]


def test_a_union_that_loses_a_member_fails_at_load_naming_the_file_and_the_field(tmp_path):
    with pytest.raises(CatalogError) as refused:
        topic_of(tmp_path, [record({"name": "choice", "type": ["null", "int", "string"]}),
                            record({"name": "choice", "type": ["null", "int", "boolean"]})])
    assert "version 2 (v2.avsc)" in str(refused.value) and "'choice'" in str(refused.value)
    assert "a union may gain members, not lose string" in str(refused.value)


# --- every version's rows in the table's widest types ----------------------------------------------------------

WIDE_V1 = record({"name": "n", "type": "int"}, {"name": "ratio", "type": "float"},
                 {"name": "nested", "type": {"type": "record", "name": "Nested", "fields": [{"name": "a", "type": "int"}]}},
                 {"name": "tags", "type": {"type": "array", "items": "int"}})
WIDE_V2 = record({"name": "n", "type": "long"}, {"name": "ratio", "type": "double"},
                 {"name": "nested", "type": {"type": "record", "name": "Nested", "fields": [
                     {"name": "a", "type": "long"}, {"name": "data", "type": ["null", "string"], "default": None}]}},
                 {"name": "tags", "type": {"type": "array", "items": "long"}},
                 {"name": "added", "type": ["null", "string"], "default": None})


def test_every_versions_rows_land_in_one_schema_of_the_widest_types(tmp_path):
    topic = topic_of(tmp_path, [WIDE_V1, WIDE_V2])
    values = [payload(topic, 1, {"n": 7, "ratio": 1.5, "nested": {"a": 1}, "tags": [1, 2]}),
              payload(topic, 2, {"n": 592917279982, "ratio": 2.25, "nested": {"a": 2**40, "data": "x"}, "tags": [2**40],
                                 "added": "y"})]

    columnar, reference, _ = decode_both(topic, values)

    assert_same(columnar, reference)
    schemas = {placement.schema_version: table.schema for placement, table in columnar.rows.items()}
    assert schemas[1].remove_metadata() == schemas[2].remove_metadata() == LandedSchema(topic).schema_for(1).remove_metadata()
    assert schemas[1].field("n").type == pa.int64() and schemas[1].field("ratio").type == pa.float64()
    rows = landed_rows(columnar)
    assert rows[1] == [{"ts": KAFKA_MS, "n": 7, "ratio": 1.5, "nested": {"a": 1, "data": None}, "tags": [1, 2],
                        "added": None}]
    assert rows[2][0]["nested"] == {"a": 2**40, "data": "x"}


def test_compaction_brings_files_landed_in_a_versions_own_columns_to_the_tables(tmp_path):
    """Given a placement hour of version 1 holding a file landed before version 2 joined the catalog (version 1's own
    columns: an int, a struct of one field, a one-type union) and one landed after (the table's columns)."""
    from kafka_lake.decoding.batch_decoder import BatchDecoder
    from kafka_lake.kafka.records import KafkaRecord
    from kafka_lake.kafka.schema_resolution import CatalogSchemas
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.lake.table_partition import TablePartition
    from kafka_lake.upkeep.compaction import CompactionTask, compact_partition

    v1 = record({"name": "n", "type": "int"}, {"name": "choice", "type": ["null", "string"]},
                {"name": "nested", "type": {"type": "record", "name": "Nested", "fields": [{"name": "a", "type": "int"}]}})
    v2 = record({"name": "n", "type": "long"}, {"name": "choice", "type": ["null", "string", "long"]},
                {"name": "nested", "type": {"type": "record", "name": "Nested", "fields": [
                    {"name": "a", "type": "int"}, {"name": "data", "type": ["null", "string"], "default": None}]}})
    before = topic_of(tmp_path / "before", [v1])
    after = topic_of(tmp_path / "after", [v1, v2])
    storage = LakeStorage(str(tmp_path / "lake"))
    sources = []
    for offset, topic in enumerate((before, after)):
        value = payload(topic, 1, {"n": offset + 1, "choice": f"c{offset}", "nested": {"a": offset}})
        [table] = BatchDecoder(topic, CatalogSchemas(topic), PII_KEY).decode(
            [KafkaRecord(0, offset, KAFKA_MS, None, value)]).rows.values()
        path = f"{TablePartition(1, HOUR_13).raw_directory('shop', 'cart_open')}/{offset}.parquet"
        with storage.open_output(path) as stream:
            pq.write_table(table, stream)
        sources.append(path)
    assert pq.read_schema(storage.full_path(sources[0]), filesystem=storage.filesystem).field("n").type == pa.int32()

    report = compact_partition(CompactionTask(after, TablePartition(1, HOUR_13), 1, tuple(sources), storage.root, 1 << 20))

    # Then the generation holds every row in the table's columns now, each value as it was.
    [written] = report.files
    rows = pq.read_table(storage.full_path(written.path), filesystem=storage.filesystem)
    assert rows.schema.remove_metadata() == LandedSchema(after).schema_for(1).remove_metadata()
    assert [{k: v for k, v in row.items() if not k.startswith("_kafka")} for row in rows.to_pylist()] == [
        {"ts": KAFKA_MS, "n": 1, "choice": {"member0": "c0", "member1": None}, "nested": {"a": 0, "data": None}},
        {"ts": KAFKA_MS, "n": 2, "choice": {"member0": "c1", "member1": None}, "nested": {"a": 1, "data": None}}]
    assert report.rows == report.rows_read == 2

