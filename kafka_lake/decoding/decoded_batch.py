"""What decoding a batch of one topic's Kafka records gives: rows placed by (schema version, hour), dead letters with
their raw bytes and why, and tombstones; every record in exactly one of them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

import pyarrow as pa

from kafka_lake.kafka.records import KAFKA_COLUMNS, KafkaRecord, kafka_columns

DEAD_LETTER_SCHEMA = pa.schema([*KAFKA_COLUMNS, pa.field("value", pa.binary()), pa.field("error", pa.string())])


@dataclass(frozen=True, order=True)
class Placement:
    """Where decoded rows land: `schema_version={v}/date=…/hour=…` of the topic's table."""

    schema_version: int
    hour: datetime  # UTC, on the hour: event hour (event_time topics) or Kafka-time hour (kafka_time)


@dataclass
class DecodedBatch:
    rows: dict[Placement, pa.Table]
    dead_letters: dict[datetime, pa.Table]  # by Kafka-time hour
    tombstones: int
    dead_letter_causes: Counter[str]
    records: int  # the input's length: rows + dead letters + tombstones + routed away + unrouted
    routed_away: int = 0  # records of a routed topic that another table takes (or, for all but one, no table)
    unrouted: dict[datetime, pa.Table] = field(default_factory=dict)  # records no table takes, by Kafka-time hour
    # Of the dead letters, those whose schema id the table lacks: how many of each id (a producer's new version).
    unknown_schema_ids: Counter[int] = field(default_factory=Counter)

    @property
    def rows_count(self) -> int:
        return sum(table.num_rows for table in self.rows.values())


class Undecodable(Exception):
    """A record that cannot land as a row; `cause` is its dead letter's cause (`undecodable_payload`, …)."""

    def __init__(self, cause: str, detail: str):
        super().__init__(f"{cause}: {detail}")
        self.cause = cause


class Rejected(NamedTuple):
    """A dead letter waiting for its table; the text, not the exception, so no frames stay pinned."""

    record: KafkaRecord
    cause: str
    error: str

    @classmethod
    def of(cls, record: KafkaRecord, why: Undecodable) -> Rejected:
        return cls(record, why.cause, str(why))


def dead_letter_table(topic: str, letters: list[Rejected]) -> pa.Table:
    """The dead letters' rows in log order: the Kafka columns, the raw value and the error."""
    letters.sort(key=lambda letter: (letter.record.partition, letter.record.offset))
    records = [letter.record for letter in letters]
    columns = [
        *kafka_columns(topic, records),
        pa.array([record.value for record in records], pa.binary()),
        pa.array([letter.error for letter in letters], pa.string()),
    ]
    return pa.Table.from_arrays(columns, schema=DEAD_LETTER_SCHEMA)
