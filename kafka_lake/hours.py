"""Hours: the unit of landing. A `KafkaHour` is [start, start + 1h) in UTC.

Dagster partition keys (`YYYY-MM-DD-HH:00`), epoch milliseconds and lake paths all meet here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

ONE_HOUR = timedelta(hours=1)
# The first and last hours a datetime holds, and so a placement hour can be (event times of the years 0001..9999).
FIRST_HOUR = datetime(1, 1, 1, tzinfo=timezone.utc)
LAST_HOUR = datetime(9999, 12, 31, 23, tzinfo=timezone.utc)
PARTITION_KEY_FORMAT = "%Y-%m-%d-%H:%M"


def floor_hour(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no time zone; the platform works in UTC")
    return moment.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def hour_of_millis(epoch_ms: int) -> datetime:
    return floor_hour(datetime.fromtimestamp(epoch_ms // 1000, tz=timezone.utc))


def to_millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def hour_key(hour: datetime) -> str:
    """The one string form of an hour, Kafka or placement, wherever the platform writes one: Dagster's hourly
    partition key `YYYY-MM-DD-HH:00` in UTC (the year in four digits also before 1000, where `%Y` gives fewer)."""
    return f"{hour.year:04d}-{hour:%m-%d-%H}:00"


def hour_of_key(key: str) -> datetime:
    try:
        return datetime.strptime(key, PARTITION_KEY_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"{key!r} is not an hour like 2026-11-01-13:00") from None


@dataclass(frozen=True, order=True)
class KafkaHour:
    """An hour of Kafka time: the records whose Kafka timestamp falls in [start, end)."""

    start: datetime

    def __post_init__(self) -> None:
        if self.start != floor_hour(self.start):
            raise ValueError(f"{self.start.isoformat()} is not the start of an hour in UTC")

    @classmethod
    def from_partition_key(cls, key: str) -> KafkaHour:
        return cls(hour_of_key(key))

    @classmethod
    def containing(cls, moment: datetime) -> KafkaHour:
        return cls(floor_hour(moment))

    @property
    def end(self) -> datetime:
        return self.start + ONE_HOUR

    @property
    def start_ms(self) -> int:
        return to_millis(self.start)

    @property
    def end_ms(self) -> int:
        return to_millis(self.end)

    @property
    def partition_key(self) -> str:
        return hour_key(self.start)

    def previous(self) -> KafkaHour:
        return KafkaHour(self.start - ONE_HOUR)

    def next(self) -> KafkaHour:
        return KafkaHour(self.end)

    def __str__(self) -> str:
        return self.partition_key
