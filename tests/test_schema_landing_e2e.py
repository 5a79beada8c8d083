"""Schemas and timestamps real producers send, landed end to end: the real Tansu broker, Spark, Dagster.

Each test writes its own topic folder, produces to the broker with confluent-kafka, lands through the
platform and reads the lake back the way readers do (pyarrow.dataset, Spark's Parquet reader).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from kafka_lake.hours import floor_hour, to_millis
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.lake import layout
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_state import table_files
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import load_topic
from tests.landing_fixtures import HOURS, Produced, Traffic, land_on_spark, landing_settings, produce, unique_topic_name

UTC = timezone.utc


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A Tansu broker of this module's own: its topics stay off the session's broker, whose topic list the
    sensor tests read."""
    from dev_services.tansu import TansuBroker

    with TansuBroker(log_file=tmp_path_factory.mktemp("broker") / "tansu.log") as running:
        yield running


def write_topic(catalog_dir: Path, kafka_topic: str, schemas: list[dict], table: str = "orders", **keys) -> TableSpec:
    """`e2e/<table>/topic.yaml` with one `.avsc` per schema version and the given keys (event time by default)."""
    folder = catalog_dir / "e2e" / table
    folder.mkdir(parents=True, exist_ok=True)
    versions = []
    for number, schema in enumerate(schemas, start=1):
        (folder / f"v{number}.avsc").write_text(json.dumps(schema))
        registry_id = zlib.crc32(kafka_topic.encode()) % 10**6 * 10 + number
        versions.append({"version": number, "file": f"v{number}.avsc", "registry_id": registry_id})
    document = {
        "topic": kafka_topic, "owner": "team-test", "start_hour": "2026-11-01T00:00Z", "schema_versions": versions,
        "time_partitioning": {"source": "event_time", "field": "occurred_at"}, "dead_letter_rate_threshold": 0.5,
        **keys,
    }
    (folder / "topic.yaml").write_text(json.dumps(document))  # JSON is YAML
    return load_topic(folder / "topic.yaml")


def produced(topic: TableSpec, version: int, record: dict, moment: datetime, partition: int = 0) -> Produced:
    schema_version = topic.version(version)
    value = encode_confluent(schema_version.registry_id, schema_version.parsed, record)
    return Produced(partition, to_millis(moment), f"k{len(record)}".encode(), value, "row", record, version)


def on_broker(broker, topic: TableSpec, items: list[Produced], partitions: int = 1) -> Traffic:
    broker.create_topic(topic.topic, partitions)
    traffic = Traffic(topic, sorted(items, key=lambda item: item.partition))
    produce(broker.bootstrap_servers, traffic)
    return traffic


# --- every schema version readable together --------------------------------------------------------------

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "com.example",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "occurred_at", "type": "string"},
        {"name": "shipping", "type": {"type": "record", "name": "Shipping", "fields": [
            {"name": "city", "type": "string"},
            {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
                {"name": "sku", "type": "string"}]}}},
        ]}},
        {"name": "totals", "type": {"type": "map", "values": "long"}},
    ],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": [
        ORDER_V1["fields"][0], ORDER_V1["fields"][1],
        {"name": "shipping", "type": {"type": "record", "name": "Shipping", "fields": [
            {"name": "city", "type": "string"},
            {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
                {"name": "sku", "type": "string"}, {"name": "gift", "type": "boolean", "default": False}]}}},
            {"name": "country", "type": "string", "default": "NL"},
        ]}},
        ORDER_V1["fields"][3],
        {"name": "coupon", "type": "string", "default": ""},
    ],
}


def test_given_two_schema_versions_whose_nested_records_gain_fields_then_any_parquet_reader_reads_every_row(
        broker, spark, tmp_path):
    """Given a topic whose v2 adds fields inside a nested record, inside array items and at the top level
    (all non-null in Avro), with records of both versions landed on Spark into a local lake."""
    topic = write_topic(tmp_path / "catalog", unique_topic_name(), [ORDER_V1, ORDER_V2])
    hour = HOURS[0]
    items = []
    for n in range(6):
        version = 1 if n < 3 else 2
        shipping = {"city": f"c{n}", "lines": [{"sku": f"s{n}"}] if version == 1 else [{"sku": f"s{n}", "gift": True}]}
        record = {"id": n, "occurred_at": f"{hour + timedelta(minutes=n):%Y-%m-%dT%H:%M:%S}Z", "shipping": shipping,
                  "totals": {"net": n}}
        if version == 2:
            shipping["country"], record["coupon"] = "DE", f"c-{n}"
        items.append(produced(topic, version, record, hour + timedelta(minutes=n, seconds=30)))
    on_broker(broker, topic, items)
    settings = landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers)
    land_on_spark(topic, settings, spark, [hour])
    table_folder = Path(settings.lake_root) / layout.table_prefix(topic.database, topic.table)

    # When pyarrow.dataset reads the whole table folder, inferring its schema from a file,
    files = ds.dataset(table_folder, format="parquet", partitioning="hive")
    rows = files.to_table().to_pylist()

    # then every row is there, the fields a version lacks read as null: every file holds the table's columns.
    assert sorted(row["id"] for row in rows) == list(range(6))
    by_id = {row["id"]: row for row in rows}
    assert by_id[0]["shipping"] == {"city": "c0", "lines": [{"sku": "s0", "gift": None}], "country": None}
    assert by_id[0]["coupon"] is None
    assert by_id[4]["shipping"] == {"city": "c4", "lines": [{"sku": "s4", "gift": True}], "country": "DE"}
    schemas = [fragment.physical_schema.remove_metadata() for fragment in files.get_fragments()]
    assert len(schemas) == 2 and schemas[0] == schemas[1], "v1's file and v2's hold the same columns"
    assert all(field.nullable for field in files.schema)

    # And Spark's own Parquet reader, merging the schemas, reads every row too.
    merged = spark.read.option("mergeSchema", "true").parquet(str(table_folder))
    spark_rows = {row["id"]: row.asDict(recursive=True) for row in merged.collect()}
    assert sorted(spark_rows) == list(range(6))
    assert spark_rows[1]["shipping"]["country"] is None and spark_rows[5]["shipping"]["country"] == "DE"
    assert spark_rows[5]["shipping"]["lines"] == [{"sku": "s5", "gift": True}]


# Two versions changing every way the catalog lets a table change: a long widening an int, a double a float, a field
# added inside a record, a member added to a union, a field renamed with an Avro alias; and a time of day (TIME).
READING_V1 = {
    "type": "record", "name": "Reading", "namespace": "com.example", "fields": [
        {"name": "id", "type": "int"},
        {"name": "occurred_at", "type": "string"},
        {"name": "n", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "nested", "type": {"type": "record", "name": "Nested", "fields": [{"name": "a", "type": "int"}]}},
        {"name": "choice", "type": ["null", "int", "string"]},
        {"name": "device", "type": "string"},
        {"name": "lap", "type": {"type": "long", "logicalType": "time-micros"}},
    ],
}
READING_V2 = {
    **READING_V1, "fields": [
        *READING_V1["fields"][:2],
        {"name": "n", "type": "long"},
        {"name": "ratio", "type": "double"},
        {"name": "nested", "type": {"type": "record", "name": "Nested", "fields": [
            {"name": "a", "type": "int"}, {"name": "data", "type": ["null", "string"], "default": None}]}},
        {"name": "choice", "type": ["null", "int", "string", "boolean"]},
        {"name": "device_id", "type": "string", "aliases": ["device"]},
        READING_V1["fields"][7],
    ],
}


def reading(n: int, moment: datetime, version: int) -> dict:
    value = {"id": n, "occurred_at": f"{moment:%Y-%m-%dT%H:%M:%S}Z", "n": n * 592_917_279_982 if version == 2 else n,
             "ratio": n + 0.5, "nested": {"a": n}, "choice": [n, f"s{n}", n % 2 == 0][n % (1 + version)],
             ("device_id" if version == 2 else "device"): f"d-{n}", "lap": 1_000_000 + n}
    if version == 2:
        value["nested"]["data"] = f"x{n}"
    return value


def test_every_reader_the_docs_name_reads_a_table_of_two_versions_as_one_with_every_value(broker, spark, tmp_path):
    """Given a topic whose v2 changes its v1 every way a table may change (widenings, a struct field, a union member,
    a field renamed with an alias), with records of both versions landed on Spark into a local lake."""
    import duckdb

    topic = write_topic(tmp_path / "catalog", unique_topic_name(), [READING_V1, READING_V2])
    hour = HOURS[0]
    sent = {}
    items = []
    for n in range(1, 9):
        version = 1 if n <= 4 else 2
        moment = hour + timedelta(minutes=n)
        sent[n] = (version, reading(n, moment, version))
        items.append(produced(topic, version, sent[n][1], moment + timedelta(seconds=30)))
    on_broker(broker, topic, items)
    settings = landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers)
    land_on_spark(topic, settings, spark, [hour])
    folder = str(Path(settings.lake_root) / layout.table_prefix(topic.database, topic.table))

    def expected(n: int) -> dict:
        version, value = sent[n]
        choice = value["choice"]
        member = {int: "member0", str: "member1", bool: "member2"}[type(choice)]
        return {"id": n, "n": value["n"], "ratio": n + 0.5, "nested": {"a": n, "data": f"x{n}" if version == 2 else None},
                "choice": {m: (choice if m == member else None) for m in ("member0", "member1", "member2")},
                "device": f"d-{n}", "schema_version": version}

    def compared(rows: list[dict]) -> dict[int, dict]:
        return {row["id"]: {key: row[key] for key in ("id", "n", "ratio", "nested", "choice", "device", "schema_version")}
                for row in rows}

    # When pyarrow.dataset reads the table's files, as docs/QUERYING.md writes it,
    files = table_files(settings.lake_root, topic.database, topic.table)
    rows = ds.dataset(files, format="parquet", partitioning="hive").to_table()
    # then every row of both versions is there, each value as it was sent, in the table's columns: one `device`.
    assert compared(rows.to_pylist()) == {n: expected(n) for n in sent}
    assert "device_id" not in rows.column_names and rows.schema.field("n").type == pa.int64()

    # And DuckDB, as docs/QUERYING.md writes it.
    duckdb_rows = duckdb.sql(f"SELECT * FROM read_parquet({files}, hive_partitioning = true, "
                             f"union_by_name = true)").to_arrow_table().to_pylist()
    assert compared(duckdb_rows) == {n: expected(n) for n in sent}

    # And Spark's Parquet reader with mergeSchema over the table's folder (none of its hours is compacted; the docs read
    # through the metastore, whose columns the registration tests check), which reads Parquet TIME(MICROS) once told to.
    spark.conf.set("spark.sql.timeType.enabled", "true")
    try:
        merged = spark.read.option("mergeSchema", "true").parquet(folder)
        spark_rows = [row.asDict(recursive=True) for row in merged.collect()]
    finally:
        spark.conf.unset("spark.sql.timeType.enabled")
    assert compared(spark_rows) == {n: expected(n) for n in sent}


def test_what_the_docs_say_spark_cannot_read_it_cannot(spark, tmp_path):
    """The README says Spark reads no Parquet TIME(MILLIS), and TIME(MICROS) only with spark.sql.timeType.enabled:
    should a Spark release read them, this fails, and the README should say so."""
    import pyarrow.parquet as pq

    for unit, kind, refusal in (("ms", pa.time32("ms"), "PARQUET_TYPE_ILLEGAL"), ("us", pa.time64("us"), "UNSUPPORTED_TIME_TYPE")):
        (tmp_path / unit).mkdir()
        pq.write_table(pa.table({"at": pa.array([1_000], kind)}), tmp_path / unit / "part.parquet")
        with pytest.raises(Exception, match=refusal):
            spark.read.parquet(str(tmp_path / unit)).collect()


# --- renamed fields, wide decimals and a recursive record, named everywhere ------------------------------------

DEBEZIUM_LIKE = {
    "type": "record", "name": "Order", "namespace": "com.example",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "date", "type": {"type": "record", "name": "When", "fields": [
            {"name": "occurred_at", "type": "string"}, {"name": "user", "type": "string"}]}},
        {"name": "hour", "type": "int"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 65, "scale": 30}},
        {"name": "parent", "type": ["null", "Order"], "default": None},
    ],
}


def test_given_renamed_fields_wide_decimals_and_a_recursive_record_then_they_land_and_are_named_everywhere(
        broker, spark, tmp_path, no_test_table_in_hive):
    """Given a topic whose fields `date` and `hour` are renamed (its time, PII and subject fields live in `date`),
    with a Debezium MySQL DECIMAL(65,30) and a record that contains itself, produced to the broker."""
    from decimal import Decimal

    from kafka_lake.lake.layout import ERASURE_REQUESTS_PREFIX
    from kafka_lake.lake.table_state import storage_partitions
    from kafka_lake.settings import PlatformSettings
    from kafka_lake.tables.catalogs.hive_metastore import HiveCatalog
    from kafka_lake.tables.catalogs.reconciliation import reconcile
    from kafka_lake.tables.table_schema import table_definition
    from kafka_lake.upkeep.retention import apply_retention
    from spark_jobs.compaction_job import run_compactions_on_spark
    from tests.constants import PII_TEST_KEY
    from tests.landing_fixtures import pseudonym
    from tests.test_raw_landing_e2e import materialize_hours

    topic = write_topic(tmp_path / "catalog", unique_topic_name(), [DEBEZIUM_LIKE], time_partitioning={
        "source": "event_time", "field": "date.occurred_at"}, rename={"date": "order_date", "hour": "order_hour"},
        pii_fields=["date.user"], subject_field="date.user")
    hour = HOURS[0]
    records = []
    for n in range(6):
        record = {"id": n, "date": {"occurred_at": f"{hour + timedelta(minutes=n):%Y-%m-%dT%H:%M:%S}Z", "user": f"u{n % 3}"},
                  "hour": n, "amount": Decimal(f"{n}1234567890123456789012345678901234.000000000000000000000000000001"),
                  "parent": None}
        records.append(dict(record, parent=dict(record, id=100 + n)) if n % 2 else record)
    on_broker(broker, topic, [produced(topic, 1, record, hour + timedelta(minutes=n, seconds=30))
                              for n, record in enumerate(records)])
    lake_root = str(tmp_path / "lake")
    storage = LakeStorage(lake_root)

    # When the hour lands through Dagster (its checks pass), user u1 is erased, and the table is registered in Hive.
    materialize_hours(topic, PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=lake_root), [hour])
    storage.write_bytes(f"{ERASURE_REQUESTS_PREFIX}/erase-u1.json",
                        json.dumps({"subject_ids": ["u1"], "requested_at": "2026-11-02T09:00:00Z"}).encode())
    erased = apply_retention(storage, topic, hour + timedelta(hours=2), PII_TEST_KEY.encode(),
                             lambda tasks: run_compactions_on_spark(spark, tasks), lambda manifests: None, lambda p: None)
    hive = HiveCatalog(spark)
    definition = table_definition(topic, storage.uri(layout.table_prefix(topic.database, topic.table)))
    hive.ensure_table(definition)
    reconcile(hive, definition, storage_partitions(storage, topic.database, topic.table))
    rows = spark.sql("SELECT id, order_date, order_hour, amount, parent, `date`, `hour` FROM e2e.orders ORDER BY id").collect()

    # Then the renamed fields are their columns, placed by the event time inside `order_date`, pseudonymized
    # there, matched there by the erasure; the decimal is its exact text and the recursion JSON text.
    assert erased.erased_rows == 2
    assert [row["id"] for row in rows] == [0, 2, 3, 5]
    assert {(row["date"], row["hour"]) for row in rows} == {(f"{hour:%Y-%m-%d}", f"{hour:%H}")}
    by_id = {row["id"]: row for row in rows}
    assert by_id[3]["order_date"]["user"] == pseudonym("u0", PII_TEST_KEY) and by_id[3]["order_hour"] == 3
    assert by_id[5]["amount"] == "51234567890123456789012345678901234.000000000000000000000000000001"
    parent = json.loads(by_id[5]["parent"])
    assert (parent["id"], parent["hour"], parent["date"]["user"]) == (105, 5, "u2")  # JSON holds the Avro value
    assert by_id[0]["parent"] is None
    assert [c.name for c in hive.table_columns(definition)][:5] == ["id", "order_date", "order_hour", "amount", "parent"]


# --- event times before 1970, and in microseconds -----------------------------------------------------------

WEATHER = {  # Avro's own test schema (share/test/data/weather.avsc): times of 1949-50 in epoch milliseconds
    "type": "record", "name": "Weather", "namespace": "test", "doc": "A weather reading.",
    "fields": [{"name": "station", "type": "string"}, {"name": "time", "type": "long"}, {"name": "temp", "type": "int"}],
}
CHANGE_EVENT = {  # a Debezium envelope's timing: `ts_us` in microseconds
    "type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.orders",
    "fields": [{"name": "op", "type": "string"}, {"name": "ts_us", "type": ["null", "long"], "default": None}],
}


def test_given_event_times_of_1949_and_in_microseconds_then_each_lands_in_its_own_hour(broker, spark, tmp_path):
    """Given weather.avro's readings (1949-50, epoch milliseconds) and change events stamped in microseconds
    (`unit: us`), produced now-ish in Kafka time."""
    weather = write_topic(tmp_path / "catalog", unique_topic_name(), [WEATHER], table="weather", time_partitioning={
        "source": "event_time", "field": "time"})
    changes = write_topic(tmp_path / "catalog", unique_topic_name(), [CHANGE_EVENT], table="changes", time_partitioning={
        "source": "event_time", "field": "ts_us", "unit": "us"})
    readings = [("011990-99999", -619524000000, 0), ("011990-99999", -619506000000, 22), ("012650-99999", -655531200000, 111)]
    kafka_time = HOURS[0] + timedelta(minutes=5)
    on_broker(broker, weather, [produced(weather, 1, {"station": s, "time": t, "temp": c}, kafka_time)
                                for s, t, c in readings])
    microseconds = [to_millis(HOURS[0] - timedelta(hours=n)) * 1000 + 123 for n in range(3)]
    on_broker(broker, changes, [produced(changes, 1, {"op": "c", "ts_us": us}, kafka_time) for us in microseconds])

    settings = landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers)
    for topic in (weather, changes):
        land_on_spark(topic, settings, spark, [HOURS[0]])
    storage = LakeStorage(settings.lake_root)

    def folders(topic):  # the date=…/hour=… of every file of the table
        return sorted("/".join(f.path.split("/")[3:5]) for f in storage.list_files(layout.table_prefix("e2e", topic.table)))

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert folders(weather) == sorted(layout.hour_directory(floor_hour(epoch + timedelta(milliseconds=t))) for _, t, _ in readings)
    assert folders(weather)[0].startswith("date=1949-")
    assert folders(changes) == [layout.hour_directory(HOURS[0] - timedelta(hours=n)) for n in (2, 1, 0)]
    rows = ds.dataset(Path(settings.lake_root) / "e2e" / "weather", format="parquet", partitioning="hive")
    assert not storage.list_files(layout.dead_letter_prefix(weather.database, weather.table))
    assert sorted(rows.to_table(columns=["temp"]).column("temp").to_pylist()) == [0, 22, 111]


# --- Kafka timestamps that name no hour ---------------------------------------------------------------------

SMALL = {"type": "record", "name": "Tick", "namespace": "com.example",
         "fields": [{"name": "n", "type": "long"}, {"name": "occurred_at", "type": "string"}]}
# -1 is Kafka's "no timestamp"; Kafka refuses other negatives, but Tansu and librdkafka carry them, as they do
# timestamps in the year 10000 and beyond.
ABSURD_TIMESTAMPS = [-1, -5000, 253_402_300_800_000, 2**62]


@pytest.mark.parametrize("time_source", ["kafka_time", "event_time"])
def test_given_kafka_timestamps_that_name_no_hour_then_the_hour_lands_and_its_checks_pass(broker, spark, tmp_path,
                                                                                         time_source):
    """Given records stamped -1, -5000, year 10000 and 2^62 among well-stamped ones in two hours (produced to
    the real broker, which keeps those timestamps as sent)."""
    from kafka_lake.lake.manifests import ManifestStore
    from kafka_lake.settings import PlatformSettings
    from tests.landing_fixtures import read_lake
    from tests.test_raw_landing_e2e import materialize_hours

    partitioning = {"source": "kafka_time"} if time_source == "kafka_time" else {"source": "event_time", "field": "occurred_at"}
    topic = write_topic(tmp_path / "catalog", unique_topic_name(), [SMALL], time_partitioning=partitioning)
    items, n = [], 0
    for hour in HOURS[:2]:
        for minute in range(0, 60, 6):
            moment = hour + timedelta(minutes=minute)
            items.append(produced(topic, 1, {"n": n, "occurred_at": f"{moment:%Y-%m-%dT%H:%M:%S}Z"}, moment))
            n += 1
    absurd = {}
    for position, timestamp_ms in zip((3, 5, 14, 16), ABSURD_TIMESTAMPS):
        item = items[position]
        items[position] = Produced(item.partition, timestamp_ms, item.key, item.value, "absurd", item.record, 1)
        absurd[item.record["n"]] = timestamp_ms
    on_broker(broker, topic, items)
    lake_root = str(tmp_path / "lake")

    # When both hours land through Dagster (materialize_hours asserts every check passed).
    materialize_hours(topic, PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=lake_root),
                      HOURS[:2])

    # Then every record is in the lake once; a Kafka-time topic makes the absurd ones dead letters with their own
    # cause, in the Kafka hour whose offsets hold them; an event-time topic lands them by their event time, with
    # no `_kafka_timestamp` (none names a time).
    storage = LakeStorage(lake_root)
    rows = read_lake(storage, layout.table_prefix(topic.database, topic.table))
    dead = read_lake(storage, layout.dead_letter_prefix(topic.database, topic.table))
    by_offset = {item.offset: item for item in items}
    seen = sorted([r.row["_kafka_offset"] for r in rows] + [d.row["_kafka_offset"] for d in dead])
    assert seen == sorted(by_offset), "every offset exactly once"
    landed_in = {offset: manifest.kafka_hour.start for manifest in ManifestStore(storage, topic.database, topic.table).all()
                 for part in manifest.partitions for offset in range(part.start, part.end)}
    if time_source == "kafka_time":
        assert sorted(by_offset[d.row["_kafka_offset"]].record["n"] for d in dead) == sorted(absurd)
        for letter in dead:
            assert letter.row["error"].startswith("unplaceable_kafka_timestamp: Kafka timestamp ")
            assert f"/{layout.hour_directory(landed_in[letter.row['_kafka_offset']])}/" in letter.path
            assert letter.row["_kafka_timestamp"] is None
        assert len(rows) == len(items) - len(absurd)
    else:
        assert not dead and len(rows) == len(items)
        for lake_row in rows:
            timestamp_ms = absurd.get(lake_row.row["n"])
            expected = None if timestamp_ms is not None else datetime.fromtimestamp(
                by_offset[lake_row.row["_kafka_offset"]].timestamp_ms / 1000, tz=UTC)
            assert lake_row.row["_kafka_timestamp"] == expected
    for manifest in ManifestStore(storage, topic.database, topic.table).all():
        for part in manifest.partitions:
            assert HOURS[0] <= datetime.fromtimestamp(part.counts.min_timestamp_ms / 1000, tz=UTC) < HOURS[2]
            assert HOURS[0] <= datetime.fromtimestamp(part.counts.max_timestamp_ms / 1000, tz=UTC) < HOURS[2]


# --- Kafka headers --------------------------------------------------------------------------------------------

def test_given_records_with_headers_then_tables_and_dead_letters_carry_them_and_null_where_none(broker, spark, tmp_path):
    """Given records with headers (repeated keys, a null value), without, and a broken one with headers, produced
    to the real broker with confluent-kafka."""
    from confluent_kafka import Producer

    from tests.landing_fixtures import read_lake

    topic = write_topic(tmp_path / "catalog", unique_topic_name(), [SMALL], time_partitioning={"source": "kafka_time"})
    broker.create_topic(topic.topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": False})
    traced = [("traceparent", b"00-4bf92f-01"), ("retry", None), ("traceparent", b"again")]
    version = topic.version(1)
    moment = HOURS[0] + timedelta(minutes=1)
    for n in range(6):
        value = encode_confluent(version.registry_id, version.parsed, {"n": n, "occurred_at": "-"})
        producer.produce(topic.topic, value=value, partition=0, timestamp=to_millis(moment) + n,
                         headers=traced if n % 2 else None)
    producer.produce(topic.topic, value=b"\x01not avro", partition=0, timestamp=to_millis(moment) + 9,
                     headers=[("source", b"legacy-service")])
    producer.flush(30)
    producer.produce(topic.topic, value=encode_confluent(version.registry_id, version.parsed, {"n": 99, "occurred_at": "-"}),
                     partition=0, timestamp=to_millis(moment) + 10)  # alone in its batch: Tansu's watermark is exact
    producer.flush(30)
    settings = landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers)

    land_on_spark(topic, settings, spark, [HOURS[0]])

    storage = LakeStorage(settings.lake_root)
    rows = {r.row["n"]: r.row["_kafka_headers"] for r in read_lake(storage, layout.table_prefix("e2e", "orders"))}
    as_pairs = {n: headers and [(h["key"], h["value"]) for h in headers] for n, headers in rows.items()}
    assert as_pairs == {**{n: traced if n % 2 else None for n in range(6)}, 99: None}
    [dead] = read_lake(storage, layout.dead_letter_prefix("e2e", "orders"))
    assert dead.row["_kafka_headers"] == [{"key": "source", "value": b"legacy-service"}]


# --- change events: keys as columns, tombstones kept -----------------------------------------------------------

CUSTOMER_KEY = {"type": "record", "name": "Key", "namespace": "dbserver.inventory.customers",
                "fields": [{"name": "id", "type": "int"}]}
CUSTOMER = {"type": "record", "name": "Value", "namespace": "dbserver.inventory.customers", "fields": [
    {"name": "id", "type": "int"},
    {"name": "email", "type": "string"},
    {"name": "birth_date", "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}], "default": None},
    {"name": "op", "type": "string"},
    {"name": "date", "type": "string"},  # a column name the partition keys take: renamed
    {"name": "ts_ms", "type": "long"}]}


@pytest.mark.parametrize(("lake_root", "table_format"), [("local", "hive"), ("s3", "iceberg")], indirect=["lake_root"])
def test_a_change_topic_lands_its_keys_as_columns_and_its_tombstones_as_rows_from_which_the_table_is_rebuilt(
        broker, spark, tmp_path, lake_root, table_format, no_test_table_in_hive, monkeypatch):
    """Given a Debezium-like topic (an Avro key with its own schema ids, creates, an update, a delete and its
    tombstone, and a record whose key is corrupt) declaring `key_schema` and `keep_tombstones`; when its hour lands
    through Dagster (every check passing) and the table is registered in Hive, then each row carries its key's
    columns, the tombstone is a row that says so, the corrupt key is a dead letter, and a query of the latest row
    per key rebuilds the source table without the deleted customer; an Iceberg table holds the same rows (a field
    renamed away from the partition column `date` included)."""
    from fastavro import parse_schema

    from kafka_lake.lake.manifests import ManifestStore
    from kafka_lake.lake.table_state import storage_partitions
    from kafka_lake.settings import PlatformSettings
    from kafka_lake.tables.catalogs.hive_metastore import HiveCatalog
    from kafka_lake.tables.catalogs.reconciliation import reconcile
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
    from kafka_lake.tables.table_schema import table_definition
    from tests.landing_fixtures import read_lake
    from tests.test_iceberg_tables import duckdb_rows, pyiceberg_rows
    from tests.test_raw_landing_e2e import materialize_hours

    catalog_dir = tmp_path / "catalog"
    (catalog_dir / "e2e" / "orders").mkdir(parents=True)
    (catalog_dir / "e2e" / "orders" / "key.avsc").write_text(json.dumps(CUSTOMER_KEY))
    topic = write_topic(catalog_dir, unique_topic_name(), [CUSTOMER], key_schema="key.avsc", keep_tombstones=True,
                        time_partitioning={"source": "event_time", "field": "ts_ms", "unit": "ms"},
                        table_format=table_format, rename={"date": "signup_date"})
    hour = HOURS[0]
    key_schema = parse_schema(CUSTOMER_KEY)

    def change(n: int, customer: int, op: str, email: str = "", key: bytes | None = None) -> Produced:
        moment = hour + timedelta(minutes=n)
        value = {"id": customer, "email": email or f"c{customer}@example.com", "birth_date": 7000 + customer, "op": op,
                 "date": f"2020-01-0{customer}", "ts_ms": to_millis(moment)}
        item = produced(topic, 1, value, moment)
        return replace(item, key=key if key is not None else encode_confluent(901, key_schema, {"id": customer}))

    items = [change(0, 1, "c"), change(1, 2, "c"), change(2, 3, "c"), change(3, 2, "u", "new@example.com"),
             change(4, 3, "d"), change(6, 4, "c", key=b"\x00\x00\x00\x03\x85\xff")]
    tombstone = Produced(0, to_millis(hour + timedelta(minutes=5)), encode_confluent(902, key_schema, {"id": 3}),
                         None, "tombstone")
    items.insert(5, tombstone)
    on_broker(broker, topic, items)
    storage = LakeStorage(lake_root)

    # An Iceberg table on S3 needs a shared catalog: SQLite in the test's folder stands for one.
    monkeypatch.setenv("ICEBERG_CATALOG_URI", f"sqlite:///{tmp_path}/iceberg.db")
    settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=lake_root,
                                table_format=table_format, iceberg_catalog_uri=f"sqlite:///{tmp_path}/iceberg.db")
    materialize_hours(topic, settings, [hour])

    rows = sorted((row.row for row in read_lake(storage, layout.table_prefix(topic.database, topic.table))),
                  key=lambda row: row["_kafka_offset"])
    assert [(row["_kafka_key_id"], row["id"], row["op"], row["_kafka_tombstone"]) for row in rows] == [
        (1, 1, "c", False), (2, 2, "c", False), (3, 3, "c", False), (2, 2, "u", False), (3, 3, "d", False),
        (3, None, None, True)]
    assert rows[0]["birth_date"] == date(1970, 1, 1) + timedelta(days=7001), "a Debezium date is a date column"
    assert [row["signup_date"] for row in rows[:3]] == ["2020-01-01", "2020-01-02", "2020-01-03"]
    assert rows[-1]["_kafka_key"] == tombstone.key
    [letter] = [row.row for row in read_lake(storage, layout.dead_letter_prefix(topic.database, topic.table))]
    assert letter["error"].startswith("undecodable_key: ") and letter["_kafka_key"] == items[-1].key
    [manifest] = ManifestStore(storage, topic.database, topic.table).all()
    assert (manifest.counts.rows, manifest.counts.kept_tombstones, manifest.counts.tombstones,
            manifest.counts.dead_letters) == (6, 1, 0, 1)

    if table_format == "iceberg":
        table = open_catalog(IcebergCatalogConfig.from_settings(settings)).load_table((topic.database, topic.table))
        landed = [(row["_kafka_key_id"], row["_kafka_tombstone"], row["signup_date"]) for row in rows]
        for read in (pyiceberg_rows(table), duckdb_rows(table)):
            held = sorted(read.to_pylist(), key=lambda row: row["_kafka_offset"])
            assert [(row["_kafka_key_id"], row["_kafka_tombstone"], row["signup_date"]) for row in held] == landed
            assert {row["date"] for row in held} == {f"{hour:%Y-%m-%d}"}, "`date` is the partition column"
        return
    hive = HiveCatalog(spark)
    definition = table_definition(topic, storage.uri(layout.table_prefix(topic.database, topic.table)))
    hive.ensure_table(definition)
    reconcile(hive, definition, storage_partitions(storage, topic.database, topic.table))
    live = spark.sql("""
        SELECT _kafka_key_id AS id, email FROM (
            SELECT *, row_number() OVER (PARTITION BY _kafka_key_id ORDER BY _kafka_offset DESC) AS newest
            FROM e2e.orders)
        WHERE newest = 1 AND NOT _kafka_tombstone ORDER BY id""").collect()
    assert [(row["id"], row["email"]) for row in live] == [(1, "c1@example.com"), (2, "new@example.com")]
    assert [c.name for c in hive.table_columns(definition)][-2:] == ["_kafka_key_id", "_kafka_tombstone"]
