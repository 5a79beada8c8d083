"""Hourly partitions in UTC, one definition per topic starting at its `start_hour`."""

from functools import lru_cache

from dagster import HourlyPartitionsDefinition

from kafka_lake.hours import PARTITION_KEY_FORMAT


@lru_cache(maxsize=None)
def _hourly_from(start_key: str) -> HourlyPartitionsDefinition:
    return HourlyPartitionsDefinition(start_date=start_key, timezone="UTC", fmt=PARTITION_KEY_FORMAT)


def hourly_partitions(topic) -> HourlyPartitionsDefinition:
    return _hourly_from(topic.start_hour.strftime(PARTITION_KEY_FORMAT))
