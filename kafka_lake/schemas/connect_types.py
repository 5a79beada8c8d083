"""Kafka Connect and Debezium logical types: a plain int, long, string or bytes whose meaning Connect's Avro converter
names in `connect.name`, landed as the date, time, timestamp or decimal column it means, not as raw integers.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from kafka_lake.event_time import END_SECOND, FIRST_SECOND, TIME_UNITS, parse_event_time
from kafka_lake.schemas.avro_types import MAX_DECIMAL_DIGITS, rewritten

# Where an Avro logical type carries the same bytes (Debezium's `Date` is Avro's `date`: days since the epoch in an
# int), the catalog gives the schema that logical type when it loads (`with_connect_logical_types`), and everything
# else reads it as Avro. The others are mapped where columns are made (`connect_name`):
#   - `Timestamp`, `MicroTimestamp` and `NanoTimestamp` (longs of milli-, micro- and nanoseconds since the epoch in
#     the database's own clock: a DATETIME has no zone) land as UTC timestamps of that time, in milli- or
#     microseconds: Spark, Hive and Athena hold no nanoseconds, so those below the microsecond are cut. PostgreSQL's
#     `infinity` and `-infinity` come as Long.MAX and Long.MIN: they land at the column's last and first instant of
#     the years 0001..9999 (`9999-12-31T23:59:59.999999Z`, `0001-01-01T00:00:00Z`), where a query comparing times
#     still finds them after and before every other; any other value beyond those years is a dead letter saying so.
#   - Debezium's `Time`, `MicroTime` and `NanoTime` land as signed counts since midnight (int milliseconds, bigint
#     microseconds, bigint microseconds with the nanoseconds below them cut), not as a time of day: a database's TIME
#     is a duration, MySQL's from -838:59:59 to 838:59:59, PostgreSQL's up to 24:00:00, and no Parquet, Hive or
#     Iceberg time of day holds those. Kafka Connect's own `Time` is a time of day and lands as one.
#   - `ZonedTimestamp` (ISO 8601 text with an offset) lands as a UTC timestamp in microseconds; `infinity` and
#     `-infinity` as the bounds above; other text that is no such time is a dead letter.
#   - `VariableScaleDecimal` (a record of `scale` and the unscaled `value` bytes, Debezium's NUMERIC without a
#     scale) lands as its exact decimal text: no column of one scale holds values of many. Its text has at most
#     `MAX_DECIMAL_DIGITS` digits: a scale or value that would make more is a dead letter before any text is built.
TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
NANO_TIME = "io.debezium.time.NanoTime"
MICRO_TIME = "io.debezium.time.MicroTime"
DEBEZIUM_TIME = "io.debezium.time.Time"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
# The precision Confluent's Avro converter declares for a Connect decimal that names none.
CONNECT_DEFAULT_PRECISION = 64

# (Avro type, connect.name) → the Avro logical type of the same bytes.
_AS_AVRO_LOGICAL: dict[tuple[str, str | None], str] = {
    ("int", "io.debezium.time.Date"): "date",
    ("int", "org.apache.kafka.connect.data.Date"): "date",
    ("int", "org.apache.kafka.connect.data.Time"): "time-millis",
    ("long", "org.apache.kafka.connect.data.Timestamp"): "timestamp-millis",
}
# Debezium's timestamps (longs) by connect.name: the unit they count, which is also what a plain long event time
# of that type counts (the catalog's `time_partitioning.unit` default).
TIME_UNIT_OF: dict[str | None, str] = {TIMESTAMP: "ms", MICRO_TIMESTAMP: "us", NANO_TIMESTAMP: "ns"}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_LAST_INSTANT = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=timezone.utc)
_FIRST_INSTANT = datetime(1, 1, 1, tzinfo=timezone.utc)


class ConnectTypeError(ValueError):
    """A Connect type whose parameters no column can hold; the catalog names the file."""


def connect_name(node: Any) -> str | None:
    """The Kafka Connect type a schema node names, if any."""
    return node.get("connect.name") if isinstance(node, dict) and isinstance(node.get("connect.name"), str) else None


def with_connect_logical_types(schema: Any) -> Any:
    """A copy of the schema in which every Connect type with an Avro twin carries that logical type.

    Where an Avro logical type carries the same bytes (Debezium's `Date` is Avro's `date`: days since the epoch in an
    int), the catalog gives the schema that logical type when it loads, and everything else reads it as Avro."""
    return rewritten(schema, _with_connect_logical_type)


def _with_connect_logical_type(node: dict) -> dict:
    kind = node.get("type")
    if "logicalType" in node or not isinstance(kind, str):
        return node
    name = connect_name(node)
    if (kind, name) in _AS_AVRO_LOGICAL:
        node["logicalType"] = _AS_AVRO_LOGICAL[kind, name]
    elif (kind, name) == ("bytes", CONNECT_DECIMAL):
        given = node.get("connect.parameters")
        parameters = given if isinstance(given, dict) else {}
        scale, precision = parameters.get("scale", "0"), parameters.get("connect.decimal.precision")
        if not _whole_text(scale, 0) or (precision is not None and not _whole_text(precision, 1)):
            raise ConnectTypeError(
                f"a Kafka Connect Decimal with connect.parameters scale {scale!r:.40} and connect.decimal.precision "
                f"{precision!r:.40}: the scale must be a whole number of 0..{MAX_DECIMAL_DIGITS} and the precision of "
                f"1..{MAX_DECIMAL_DIGITS} (no decimal column holds more digits, nor a negative scale)")
        node.update(logicalType="decimal", scale=int(scale),
                    precision=int(precision) if precision is not None else CONNECT_DEFAULT_PRECISION)
    return node


def _whole_text(text: Any, smallest: int) -> bool:
    """Whether a Connect parameter is the text of a whole number of `smallest`..`MAX_DECIMAL_DIGITS`."""
    return (isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 6
            and smallest <= int(text) <= MAX_DECIMAL_DIGITS)


def variable_scale_decimal_text(value: dict) -> str:
    """A VariableScaleDecimal's exact text: its unscaled big-endian two's complement `value` at its `scale`, of at
    most `MAX_DECIMAL_DIGITS` digits; a value whose text would be longer raises before any of it is built."""
    scale, unscaled_bytes = value["scale"], value["value"]
    # 10 ** MAX_DECIMAL_DIGITS needs this many bytes: no value of more holds fewer digits (turning a longer number
    # into digits takes time growing with the square of its length).
    if len(unscaled_bytes) > _MAX_DECIMAL_BYTES:
        raise ValueError(f"a VariableScaleDecimal whose unscaled value is {len(unscaled_bytes)} bytes, more than the "
                         f"{MAX_DECIMAL_DIGITS} digits a decimal lands with")
    unscaled = int.from_bytes(unscaled_bytes, "big", signed=True)
    digits = str(abs(unscaled))
    length = len(digits) - scale if scale <= 0 else max(len(digits), scale + 1)  # with the zeros the scale adds
    if length > MAX_DECIMAL_DIGITS:
        raise ValueError(f"a VariableScaleDecimal of scale {scale} and {len(digits)} digit(s) would be {length} digits "
                         f"of text, more than the {MAX_DECIMAL_DIGITS} a decimal lands with")
    return format(Decimal((int(unscaled < 0), tuple(map(int, digits)), -scale)), "f")  # exact: no context rounds it


_MAX_DECIMAL_BYTES = (MAX_DECIMAL_DIGITS * 3322 // 1000 + 8) // 8 + 1


def debezium_timestamp(unit: str):
    """The converter of a Debezium timestamp of `unit`s since the epoch to a count a timestamp column of `unit` (ms,
    or us for micro- and nanoseconds) holds: Long.MAX and Long.MIN (PostgreSQL's infinity and -infinity) as its last
    and first instant of the years 0001..9999, anything else beyond them refused."""
    per_second = TIME_UNITS[unit]
    column_per_second = min(per_second, TIME_UNITS["us"])
    first, last = FIRST_SECOND * column_per_second, END_SECOND * column_per_second - 1
    shrink = per_second // column_per_second

    def to_column(count: int) -> int:
        if count == _INT64_MAX:
            return last
        if count == _INT64_MIN:
            return first
        landed = count // shrink
        if not first <= landed <= last:
            raise ValueError(f"{count} epoch {_UNIT_NAMES[unit]} is beyond the years 0001..9999 a timestamp holds "
                             f"(PostgreSQL's infinity and -infinity come as {_INT64_MAX} and {_INT64_MIN} and land at "
                             f"the ends of those years)")
        return landed

    return to_column


_UNIT_NAMES = {"ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def zoned_timestamp(text: str) -> datetime:
    """A ZonedTimestamp's UTC time; PostgreSQL's `infinity` and `-infinity` at the last and first instant of the years
    0001..9999."""
    if text == "infinity":
        return _LAST_INSTANT
    if text == "-infinity":
        return _FIRST_INSTANT
    return parse_event_time(text)


# The values of each Debezium timestamp that stand for PostgreSQL's infinities, which a columnar path leaves to the
# record path's converters above.
INFINITE_COUNTS = (_INT64_MIN, _INT64_MAX)
INFINITE_TEXTS = ("infinity", "-infinity")
