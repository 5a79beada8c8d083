"""Kafka Connect and Debezium logical types: schemas written by Connect's Avro converter name what a plain int, long,
string or bytes means in `connect.name` rather than in Avro's `logicalType`. They land as the date, time, timestamp
and decimal columns they mean, not as raw integers.

Where an Avro logical type carries the same bytes (Debezium's `Date` is Avro's `date`: days since the epoch in an
int), the catalog gives the schema that logical type when it loads (`with_connect_logical_types`), and everything
else reads it as Avro. Four have no Avro twin and are mapped where columns are made (`connect_name`):
  - `NanoTimestamp` (a long of nanoseconds) lands as a UTC timestamp in microseconds, and `NanoTime` as a time of
    day in microseconds: Spark, Hive and Athena hold no nanoseconds; the nanoseconds below the microsecond are cut.
  - `ZonedTimestamp` (ISO 8601 text with an offset) lands as a UTC timestamp in microseconds; text that is no such
    time is a dead letter.
  - `VariableScaleDecimal` (a record of `scale` and the unscaled `value` bytes, Debezium's NUMERIC without a
    scale) lands as its exact decimal text: no column of one scale holds values of many. Its text has at most
    `MAX_DECIMAL_DIGITS` digits: a scale or value that would make more is a dead letter before any text is built.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kafka_lake.avro_types import MAX_DECIMAL_DIGITS, rewritten

NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
NANO_TIME = "io.debezium.time.NanoTime"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
# The precision Confluent's Avro converter declares for a Connect decimal that names none.
CONNECT_DEFAULT_PRECISION = 64

# (Avro type, connect.name) → the Avro logical type of the same bytes. Debezium's Timestamp and MicroTimestamp count
# from the epoch in the database's own clock (a DATETIME has no zone): they land as UTC timestamps of that time.
_AS_AVRO_LOGICAL: dict[tuple[str, str | None], str] = {
    ("int", "io.debezium.time.Date"): "date",
    ("int", "org.apache.kafka.connect.data.Date"): "date",
    ("int", "io.debezium.time.Time"): "time-millis",
    ("int", "org.apache.kafka.connect.data.Time"): "time-millis",
    ("long", "io.debezium.time.MicroTime"): "time-micros",
    ("long", "io.debezium.time.Timestamp"): "timestamp-millis",
    ("long", "org.apache.kafka.connect.data.Timestamp"): "timestamp-millis",
    ("long", "io.debezium.time.MicroTimestamp"): "timestamp-micros",
}
# What a plain long event time counts, by its connect.name (the catalog's `time_partitioning.unit` default).
TIME_UNIT_OF: dict[str | None, str] = {NANO_TIMESTAMP: "ns"}


class ConnectTypeError(ValueError):
    """A Connect type whose parameters no column can hold; the catalog names the file."""


def connect_name(node: Any) -> str | None:
    """The Kafka Connect type a schema node names, if any."""
    return node.get("connect.name") if isinstance(node, dict) and isinstance(node.get("connect.name"), str) else None


def with_connect_logical_types(schema: Any) -> Any:
    """A copy of the schema in which every Connect type with an Avro twin carries that logical type."""
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
