"""Table-catalog registration: the Avro → catalog type mapping, the union of schema versions, and
`catalog/<db>/<table>` against real landed data in Spark's embedded Hive metastore (Derby) and in Glue.

Glue is the one stand-in: no Glue runs on this machine, so moto's server mode (ThreadedMotoServer,
answering the Glue API over HTTP on a loopback port, reached through `AWS_ENDPOINT_URL_GLUE`) plays it.
Everything else is real: the Tansu broker, the SeaweedFS S3 server, Spark and its Hive metastore.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import io
import json
import uuid
import zlib
from decimal import Decimal

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, materialize

from kafka_lake.hours import KafkaHour, hour_key
from kafka_lake.kafka.records import KAFKA_HEADERS_TYPE
from kafka_lake.lake.compaction_manifest import CompactionManifest
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.lake.table_state import storage_partitions
from kafka_lake.schemas.arrow_mapping import arrow_mapping_for
from kafka_lake.settings import PlatformSettings
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.catalogs.glue import GlueCatalog
from kafka_lake.tables.catalogs.hive_metastore import HiveCatalog, from_hive_location, to_hive_location
from kafka_lake.tables.catalogs.protocol import TableCatalogError
from kafka_lake.tables.catalogs.reconciliation import reconcile, storage_partition_uris
from kafka_lake.tables.table_schema import TableSchemaError, parse_hive_type, table_columns, table_definition
from kafka_lake.topics.loader import CatalogError, load_catalog, load_topic
from platform_assets.catalog_assets import catalog_asset
from platform_assets.definitions import platform_resources
from tests.constants import REPO
from tests.landing_fixtures import (
    HOURS,
    PARTITIONS,
    build_traffic,
    produce,
    read_lake,
    unique_topic_name,
    write_test_topic,
)
from tests.test_raw_landing_e2e import materialize_hours

EVERY_TYPE = {
    "type": "record", "name": "Everything", "namespace": "test.types",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "precise", "type": "double"},
        {"name": "text", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {"name": "nothing", "type": "null"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "four", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "fee", "type": {"type": "fixed", "name": "Fee", "size": 8, "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "x", "type": "int"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]}},
        {"name": "inners", "type": {"type": "array", "items": "Inner"}},
        {"name": "counts", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "maybe", "type": ["null", "string"], "default": None},
        {"name": "maybe_inner", "type": ["null", "Inner"], "default": None},
        {"name": "either", "type": ["null", "int", "string", "Inner"], "default": None},
        {"name": "email", "type": ["null", "string"], "default": None},
        # Beyond what readers hold as Avro has them: Debezium's MySQL DECIMAL(65,30), and a record containing itself.
        {"name": "wide", "type": {"type": "bytes", "logicalType": "decimal", "precision": 65, "scale": 30}},
        {"name": "envelope", "type": {"type": "record", "name": "Envelope", "fields": [
            {"name": "total", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}]}]}},
        {"name": "parent", "type": ["null", "Everything"], "default": None},
    ],
}
EVERY_TYPE_COLUMNS = {
    "flag": "boolean", "small": "int", "big": "bigint", "ratio": "float", "precise": "double", "text": "string",
    "blob": "binary", "nothing": "int", "color": "string", "four": "binary", "price": "decimal(12,3)",
    "fee": "decimal(10,2)", "id": "string", "day": "date", "at_ms": "int", "at_us": "bigint",
    "ts_ms": "timestamp", "ts_us": "timestamp", "local_ms": "timestamp", "local_us": "timestamp",
    "inner": "struct<x:int,tags:array<string>>", "inners": "array<struct<x:int,tags:array<string>>>",
    "counts": "map<string,bigint>", "maybe": "string", "maybe_inner": "struct<x:int,tags:array<string>>",
    "either": "struct<member0:int,member1:string,member2:struct<x:int,tags:array<string>>>",
    "email": "string",  # a pii field: its pseudonym
    "wide": "string", "envelope": "struct<total:string>", "parent": "string",  # exact decimal text, JSON text
    "_kafka_topic": "string", "_kafka_partition": "int", "_kafka_offset": "bigint", "_kafka_timestamp": "timestamp",
    "_kafka_key": "binary", "_kafka_headers": "array<struct<key:string,value:binary>>",
}


EVERY_TYPE_COMMENTS = {  # what the column types do not say
    "wide": "decimal(65,30) as its exact text (precision over 38, which readers cannot hold)",
    "envelope": "total: decimal(40,2) as its exact text (precision over 38, which readers cannot hold)",
    "parent": "JSON text of a value of recursive record test.types.Everything (keys sorted, bytes as base64, decimals "
              "as exact text, times in ISO 8601)",
}


def write_topic(folder, database: str, table: str, versions: list[dict], pii: str = "[]") -> TableSpec:
    """A topic folder of the catalog format, loaded the way the platform loads it."""
    topic_dir = folder / database / table
    topic_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for number, schema in enumerate(versions, start=1):
        (topic_dir / f"v{number}.avsc").write_text(json.dumps(schema))
        entries.append(f"  - {{version: {number}, file: v{number}.avsc, registry_id: {zlib.crc32(f'{database}.{table}'.encode()) % 10**6 * 10 + number}}}")
    (topic_dir / "topic.yaml").write_text(
        f"topic: {database}.{table}\nowner: team-test\ntime_partitioning:\n  source: kafka_time\n"
        f"start_hour: \"2026-11-01T00:00Z\"\nschema_versions:\n" + "\n".join(entries) + f"\npii_fields: {pii}\n"
    )
    return load_topic(topic_dir / "topic.yaml")


def record(name: str, fields: list[tuple[str, object]]) -> dict:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


def hive_columns(columns) -> dict[str, str]:
    return {c.name: c.type.hive() for c in columns}


# --- The mapping and the union of versions (pure) -------------------------------------------------------------

def test_every_avro_type_maps_to_the_catalog_type_that_reads_its_parquet(tmp_path):
    topic = write_topic(tmp_path, "types", "everything", [EVERY_TYPE], pii="[email]")

    columns = table_columns(topic)

    assert hive_columns(columns) == EVERY_TYPE_COLUMNS
    assert list(hive_columns(columns)) == list(EVERY_TYPE_COLUMNS), "fields in schema order, then the Kafka columns"
    for column in columns:  # what Glue or a metastore answers reads back as the same type
        assert parse_hive_type(column.type.hive()) == column.type
        assert parse_hive_type(column.type.spark_ddl()) == column.type
    comments = {column.name: column.comment for column in columns if column.comment}
    assert comments == EVERY_TYPE_COMMENTS


def test_the_sample_page_views_table_is_the_union_of_v1_and_v2():
    topic = load_catalog(REPO / "schema_catalog").by_name("shop", "page_views")

    columns = hive_columns(table_columns(topic))

    assert list(columns)[:9] == ["view_id", "occurred_at", "user_id", "url", "referrer", "client", "duration_ms",
                                 "session_id", "experiments"], "v2's new fields are appended after v1's"
    assert columns["duration_ms"] == "bigint", "int in v1, long in v2: the wider type"
    assert columns["experiments"] == "map<string,string>"
    assert columns["client"] == "struct<ip_address:string,user_agent:string>", "a pii field inside a record is a string"


def test_versions_union_appends_new_fields_unions_struct_fields_widens_types_and_keeps_removed_ones(tmp_path):
    v1 = record("E", [("id", "int"), ("ratio", "int"), ("gone", "string"),
                      ("ctx", record("Ctx", [("a", "string")])), ("xs", {"type": "array", "items": "int"})])
    v2 = record("E", [("id", "long"), ("ratio", "float"), ("ctx", record("Ctx", [("a", "string"), ("b", "int")])),
                      ("xs", {"type": "array", "items": "long"}), ("added", ["null", "string"])])
    topic = write_topic(tmp_path, "evo", "union", [v1, v2])

    columns = hive_columns(table_columns(topic))

    assert list(columns)[:6] == ["id", "ratio", "gone", "ctx", "xs", "added"]
    assert columns["id"] == "bigint"
    assert columns["ratio"] == "double", "int and float files both read as double"
    assert columns["ctx"] == "struct<a:string,b:int>"
    assert columns["xs"] == "array<bigint>"
    assert columns["gone"] == "string", "a removed field stays: older partitions still hold it"


def test_a_change_no_column_can_read_fails_at_catalog_load_naming_both_versions(tmp_path):
    # long → double is a legal Avro promotion, but Spark cannot read int64 Parquet as double:
    # the catalog refuses it when it loads, before any table sees it.
    v1 = record("E", [("id", "string"), ("amount", "long")])
    v2 = record("E", [("id", "string"), ("amount", "double")])
    v3 = record("E", [("id", "string"), ("amount", "double"), ("note", ["null", "string"])])

    with pytest.raises(CatalogError) as raised:
        write_topic(tmp_path, "evo", "broken", [v1, v2, v3])

    message = str(raised.value)
    assert "'amount'" in message
    assert "version 2 (v2.avsc)" in message and "version 1 (v1.avsc)" in message
    assert "long" in message and "double" in message


def test_hive_locations_use_s3a_and_read_back_as_the_lake_uri():
    assert to_hive_location("s3://lake/p/shop/page_views") == "s3a://lake/p/shop/page_views"
    assert from_hive_location("s3a://lake/p/shop/page_views/") == "s3://lake/p/shop/page_views"
    assert from_hive_location("file:/tmp/lake/shop") == "/tmp/lake/shop"
    assert from_hive_location("file:///tmp/lake/shop") == "/tmp/lake/shop"


# --- Real catalogs ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def glue(glue_endpoint):
    return GlueCatalog()


@pytest.fixture(scope="module")
def hive(spark):
    return HiveCatalog(spark)


@pytest.fixture(params=["glue", "hive"])
def table_catalog(request):
    return request.getfixturevalue(request.param)


def only_versions(topic: TableSpec, count: int) -> TableSpec:
    return topic.model_copy(update=dict(schema_versions=topic.schema_versions[:count]))


def test_the_table_is_created_from_v1_then_evolved_by_v2_and_refuses_an_incompatible_one(table_catalog, tmp_path):
    """Given the sample page_views topic as it was at v1, registered in the catalog."""
    sample = load_catalog(REPO / "schema_catalog").by_name("shop", "page_views")
    location = str(tmp_path / "lake" / "shop" / "page_views")
    at_v1 = table_definition(only_versions(sample, 1), location)
    assert table_catalog.ensure_table(at_v1).created

    # When v2 joins the catalog.
    change = table_catalog.ensure_table(table_definition(sample, location))

    # Then the table has the evolved columns, and registering again changes nothing.
    assert change.added_columns == ("session_id", "experiments") and change.widened_columns == ("duration_ms",)
    assert hive_columns(table_catalog.table_columns(at_v1)) == hive_columns(table_columns(sample))
    assert not table_catalog.ensure_table(table_definition(sample, location)).changed

    # A field added inside a record widens the struct column in place.
    v1 = record("E", [("id", "string"), ("ctx", record("Ctx", [("a", "string")]))])
    v2 = record("E", [("id", "string"), ("ctx", record("Ctx", [("a", "string"), ("b", "long")]))])
    nested = write_topic(tmp_path / "catalog", "evo", "nested", [v1, v2])
    table_catalog.ensure_table(table_definition(only_versions(nested, 1), str(tmp_path / "lake" / "evo" / "nested")))
    assert table_catalog.ensure_table(table_definition(nested, str(tmp_path / "lake" / "evo" / "nested"))).widened_columns == ("ctx",)
    assert hive_columns(table_catalog.table_columns(table_definition(nested, "")))["ctx"] == "struct<a:string,b:bigint>"
    v3 = record("E", [("id", "string"), ("ctx", record("Ctx", [("a", "string"), ("b", "long")])), ("note", ["null", "string"])])
    nested = write_topic(tmp_path / "catalog", "evo", "nested", [v1, v2, v3])
    assert table_catalog.ensure_table(table_definition(nested, str(tmp_path / "lake" / "evo" / "nested"))).added_columns == ("note",)

    # A table whose column no version can share is refused, naming the table and the versions.
    clash = write_topic(tmp_path / "clash", "evo", "nested", [record("E", [("id", "string"), ("ctx", "string")])])
    with pytest.raises(TableSchemaError, match=r"'ctx'.*evo\.nested in the catalog.*versions 1"):
        table_catalog.ensure_table(table_definition(clash, str(tmp_path / "lake" / "evo" / "nested")))


def test_a_union_that_gains_a_member_gains_a_field_in_the_registered_table(table_catalog, tmp_path):
    """Given a table registered while its union had two types, and a version adding a third (Avro's resolution and
    the registry's BACKWARD mode accept it); and one whose field had one type, which becomes a union."""
    v1 = record("E", [("id", "string"), ("choice", ["null", "int", "string"])])
    v2 = record("E", [("id", "string"), ("choice", ["null", "int", "string", "boolean"])])
    location = str(tmp_path / "lake" / "evo" / "choices")
    table_catalog.ensure_table(table_definition(write_topic(tmp_path / "at_v1", "evo", "choices", [v1]), location))

    # When the table is registered with both versions, then its struct gains the member, in place.
    both = write_topic(tmp_path / "both", "evo", "choices", [v1, v2])
    assert table_catalog.ensure_table(table_definition(both, location)).widened_columns == ("choice",)
    assert hive_columns(table_catalog.table_columns(table_definition(both, location)))["choice"] == \
        "struct<member0:int,member1:string,member2:boolean>"

    # A column registered as one type cannot become a union's struct: registration says so, naming the column.
    plain, union = record("E", [("id", "string"), ("x", ["null", "string"])]), \
        record("E", [("id", "string"), ("x", ["null", "string", "long"])])
    location = str(tmp_path / "lake" / "evo" / "plain")
    table_catalog.ensure_table(table_definition(write_topic(tmp_path / "plain", "evo", "plain", [plain]), location))
    with pytest.raises(TableSchemaError, match=r"column 'x' is string in the table evo\.plain in the catalog but "
                                               r"struct<member0:string,member1:bigint>"):
        table_catalog.ensure_table(table_definition(write_topic(tmp_path / "union", "evo", "plain", [plain, union]),
                                                    location))


def test_columns_holding_text_for_what_readers_cannot_hold_say_so_in_the_catalogs_comments(table_catalog, tmp_path):
    """Given a topic with a decimal(65,30), a nested one, and a record that contains itself, registered."""
    topic = write_topic(tmp_path / "catalog", "types", "commented", [EVERY_TYPE])
    definition = table_definition(topic, str(tmp_path / "lake" / "types" / "commented"))

    table_catalog.ensure_table(definition)

    comments = {column.name: column.comment for column in table_catalog.table_columns(definition) if column.comment}
    assert comments == EVERY_TYPE_COMMENTS
    assert not table_catalog.ensure_table(definition).changed


EVERY_TYPE_ZEROES = {
    "flag": False, "small": 0, "big": 0, "ratio": 0.0, "precise": 0.0, "text": "", "blob": b"", "nothing": None,
    "color": "RED", "four": b"\x00\x00\x00\x00", "price": Decimal("0.000"), "fee": Decimal("0.00"),
    "id": str(uuid.UUID(int=0)), "day": dt.date(1970, 1, 1), "at_ms": dt.time(0), "at_us": dt.time(0),
    "ts_ms": dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc), "ts_us": dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc),
    "local_ms": dt.datetime(1970, 1, 1), "local_us": dt.datetime(1970, 1, 1), "inner": {"x": 0, "tags": []},
    "inners": [], "counts": {}, "maybe": None, "maybe_inner": None, "either": "text", "email": None,
    "wide": Decimal("0E-30"), "envelope": {"total": None}, "parent": None,
}


def test_hive_reads_every_avro_type_from_the_parquet_landing_writes(hive, spark, tmp_path):
    """Given one Parquet file written by the landing's own Avro → Arrow mapping, holding every Avro type."""
    topic = write_topic(tmp_path / "catalog", "types", "everything", [EVERY_TYPE], pii="[email]")
    version = topic.schema_versions[0]
    values = [
        {"flag": True, "small": -7, "big": 2**40, "ratio": 1.5, "precise": 2.25, "text": "héllo", "blob": b"\x00\xff",
         "nothing": None, "color": "GREEN", "four": b"abcd", "price": Decimal("123456789.123"), "fee": Decimal("-1.05"),
         "id": str(uuid.UUID(int=7)), "day": dt.date(2026, 11, 1), "at_ms": dt.time(13, 14, 15, 16000),
         "at_us": dt.time(23, 59, 59, 999999), "ts_ms": dt.datetime(2026, 11, 1, 13, 0, 1, 2000, tzinfo=dt.timezone.utc),
         "ts_us": dt.datetime(2026, 11, 1, 13, 0, 1, 2345, tzinfo=dt.timezone.utc),
         "local_ms": dt.datetime(2026, 11, 1, 8, 30, 0, 5000), "local_us": dt.datetime(2026, 11, 1, 8, 30, 0, 5678),
         "inner": {"x": 1, "tags": ["a", "b"]}, "inners": [{"x": 2, "tags": []}, {"x": 3, "tags": ["c"]}],
         "counts": {"a": 1, "b": None}, "maybe": "yes", "maybe_inner": {"x": 4, "tags": ["d"]},
         "either": {"x": 5, "tags": []}, "email": "someone@example.com",
         "wide": Decimal("-12345678901234567890123456789012345.123456789012345678901234567890"),
         "envelope": {"total": Decimal("12345678901234567890123456789012345678.90")}, "parent": EVERY_TYPE_ZEROES},
        EVERY_TYPE_ZEROES,
    ]
    decoded = []
    for value in values:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, version.parsed, value)
        buffer.seek(0)
        decoded.append(fastavro.schemaless_reader(buffer, version.parsed, None, return_named_type=True))
    mapping = arrow_mapping_for(version, topic.pii_fields, lambda v: None if v is None else hashlib.sha256(str(v).encode()).hexdigest())
    kafka = [pa.array(["types.everything"] * 2), pa.array([0, 0], pa.int32()), pa.array([10, 11], pa.int64()),
             pa.array([1_793_538_000_000] * 2, pa.timestamp("ms", tz="UTC")), pa.array([b"k", None]),
             pa.array([[{"key": "trace", "value": b"\x01"}, {"key": "none", "value": None}], None], KAFKA_HEADERS_TYPE)]
    table = pa.Table.from_arrays(mapping.record_columns(decoded) + kafka, schema=mapping.schema)
    storage = LakeStorage(str(tmp_path / "lake"))
    partition = TablePartition(1, dt.datetime(2026, 11, 1, 13, tzinfo=dt.timezone.utc))
    with storage.open_output(f"{partition.raw_directory('types', 'everything')}/part.parquet") as stream:
        pq.write_table(table, stream)

    # When the table is registered in the Hive metastore and queried through Spark SQL.
    definition = table_definition(topic, storage.uri("types/everything"))
    hive.ensure_table(definition)
    reconcile(hive, definition, storage_partitions(storage, "types", "everything"))
    through_sql = spark.sql("SELECT * FROM types.everything ORDER BY _kafka_offset").toArrow().to_pylist()

    # Then the exact decimal text and the JSON text read back as strings, and the metastore says so in comments.
    assert through_sql[0]["wide"] == "-12345678901234567890123456789012345.123456789012345678901234567890"
    assert through_sql[1]["wide"] == "0." + "0" * 30
    assert through_sql[0]["envelope"] == {"total": "12345678901234567890123456789012345678.90"}
    assert json.loads(through_sql[0]["parent"])["price"] == "0.000" and through_sql[1]["parent"] is None
    assert {c.name: c.comment for c in hive.table_columns(definition) if c.comment} == EVERY_TYPE_COMMENTS

    # Then every value reads back as landing wrote it (times as ms/µs since midnight, local times as UTC).
    expected = pq.read_table(storage.full_path(f"{partition.raw_directory('types', 'everything')}/part.parquet")).to_pylist()
    for row in expected:
        row.update({"schema_version": 1, "date": "2026-11-01", "hour": "13"})
        row["at_ms"] = None if row["at_ms"] is None else _since_midnight(row["at_ms"]) // 1000
        row["at_us"] = None if row["at_us"] is None else _since_midnight(row["at_us"])
        for name in ("local_ms", "local_us"):
            row[name] = row[name] and row[name].replace(tzinfo=dt.timezone.utc)
    assert through_sql == expected


CAMEL = record("Order", [
    ("orderId", "long"),
    ("customer", record("Customer", [("loyaltyTier", "string"), ("homeAddress", record("Address", [("zipCode", "string")]))])),
    ("lineItems", {"type": "array", "items": record("LineItem", [("skuId", "string")])}),
    ("giftNotes", {"type": "map", "values": record("GiftNote", [("fromName", "string")])}),
])
CAMEL_ROW = {"orderId": 7, "customer": {"loyaltyTier": "gold", "homeAddress": {"zipCode": "10115"}},
             "lineItems": [{"skuId": "A-1"}], "giftNotes": {"n": {"fromName": "Ann"}}}


def test_the_table_names_every_column_and_struct_field_in_lowercase(tmp_path):
    """Glue's and Athena's rule is lowercase names; the Avro case (`orderId`, `customer.loyaltyTier`) stays in the
    Parquet files, whose readers match names without regard to case."""
    topic = write_topic(tmp_path / "catalog", "shop", "orders", [CAMEL])

    columns = hive_columns(table_columns(topic))

    assert columns["orderid"] == "bigint"
    assert columns["customer"] == "struct<loyaltytier:string,homeaddress:struct<zipcode:string>>"
    assert columns["lineitems"] == "array<struct<skuid:string>>"
    assert columns["giftnotes"] == "map<string,struct<fromname:string>>"
    assert all(name == name.lower() for name in columns)


def test_a_table_registered_with_the_avro_case_is_renamed_lowercase_and_read_by_spark(table_catalog, spark, tmp_path):
    """Given a table a release before registered with the Avro case, and a file landed with it; when the table is
    registered again, then every name is lowercase, the change says which columns were renamed, registering once more
    changes nothing, and (Hive) Spark SQL reads the camelCase Parquet columns through the lowercase names."""
    topic = write_topic(tmp_path / "catalog", "camel", f"orders_{table_catalog.kind}", [CAMEL])
    storage = LakeStorage(str(tmp_path / "lake"))
    definition = table_definition(topic, storage.uri(f"camel/{topic.table}"))
    as_avro = {"orderId": "bigint", "customer": "struct<loyaltyTier:string,homeAddress:struct<zipCode:string>>",
               "lineItems": "array<struct<skuId:string>>", "giftNotes": "map<string,struct<fromName:string>>"}
    registered_before = dataclasses.replace(definition, columns=tuple(
        dataclasses.replace(c, name=next((n for n in as_avro if n.lower() == c.name), c.name),
                            type=parse_hive_type(as_avro[n]) if (n := next((n for n in as_avro if n.lower() == c.name), None))
                            else c.type) for c in definition.columns))
    table_catalog.ensure_table(registered_before)

    change = table_catalog.ensure_table(definition)

    assert change.recased_columns == ("orderid", "customer", "lineitems", "giftnotes"), change
    assert not change.added_columns and not change.widened_columns
    assert hive_columns(table_catalog.table_columns(definition)) == hive_columns(definition.columns)
    assert not table_catalog.ensure_table(definition).changed
    if table_catalog.kind != "hive":
        return
    version = topic.schema_versions[0]
    mapping = arrow_mapping_for(version, (), lambda v: v)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, version.parsed, CAMEL_ROW)
    buffer.seek(0)
    decoded = [fastavro.schemaless_reader(buffer, version.parsed, None, return_named_type=True)]
    kafka = [pa.array([topic.topic]), pa.array([0], pa.int32()), pa.array([3], pa.int64()),
             pa.array([1_793_538_000_000], pa.timestamp("ms", tz="UTC")), pa.array([None], pa.binary()),
             pa.array([None], KAFKA_HEADERS_TYPE)]
    partition = TablePartition(1, dt.datetime(2026, 11, 1, 13, tzinfo=dt.timezone.utc))
    with storage.open_output(f"{partition.raw_directory('camel', topic.table)}/part.parquet") as stream:
        pq.write_table(pa.Table.from_arrays(mapping.record_columns(decoded) + kafka, schema=mapping.schema), stream)
    reconcile(table_catalog, definition, storage_partitions(storage, "camel", topic.table))

    [row] = spark.sql(f"SELECT orderid, customer.loyaltytier AS tier, customer.homeaddress.zipcode AS zip, "
                      f"lineitems[0].skuid AS sku, giftnotes['n'].fromname AS sender FROM camel.{topic.table}").collect()

    assert row.asDict() == {"orderid": 7, "tier": "gold", "zip": "10115", "sku": "A-1", "sender": "Ann"}


def _since_midnight(moment: dt.time) -> int:
    return ((moment.hour * 60 + moment.minute) * 60 + moment.second) * 1_000_000 + moment.microsecond


# --- catalog/<db>/<table> over real landed data -------------------------------------------------------------

def land_two_hours(broker, tmp_path, lake_root: str, catalog_kind: str):
    kafka_topic = unique_topic_name()
    topic = write_test_topic(tmp_path / "catalog", kafka_topic)
    broker.create_topic(kafka_topic, PARTITIONS)
    produce(broker.bootstrap_servers, build_traffic(topic, per_partition_per_hour=4))
    settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=lake_root, table_catalog=catalog_kind)
    materialize_hours(topic, settings, HOURS[:2])
    return topic, settings, LakeStorage(lake_root)


def register_every_hour(topic: TableSpec, settings: PlatformSettings, storage: LakeStorage, in_one_run: bool) -> list:
    """Materializes catalog/<db>/<table> for each placement hour storage holds (late events included):
    hour by hour, or as one run over the range, as a backfill does."""
    asset = catalog_asset(topic)
    keys = [KafkaHour(hour).partition_key for hour in sorted({p.hour for p in storage_partitions(storage, "e2e", "orders")})]
    runs = [{"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}] if in_one_run \
        else [{"dagster/partition": key} for key in keys]
    results = []
    for tags in runs:
        result = materialize([asset], tags=tags, resources=platform_resources(settings), instance=DagsterInstance.ephemeral())
        assert result.success
        [check] = result.get_asset_check_evaluations()
        assert check.check_name == "catalog_matches_storage" and check.passed, check.description
        results.append(result)
    return results


def assert_catalog_equals_storage(catalog, definition, storage: LakeStorage) -> None:
    in_storage = storage_partition_uris(definition, storage_partitions(storage, definition.database, definition.table))
    assert catalog.list_partitions(definition) == in_storage


def remove_partition_files(storage: LakeStorage, partition: TablePartition) -> None:
    for stored in storage.list_files(partition.raw_directory("e2e", "orders")):
        storage.delete(stored.path)


def publish_a_generation(storage: LakeStorage, partition: TablePartition) -> str:
    """What compaction leaves behind: the partition's rows in a hidden generation folder, committed by manifest."""
    location = partition.compacted_directory("e2e", "orders", 1)
    sources = [f.path for f in storage.list_files(partition.raw_directory("e2e", "orders")) if f.path.endswith(".parquet")]
    for source in sources:
        storage.write_bytes(f"{location}/{source.rsplit('/', 1)[1]}", storage.read_bytes(source))
    manifest = CompactionManifest(
        database="e2e", table="orders", schema_version=partition.schema_version, hour=hour_key(partition.hour),
        generation=1, location=location, files=(), sources=tuple(sources), rows=0, offsets_checksum="",
        compacted_at="2026-11-01T15:00:00Z",
    )
    storage.write_bytes(partition.compaction_manifest_path("e2e", "orders"), manifest.to_json())
    return location


@pytest.mark.s3
def test_glue_holds_the_evolved_table_and_exactly_the_partitions_in_storage(broker, spark, glue, tmp_path):
    """Given two hours landed on the S3 lake, registered hour by hour through catalog/e2e/orders in Glue."""
    topic, settings, storage = land_two_hours(broker, tmp_path, f"s3://lake/{uuid.uuid4().hex[:12]}", "glue")
    definition = table_definition(topic, storage.uri("e2e/orders"))

    results = register_every_hour(topic, settings, storage, in_one_run=True)

    assert hive_columns(glue.table_columns(definition)) == hive_columns(definition.columns)
    assert {"quantity": "bigint", "channel": "string"}.items() <= hive_columns(definition.columns).items()
    assert_catalog_equals_storage(glue, definition, storage)
    assert definition.location.startswith("s3://lake/")
    [run] = results
    materializations = run.asset_materializations_for_node("catalog__e2e__orders")
    assert len(materializations) == 4, "one run, every hour from the first late hour to the last landed one"
    metadata = materializations[0].metadata
    assert metadata["table"].value == "e2e.orders"
    assert metadata["partitions_added"].value == len(storage_partitions(storage, "e2e", "orders"))
    raw = glue.client.get_partitions(DatabaseName="e2e", TableName="orders")["Partitions"]
    table = glue.client.get_table(DatabaseName="e2e", Name="orders")["Table"]
    assert all(p["StorageDescriptor"]["Columns"] == table["StorageDescriptor"]["Columns"] for p in raw)
    assert table["StorageDescriptor"]["SerdeInfo"]["SerializationLibrary"].endswith("ParquetHiveSerDe")

    # When a partition leaves storage, and another moves to a compacted generation.
    partitions = sorted(storage_partitions(storage, "e2e", "orders"))
    gone, moved = partitions[0], partitions[-1]
    remove_partition_files(storage, gone)
    location = publish_a_generation(storage, moved)
    report = reconcile(glue, definition, storage_partitions(storage, "e2e", "orders"))

    # Then the catalog follows: the partition is dropped, the other points at its generation.
    assert (report.added, report.relocated, report.dropped) == ((), (moved,), (gone,))
    assert glue.list_partitions(definition, [moved.hour])[moved] == storage.uri(location)
    assert_catalog_equals_storage(glue, definition, storage)


def test_hive_holds_exactly_the_partitions_in_storage_and_sql_returns_the_landed_rows(broker, spark, hive, tmp_path):
    """Given two hours landed on a local lake, registered hour by hour through catalog/e2e/orders in Hive."""
    topic, settings, storage = land_two_hours(broker, tmp_path, str(tmp_path / "lake"), "hive")
    definition = table_definition(topic, storage.uri("e2e/orders"))

    register_every_hour(topic, settings, storage, in_one_run=False)

    assert hive_columns(hive.table_columns(definition)) == hive_columns(definition.columns)
    assert_catalog_equals_storage(hive, definition, storage)
    landed = lake_rows(storage)
    assert {row[-3] for row in landed} == {1, 2} and len({row[-2:] for row in landed}) >= 3, "both versions, late hours"
    assert query_rows(spark) == landed

    # When a partition leaves storage, and another moves to a compacted generation.
    partitions = sorted(storage_partitions(storage, "e2e", "orders"))
    gone, moved = partitions[0], partitions[-1]
    remove_partition_files(storage, gone)
    location = publish_a_generation(storage, moved)
    report = reconcile(hive, definition, storage_partitions(storage, "e2e", "orders"))

    # Then the catalog follows, and SQL returns the rows storage holds, the moved ones from the generation.
    assert (report.added, report.relocated, report.dropped) == ((), (moved,), (gone,))
    assert_catalog_equals_storage(hive, definition, storage)
    assert query_rows(spark) == lake_rows(storage)
    files = spark.sql(
        f"SELECT DISTINCT input_file_name() AS f FROM e2e.orders WHERE schema_version = {moved.schema_version} "
        f"AND `date` = '{moved.date}' AND `hour` = '{moved.hour_of_day}'"
    ).collect()
    assert files and all(f"/{location}/" in row.f for row in files)


def query_rows(spark) -> list[tuple]:
    rows = spark.sql(
        "SELECT event_id, _kafka_partition, _kafka_offset, user_id, amount, quantity, tags, meta.occurred_at, channel, "
        "schema_version, `date`, `hour` FROM e2e.orders"
    ).collect()
    return sorted(tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in rows)


def lake_rows(storage: LakeStorage) -> list[tuple]:
    """The rows readers must see: each partition's files at its storage location (raw, or its generation)."""
    rows = []
    for partition, location in storage_partitions(storage, "e2e", "orders").items():
        for lake_row in read_lake(storage, location):
            if location.endswith(partition.raw_directory("e2e", "orders")) and "/_compacted_" in lake_row.path:
                continue
            r = lake_row.row
            rows.append((r["event_id"], r["_kafka_partition"], r["_kafka_offset"], r["user_id"], r["amount"], r["quantity"],
                         tuple(r["tags"]), r["meta"]["occurred_at"], r.get("channel"), partition.schema_version,
                         partition.date, partition.hour_of_day))
    return sorted(rows)


def test_hive_refuses_a_session_that_is_not_on_the_configured_metastore(spark):
    with pytest.raises(TableCatalogError, match="HIVE_METASTORE_URI is thrift://metastore:9083"):
        HiveCatalog(spark, metastore_uri="thrift://metastore:9083")
