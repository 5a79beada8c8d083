"""Change events: Kafka Connect and Debezium logical types land as dates, times, timestamps and decimals, on both
decode paths alike, and as those types in the table catalog.

The schemas are those Debezium's Avro converter writes (`connect.name`, `connect.parameters`); values are framed with
the project's encoder and decoded back.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from kafka_lake.tables.table_schema import table_columns
from tests.test_columnar import assert_same, decode_both
from tests.test_decoding import KAFKA_MS, dead_letter_rows, framed, only_rows, write_topic

UTC = dt.timezone.utc


def connect(kind: str, name: str, **extra) -> dict:
    return {"type": kind, "connect.version": 1, "connect.name": name, **extra}


VARIABLE_SCALE = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
                  "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
                  "connect.doc": "Variable scaled decimal", "connect.version": 1,
                  "connect.name": "io.debezium.data.VariableScaleDecimal"}
# A row of Debezium's `after`, as its Avro converter writes the column types of PostgreSQL and MySQL.
CHANGE = {
    "type": "record", "name": "Value", "namespace": "dbserver1.inventory.orders", "fields": [
        {"name": "id", "type": "long"},
        {"name": "order_date", "type": connect("int", "io.debezium.time.Date")},
        {"name": "legacy_date", "type": connect("int", "org.apache.kafka.connect.data.Date", **{"connect.version": 1})},
        {"name": "pickup", "type": connect("int", "io.debezium.time.Time")},
        {"name": "pickup_us", "type": connect("long", "io.debezium.time.MicroTime")},
        {"name": "pickup_ns", "type": connect("long", "io.debezium.time.NanoTime")},
        {"name": "created", "type": connect("long", "io.debezium.time.Timestamp")},
        {"name": "created_us", "type": connect("long", "io.debezium.time.MicroTimestamp")},
        {"name": "created_ns", "type": connect("long", "io.debezium.time.NanoTimestamp")},
        {"name": "connect_ts", "type": connect("long", "org.apache.kafka.connect.data.Timestamp")},
        {"name": "updated", "type": ["null", connect("string", "io.debezium.time.ZonedTimestamp")], "default": None},
        {"name": "price", "type": connect("bytes", "org.apache.kafka.connect.data.Decimal",
                                          **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}})},
        {"name": "weight", "type": connect("bytes", "org.apache.kafka.connect.data.Decimal", logicalType="decimal",
                                           precision=8, scale=3, **{"connect.parameters": {"scale": "3"}})},
        {"name": "ratio", "type": ["null", VARIABLE_SCALE], "default": None},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}


def unscaled(number: int) -> bytes:
    return number.to_bytes((number.bit_length() + 8) // 8, "big", signed=True)


def change(**overrides) -> dict:
    value = {
        "id": 1, "order_date": 20_000, "legacy_date": -1, "pickup": 45_296_789, "pickup_us": 45_296_789_123,
        "pickup_ns": 45_296_789_123_456, "created": 1_700_000_000_123, "created_us": 1_700_000_000_123_456,
        "created_ns": 1_700_000_000_123_456_789, "connect_ts": 1_700_000_000_000,
        "updated": "2026-11-01T14:05:06.123456+01:00", "price": unscaled(1234567), "weight": unscaled(-2500),
        "ratio": {"scale": 40, "value": unscaled(-12345678901234567890123456789012345678901234567890)},
        "ts_ms": KAFKA_MS,
    }
    return value | overrides


@pytest.fixture
def orders(tmp_path):
    return write_topic(tmp_path, [CHANGE], time_partitioning={"source": "kafka_time"})


def test_given_debezium_logical_types_when_decoded_then_they_land_as_dates_times_timestamps_and_decimals(orders):
    columnar, reference, left = decode_both(orders, [framed(orders, change())])

    assert_same(columnar, reference)
    [row] = only_rows(columnar)
    assert row["order_date"] == dt.date(2024, 10, 4) and row["legacy_date"] == dt.date(1969, 12, 31)
    assert row["pickup"] == 45_296_789 and row["pickup_us"] == 45_296_789_123, "times since midnight, as counts"
    assert row["pickup_ns"] == 45_296_789_123, "microseconds: the nanoseconds below them are cut"
    assert row["created"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert row["created_us"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    assert row["created_ns"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    assert row["connect_ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert row["updated"] == dt.datetime(2026, 11, 1, 13, 5, 6, 123456, tzinfo=UTC)
    assert row["price"] == Decimal("12345.67") and row["weight"] == Decimal("-2.500")
    assert row["ratio"] == "-1234567890.1234567890123456789012345678901234567890"
    assert left == [0], "a VariableScaleDecimal's text comes from fastavro's value: its version is decoded record by record"


def test_given_debezium_logical_types_then_the_table_catalog_declares_their_types(orders):
    columns = {column.name: column for column in table_columns(orders)}
    declared = {name: columns[name].type.hive() for name in [f["name"] for f in CHANGE["fields"]]}
    assert declared == {
        "id": "bigint", "order_date": "date", "legacy_date": "date", "pickup": "int", "pickup_us": "bigint",
        "pickup_ns": "bigint", "created": "timestamp", "created_us": "timestamp", "created_ns": "timestamp",
        "connect_ts": "timestamp", "updated": "timestamp", "price": "decimal(10,2)", "weight": "decimal(8,3)",
        "ratio": "string", "ts_ms": "bigint",
    }
    assert "VariableScaleDecimal as its exact decimal text" in columns["ratio"].comment
    assert "io.debezium.time.MicroTime: a time since midnight, negative or past a day" in columns["pickup_us"].comment


# A MySQL row as Debezium's Avro converter writes it (time.precision.mode adaptive_time_microseconds, the default):
# TIME as MicroTime, YEAR, SET, BIT(1) and BIT(n), GEOMETRY, JSON, ENUM.
MYSQL_ROW = {
    "type": "record", "name": "Value", "namespace": "mysql.inventory.shifts", "fields": [
        {"name": "id", "type": "int"},
        {"name": "opens", "type": connect("long", "io.debezium.time.MicroTime")},
        {"name": "closes", "type": ["null", connect("long", "io.debezium.time.MicroTime")], "default": None},
        {"name": "built", "type": ["null", connect("int", "io.debezium.time.Year")], "default": None},
        {"name": "days", "type": ["null", connect("string", "io.debezium.data.EnumSet",
                                                  **{"connect.parameters": {"allowed": "mon,tue,wed"}})],
         "default": None},
        {"name": "open", "type": ["null", "boolean"], "default": None},
        {"name": "flags", "type": ["null", connect("bytes", "io.debezium.data.Bits",
                                                   **{"connect.parameters": {"length": "10"}})], "default": None},
        {"name": "place", "type": ["null", {"type": "record", "name": "Geometry", "namespace": "io.debezium.data.geometry",
                                            "fields": [{"name": "wkb", "type": "bytes"},
                                                       {"name": "srid", "type": ["null", "int"], "default": None}],
                                            "connect.doc": "Geometry", "connect.version": 1,
                                            "connect.name": "io.debezium.data.geometry.Geometry"}], "default": None},
        {"name": "extra", "type": ["null", connect("string", "io.debezium.data.Json")], "default": None},
        {"name": "kind", "type": ["null", connect("string", "io.debezium.data.Enum",
                                                  **{"connect.parameters": {"allowed": "day,night"}})], "default": None},
    ],
}
POINT = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # WKB of POINT(1 2)
# MySQL's TIME: -838:59:59.000000 to 838:59:59.000000, in microseconds since midnight.
MYSQL_TIMES = [27 * 3600_000_000 + 30 * 60_000_000, -3600_000_000, 838 * 3600_000_000 + 59 * 60_000_000 + 59_000_000,
               -(838 * 3600_000_000 + 59 * 60_000_000 + 59_000_000), 0, 12 * 3600_000_000]


def mysql_row(n: int, opens: int) -> dict:
    return {"id": n, "opens": opens, "closes": None if n % 2 else opens + 1, "built": 1901 + n, "days": "mon,wed",
            "open": n % 2 == 0, "flags": b"\x05\x02", "place": {"wkb": POINT, "srid": 4326 if n % 2 else None},
            "extra": '{"a": [1, 2], "b": null}', "kind": "night"}


def test_given_mysql_times_outside_one_day_and_the_other_mysql_types_then_they_land_as_the_docs_say(tmp_path):
    """Given Debezium MySQL rows whose TIME is 27:30:00, -01:00:00, ±838:59:59 (MySQL's range), 00:00 and 12:00, with
    YEAR, SET, BIT(1), BIT(10), GEOMETRY, JSON and ENUM columns, in Avro and in JSON; when decoded, then every row lands
    on both paths alike, the TIME as its signed count of microseconds since midnight, the others as docs/QUERYING.md
    says, and the table catalog declares them so. Before: a TIME outside [00:00, 24:00) was a dead letter ("hour must
    be in 0..23"), and so was every later change of its row while the value stayed, a delete included."""
    from tests.test_json_decoding import json_topic

    avro = write_topic(tmp_path / "avro", [MYSQL_ROW], time_partitioning={"source": "kafka_time"})
    json_table = json_topic(tmp_path / "json", [MYSQL_ROW], {"source": "kafka_time"})
    rows = [mysql_row(n, opens) for n, opens in enumerate(MYSQL_TIMES)]
    as_json = [{**row, "flags": "BQI=", "place": {"wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA", "srid": row["place"]["srid"]}}
               for row in rows]  # Debezium's JSON converter writes bytes as base64

    for topic, values in ((avro, [framed(avro, row) for row in rows]),
                          (json_table, [json.dumps(row).encode() for row in as_json])):
        columnar, reference, _ = decode_both(topic, values)

        assert_same(columnar, reference)
        assert not columnar.dead_letters, dead_letter_rows(columnar)
        landed = {row["id"]: row for row in only_rows(columnar)}
        assert [landed[n]["opens"] for n in range(len(rows))] == MYSQL_TIMES
        assert landed[0] == {**rows[0], **{key: landed[0][key] for key in landed[0] if key.startswith("_kafka")}}
        assert landed[1]["built"] == 1902 and landed[1]["days"] == "mon,wed" and landed[1]["open"] is False
        assert landed[1]["flags"] == b"\x05\x02" and landed[1]["place"] == {"wkb": POINT, "srid": 4326}
        assert landed[1]["extra"] == '{"a": [1, 2], "b": null}' and landed[1]["kind"] == "night"

    columns = {column.name: column for column in table_columns(avro)}
    assert {name: columns[name].type.hive() for name in [f["name"] for f in MYSQL_ROW["fields"]]} == {
        "id": "int", "opens": "bigint", "closes": "bigint", "built": "int", "days": "string", "open": "boolean",
        "flags": "binary", "place": "struct<wkb:binary,srid:int>", "extra": "string", "kind": "string"}


def without(schema: dict, *names: str) -> dict:
    return {**schema, "fields": [f for f in schema["fields"] if f["name"] not in names]}


ZONED_EDGES = ["2026-11-01T14:05:06Z", "2026-11-01T14:05:06.1-05:30", "2026-11-01T14:05:06.123456789Z",
               "2026-11-01 14:05:06Z", "2026-11-01T14:05:06z", "2026-02-30T00:00:00Z", "0001-01-01T00:30:00+01:00",
               "9999-12-31T23:30:00-01:00", "0002-01-01T00:00:00+23:59", "yesterday", "2026-11-01T14:05:06",
               "2026-11-01T24:00:00Z", "2026-11-01T14:05:60Z"]


def test_given_zoned_timestamps_and_nanoseconds_of_every_form_then_both_paths_agree_record_by_record(tmp_path):
    """Columns read the plain forms; every other text takes the record path, which reads it or says why not."""
    topic = write_topic(tmp_path, [without(CHANGE, "ratio")], time_partitioning={"source": "kafka_time"})
    values = [framed(topic, without_ratio(updated=text)) for text in ZONED_EDGES]
    values += [framed(topic, without_ratio(created_ns=nanos, pickup_ns=nanos))
               for nanos in (-1, -999, -1000, -1001, 0, 999, 2**63 - 1, -(2**63))]

    columnar, reference, left = decode_both(topic, values)

    assert_same(columnar, reference)
    landed = {row["_kafka_offset"]: row for row in only_rows(columnar)}
    assert landed[1]["updated"] == dt.datetime(2026, 11, 1, 19, 35, 6, 100000, tzinfo=UTC)
    assert landed[2]["updated"] == dt.datetime(2026, 11, 1, 14, 5, 6, 123456, tzinfo=UTC)
    assert landed[len(ZONED_EDGES) + 1]["created_ns"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    dead = {row["_kafka_offset"] for row in columnar.dead_letters[dt.datetime(2026, 11, 1, 13, tzinfo=UTC)].to_pylist()}
    assert dead == {ZONED_EDGES.index(text) for text in (
        "2026-02-30T00:00:00Z", "0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00",  # no day; years 0, 10000 in UTC
        "yesterday", "2026-11-01T14:05:06", "2026-11-01T24:00:00Z", "2026-11-01T14:05:60Z")}
    assert set(left) >= dead


def without_ratio(**overrides) -> dict:
    value = change(**overrides)
    del value["ratio"]
    return value


def test_given_a_nano_timestamp_event_time_then_the_catalog_reads_it_in_nanoseconds(tmp_path):
    topic = write_topic(tmp_path, [without(CHANGE, "ratio")],
                        time_partitioning={"source": "event_time", "field": "created_ns"})
    assert topic.time_unit == "ns"
    columnar, reference, _ = decode_both(topic, [framed(topic, without_ratio())])
    assert_same(columnar, reference)
    assert list(columnar.rows)[0].hour == dt.datetime(2023, 11, 14, 22, tzinfo=UTC)


def test_a_connect_decimal_without_a_precision_gets_confluents_default_and_lands_as_exact_text(tmp_path):
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "amount", "type": connect("bytes", "org.apache.kafka.connect.data.Decimal",
                                           **{"connect.parameters": {"scale": "4"}})}]}
    topic = write_topic(tmp_path, [schema], time_partitioning={"source": "kafka_time"})
    columnar, reference, _ = decode_both(topic, [framed(topic, {"amount": unscaled(-123456789)})])
    assert_same(columnar, reference)
    assert only_rows(columnar)[0]["amount"] == "-12345.6789"
    assert columnar.rows[next(iter(columnar.rows))].schema.field("amount").type == pa.string()


# --- PostgreSQL's infinity, and timestamps beyond the years a column holds -------------------------------------

INFINITY, MINUS_INFINITY = 2**63 - 1, -(2**63)  # what Debezium writes for PostgreSQL's 'infinity' and '-infinity'
LAST_US = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
LAST_MS = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
FIRST = dt.datetime(1, 1, 1, tzinfo=UTC)
TIMES = {"type": "record", "name": "Times", "fields": [
    {"name": "id", "type": "long"},
    {"name": "created", "type": connect("long", "io.debezium.time.Timestamp")},
    {"name": "created_us", "type": connect("long", "io.debezium.time.MicroTimestamp")},
    {"name": "created_ns", "type": connect("long", "io.debezium.time.NanoTimestamp")},
    {"name": "updated", "type": ["null", connect("string", "io.debezium.time.ZonedTimestamp")], "default": None},
]}


def times(n: int, count: int, text: str | None) -> dict:
    return {"id": n, "created": count, "created_us": count, "created_ns": count, "updated": text}


def test_given_postgresql_infinity_in_debezium_timestamps_then_the_change_lands_with_the_field_at_the_years_ends(
        tmp_path):
    """Given change events whose timestamps hold PostgreSQL's infinity and -infinity (Long.MAX and Long.MIN; the text
    'infinity' in a ZonedTimestamp), in Avro and in JSON, beside ordinary ones."""
    from tests.test_json_decoding import json_topic

    avro = write_topic(tmp_path / "avro", [TIMES], time_partitioning={"source": "kafka_time"})
    json_table = json_topic(tmp_path / "json", [TIMES], {"source": "kafka_time"})
    events = [times(1, INFINITY, "infinity"), times(2, MINUS_INFINITY, "-infinity"), times(3, 1_700_000_000_123, None)]

    for topic, values in ((avro, [framed(avro, event) for event in events]),
                          (json_table, [json.dumps(event).encode() for event in events])):
        columnar, reference, _ = decode_both(topic, values)

        # Then every change lands, the infinities at the last and first instant of the years a timestamp holds.
        assert_same(columnar, reference)
        rows = {row["id"]: row for row in only_rows(columnar)}
        assert [rows[1][f] for f in ("created", "created_us", "created_ns", "updated")] == [LAST_MS, LAST_US, LAST_US, LAST_US]
        assert [rows[2][f] for f in ("created", "created_us", "created_ns", "updated")] == [FIRST] * 4
        assert rows[3]["created"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
        assert rows[3]["created_ns"] == dt.datetime(1970, 1, 1, 0, 28, 20, tzinfo=UTC), "nanoseconds: 1,700 s"
        assert not columnar.dead_letters


def test_a_timestamp_beyond_the_years_a_column_holds_is_a_dead_letter_naming_the_field_not_blaming_the_bytes(tmp_path):
    from tests.test_json_decoding import json_topic

    plain = {"type": "record", "name": "Plain", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}
    avro = write_topic(tmp_path / "avro", [TIMES], time_partitioning={"source": "kafka_time"})
    json_table = json_topic(tmp_path / "json", [TIMES], {"source": "kafka_time"})
    avro_plain = write_topic(tmp_path / "plain", [plain], time_partitioning={"source": "kafka_time"})
    beyond = {**times(1, 1_700_000_000_123, None), "created_us": 2**62}

    for topic, value in ((avro, framed(avro, beyond)), (json_table, json.dumps(beyond).encode()),
                         (avro_plain, framed(avro_plain, {"at": dt.datetime(2026, 1, 1, tzinfo=UTC)})[:5] + b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01")):
        columnar, reference, _ = decode_both(topic, [value])

        assert_same(columnar, reference)
        [letter] = dead_letter_rows(columnar)
        assert "another schema" not in letter["error"] and "corrupt" not in letter["error"], letter["error"]
        if topic is not avro_plain:
            assert ("created_us: 4611686018427387904 epoch microseconds is beyond the years 0001..9999 a timestamp "
                    "holds") in letter["error"], letter["error"]
        else:
            assert "a value its logical type cannot hold" in letter["error"], letter["error"]


# --- hostile parameters: the work per value is bounded before anything is built --------------------------------

@pytest.mark.parametrize("scale", [-(2**31), 2**31 - 1, -10_000_000, 10_000_000, 4300], ids=str)
def test_a_variable_scale_decimal_whose_text_would_pass_the_digits_a_decimal_lands_with_is_a_dead_letter_at_once(
        orders, scale):
    """A 15-byte record whose scale is 2^31 - 1 once made a task build a 2 GB text (4 GiB of memory, 6.7 s)."""
    import tracemalloc

    values = [framed(orders, change(ratio={"scale": scale, "value": unscaled(-12345)})), framed(orders, change())]
    tracemalloc.start()
    try:
        columnar, reference, _ = decode_both(orders, values)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert_same(columnar, reference)
    [letter] = dead_letter_rows(columnar)
    assert letter["_kafka_offset"] == 0 and len(only_rows(columnar)) == 1
    assert f"does not fit its table columns: ratio: a VariableScaleDecimal of scale {scale} and 5 digit(s) would be" \
           in letter["error"], letter["error"]
    assert "more than the 4300 a decimal lands with" in letter["error"]
    assert peak < 32 * 2**20, f"{peak / 2**20:.0f} MiB of Python memory for two records"


def test_a_variable_scale_decimal_of_4300_digits_lands_and_one_of_more_bytes_is_refused_before_its_digits_are_made(
        orders):
    widest = int("9" * 4300)
    values = [framed(orders, change(ratio={"scale": 0, "value": unscaled(widest)})),
              framed(orders, change(ratio={"scale": 2, "value": b"\x7f" + b"\xff" * 100_000}))]

    columnar, reference, _ = decode_both(orders, values)

    assert_same(columnar, reference)
    assert only_rows(columnar)[0]["ratio"] == "9" * 4300
    [letter] = dead_letter_rows(columnar)
    assert "ratio: a VariableScaleDecimal whose unscaled value is 100001 bytes, more than the 4300 digits" in letter["error"]


def test_a_decimal_of_more_bytes_than_its_precision_takes_is_refused_before_it_is_read(orders):
    """fastavro reads a decimal in time growing with the square of its bytes: 100 KB in a decimal(10,2) took 4 s."""
    values = [framed(orders, change(price=b"\x01" + b"\x00" * 100_000)), framed(orders, change(price=b"\x00" * 100_000 + b"\x01"))]

    columnar, reference, _ = decode_both(orders, values)

    assert_same(columnar, reference)
    [letter] = dead_letter_rows(columnar)
    assert letter["_kafka_offset"] == 0
    assert "a value its logical type cannot hold (a decimal(10,2) of 100001 bytes, more digits than its precision)" \
           in letter["error"], letter["error"]
    assert only_rows(columnar)[0]["price"] == Decimal("0.01"), "leading zero bytes are no digits"


@pytest.mark.parametrize(("parameters", "error"), [
    ({"scale": "2147483647"}, "scale '2147483647' and connect.decimal.precision None: the scale must be a whole number "
                              "of 0..4300 and the precision of 1..4300"),
    ({"scale": "0", "connect.decimal.precision": "0"}, "connect.decimal.precision '0'"),
    ({"scale": "-2"}, "scale '-2'"),
    ({"scale": "two"}, "scale 'two'"),
    ({"scale": "2", "connect.decimal.precision": "4301"}, "connect.decimal.precision '4301'"),
    ({"scale": "70", "connect.decimal.precision": "4300"}, None),
    ({"scale": "70"}, "decimal scale must be less than or equal to the precision of 64"),
])
def test_connect_decimal_parameters_no_column_holds_fail_at_load_naming_the_file(tmp_path, parameters, error):
    from kafka_lake.topics.loader import CatalogError

    schema = {"type": "record", "name": "R", "fields": [
        {"name": "amount", "type": connect("bytes", "org.apache.kafka.connect.data.Decimal",
                                           **{"connect.parameters": parameters})}]}
    if error is None:
        write_topic(tmp_path, [schema], time_partitioning={"source": "kafka_time"})
        return
    with pytest.raises(CatalogError) as refused:
        write_topic(tmp_path, [schema], time_partitioning={"source": "kafka_time"})
    assert "v1.avsc" in str(refused.value) and error in str(refused.value), str(refused.value)


def test_an_avro_decimal_of_more_digits_than_the_lake_lands_fails_at_load(tmp_path):
    from kafka_lake.topics.loader import CatalogError

    schema = {"type": "record", "name": "R", "fields": [
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 2**31 - 1, "scale": 0}}]}
    with pytest.raises(CatalogError, match=r"v1.avsc: field 'amount' is a decimal of precision 2147483647; the lake holds "
                                           r"decimals of at most 4300 digits"):
        write_topic(tmp_path, [schema], time_partitioning={"source": "kafka_time"})


def test_a_mysql_time_outside_one_day_lands_from_the_broker_and_its_rows_later_changes_reach_the_current_state(
        broker, spark, tmp_path):
    """Given a MySQL table captured by Debezium on the real broker: a shift opening at 12:00 updated to 27:30:00, then
    deleted (its `before` holding 27:30:00), another opening at -01:00:00, a third at 838:59:59; when the hour is
    landed on Spark and applied to the current-state table, then every change is a row (none a dead letter), the
    deleted shift has no row, and the others hold their TIME as microseconds since midnight. Before: the update and
    the delete were dead letters, and the current-state row stayed the 12:00 one."""
    import uuid
    from datetime import timedelta

    from kafka_lake.current.apply import apply_landed_hours
    from kafka_lake.current.state_table import current_table_name
    from kafka_lake.hours import KafkaHour, to_millis
    from kafka_lake.kafka.framing import encode_confluent
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.tables.formats import table_format
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
    from kafka_lake.tables.table_format import TableAccess
    from kafka_lake.topics.loader import load_topic
    from tests.change_topics import envelope
    from tests.landing_fixtures import Produced, Traffic, land_on_spark, landing_settings, produce

    folder = tmp_path / "catalog" / "mysql" / "shifts"
    folder.mkdir(parents=True)
    (folder / "v1.avsc").write_text(json.dumps(envelope({**MYSQL_ROW, "namespace": "dbserver1.inventory.customers"})))
    (folder / "key.avsc").write_text(json.dumps({"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}))
    (folder / "topic.yaml").write_text(json.dumps({
        "topic": f"mysql.inventory.shifts.{uuid.uuid4().hex[:8]}", "owner": "team-test", "key_schema": "key.avsc",
        "start_hour": "2026-11-01T00:00Z", "time_partitioning": {"source": "kafka_time"},
        "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": 7101}],
        "current_state": {"row": "after", "delete_when": {"field": "op", "equals": "d"}}}))
    topic = load_topic(folder / "topic.yaml")
    hour = dt.datetime(2026, 11, 1, 10, tzinfo=UTC)
    key_schema, value_schema = topic.key_schema.parsed, topic.version(1).parsed
    noon, late, early, last = 12 * 3600_000_000, MYSQL_TIMES[0], MYSQL_TIMES[1], MYSQL_TIMES[2]
    changes = [(1, "c", None, mysql_row(1, noon)), (1, "u", mysql_row(1, noon), mysql_row(1, late)),
               (2, "c", None, mysql_row(2, early)), (1, "d", mysql_row(1, late), None), (3, "c", None, mysql_row(3, last)),
               (4, "c", None, mysql_row(4, 0))]
    traffic = Traffic(topic)
    for n, (key, op, before, after) in enumerate(changes):
        moment = hour + timedelta(minutes=5 * n) if key != 4 else hour + timedelta(hours=1, minutes=1)
        value = {"before": before, "after": after, "source": {"db": "inventory", "ts_ms": to_millis(moment)}, "op": op,
                 "ts_ms": to_millis(moment)}
        traffic.produced.append(Produced(0, to_millis(moment), encode_confluent(7000, key_schema, {"id": key}),
                                         encode_confluent(7101, value_schema, value), "row", value, 1))
    broker.create_topic(topic.topic, 1)
    produce(broker.bootstrap_servers, traffic)
    lake = str(tmp_path / "lake")
    storage = LakeStorage(lake)

    [landed] = land_on_spark(topic, landing_settings(lake, broker.bootstrap_servers), spark, [hour])
    catalog = open_catalog(IcebergCatalogConfig(lake))
    list(apply_landed_hours(topic, storage, catalog, table_format(topic, TableAccess(storage)), [KafkaHour(hour)]))

    assert (landed.manifest.counts.rows, landed.manifest.counts.dead_letters) == (5, 0)
    state = catalog.load_table(tuple(current_table_name(topic).split("."))).scan().to_arrow().to_pylist()
    assert {row["id"]: row["opens"] for row in state} == {2: early, 3: last}
