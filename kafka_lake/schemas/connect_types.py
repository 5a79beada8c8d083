"""Kafka Connect and Debezium logical types: a plain int, long, string or bytes whose meaning Connect's Avro converter
names in `connect.name`, landed as the date, time, timestamp or decimal column it means, not as raw integers.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kafka_lake.schemas.avro_types import rewritten

# Four have no Avro twin and are mapped where columns are made (`connect_name`):
#   - `NanoTimestamp` (a long of nanoseconds) lands as a UTC timestamp in microseconds, and `NanoTime` as a time of
#     day in microseconds: Spark, Hive and Athena hold no nanoseconds; the nanoseconds below the microsecond are cut.
#   - `ZonedTimestamp` (ISO 8601 text with an offset) lands as a UTC timestamp in microseconds; text that is no such
#     time is a dead letter.
#   - `VariableScaleDecimal` (a record of `scale` and the unscaled `value` bytes, Debezium's NUMERIC without a
#     scale) lands as its exact decimal text: no column of one scale holds values of many.
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
        if isinstance(scale, str) and scale.isdigit() and (precision is None or (isinstance(precision, str) and precision.isdigit())):
            node.update(logicalType="decimal", scale=int(scale),
                        precision=int(precision) if precision is not None else CONNECT_DEFAULT_PRECISION)
    return node


def variable_scale_decimal_text(value: dict) -> str:
    """A VariableScaleDecimal's exact text: its unscaled big-endian two's complement `value` at its `scale`."""
    unscaled = int.from_bytes(value["value"], "big", signed=True)
    digits = tuple(int(digit) for digit in str(abs(unscaled)))
    return format(Decimal((int(unscaled < 0), digits, -value["scale"])), "f")  # exact: no context rounds it
