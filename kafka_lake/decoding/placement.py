"""Placement: the hour a decoded record lands in by its topic's time source (its event time, or its Kafka time), for
one decoded value or for decoded columns; and the Kafka hour a dead letter lands in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from kafka_lake.decoding.avro.columnar_mapping import non_null
from kafka_lake.decoding.decoded_batch import Placement, Undecodable
from kafka_lake.event_time import EPOCH, hours_of_epoch_counts, hours_of_rfc3339, hours_of_timestamps, parse_event_time
from kafka_lake.hours import KafkaHour, floor_hour, hour_of_millis
from kafka_lake.kafka.records import KafkaRecord, names_an_hour
from kafka_lake.table_spec import TableSpec

HOUR_MS = 3_600_000


class TimePlacement:
    """Places a topic's decoded records in hours. `kafka_hour`, the Kafka hour being landed, is where a dead letter
    goes whose Kafka timestamp names no hour (-1, the year 10000)."""

    def __init__(self, topic: TableSpec, kafka_hour: KafkaHour | None = None):
        self._topic = topic
        self._kafka_hour = kafka_hour

    def hour_of_value(self, record: KafkaRecord, value: dict, version: int) -> datetime:
        """The hour of one decoded value (as fastavro gives it) of schema version `version`; raises `Undecodable`."""
        path = self._topic.time_field
        if path is None:
            if not names_an_hour(record.timestamp_ms):
                raise Undecodable("unplaceable_kafka_timestamp", _unplaceable_kafka_timestamp(record.timestamp_ms))
            return hour_of_millis(record.timestamp_ms)
        found: Any = value
        for step in path:
            if type(found) is tuple:  # a nested record under a nullable union comes as (name, record)
                found = found[1]
            found = found.get(step) if isinstance(found, dict) else None
        field_path = ".".join(path)
        if found is None:
            raise Undecodable("missing_event_time", f"event-time field {field_path!r} is absent or null (version {version})")
        try:
            return floor_hour(parse_event_time(found, self._topic.time_unit))
        except ValueError as error:
            raise Undecodable("unparseable_event_time", f"event-time field {field_path!r}: {error}") from None

    def hours_of_columns(self, decoded: pa.RecordBatch, timestamps_ms: Sequence[int],
                         rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(epoch hour per row, rows `hour_of_value` must place: a missing or unplaceable time, which it says why) of
        the decoded columns of the batch's `rows`, whose Kafka timestamps are `timestamps_ms` of the whole batch."""
        path = self._topic.time_field
        if path is None:
            timestamps = np.asarray(timestamps_ms, dtype=np.int64)[rows]
            return timestamps // HOUR_MS, ~names_an_hour(timestamps)
        column = decoded.column(path[0])
        present = non_null(column)
        for step in path[1:]:
            column = column.field(step)
            present &= non_null(column)
        kind = column.type
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            # Only years 0001..9999 reach here: the columnar nodes leave the rest to fastavro (a misfit).
            return hours_of_timestamps(column), ~present
        if pa.types.is_int64(kind):  # a plain long counting the topic's unit since the epoch
            hours, outside_years = hours_of_epoch_counts(column, self._topic.time_unit)
            return hours, ~present | outside_years
        if pa.types.is_string(kind):
            return hours_of_rfc3339(column, present)
        return np.zeros(len(decoded), dtype=np.int64), np.ones(len(decoded), dtype=bool)  # local timestamps: say why

    def dead_letter_hour(self, record: KafkaRecord) -> datetime:
        """Dead letters are placed by Kafka time; one whose Kafka timestamp names no hour, in the Kafka hour landed."""
        if names_an_hour(record.timestamp_ms):
            return hour_of_millis(record.timestamp_ms)
        if self._kafka_hour is None:
            raise ValueError(f"{self._topic.topic} partition {record.partition} offset {record.offset}: a Kafka timestamp "
                             f"that names no hour needs the Kafka hour being landed (BatchDecoder's kafka_hour)")
        return self._kafka_hour.start


def place_by_hour(placed: dict[Placement, list[pa.Table]], schema_version: int, table: pa.Table,
                  hours: np.ndarray) -> None:
    """Adds the rows of each hour (`hours`: the epoch hour of each row), in their order, to `placed` under
    (`schema_version`, that hour)."""
    distinct = np.unique(hours)
    for hour in distinct:
        rows = table if len(distinct) == 1 else table.filter(pa.array(hours == hour))
        placed[Placement(schema_version, EPOCH + timedelta(hours=int(hour)))].append(rows)


def _unplaceable_kafka_timestamp(timestamp_ms: int) -> str:
    what = "-1, Kafka's \"no timestamp\"" if timestamp_ms == -1 else (
        "negative, which Kafka refuses" if timestamp_ms < 0 else "in the year 10000 or later")
    return (f"Kafka timestamp {timestamp_ms} ({what}) places the record in no hour of this Kafka-time topic; it is kept "
            f"in the Kafka hour that was landed, the one whose offsets hold it")
