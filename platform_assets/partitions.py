"""Hourly partitions in UTC, one definition per topic starting at its `start_hour`."""

import warnings
from contextlib import contextmanager
from functools import cache

from dagster import HourlyPartitionsDefinition

from kafka_lake.hours import PARTITION_KEY_FORMAT


@cache
def _hourly_from(start_key: str) -> HourlyPartitionsDefinition:
    return HourlyPartitionsDefinition(start_date=start_key, timezone="UTC", fmt=PARTITION_KEY_FORMAT)


def hourly_partitions(topic) -> HourlyPartitionsDefinition:
    return _hourly_from(topic.start_hour.strftime(PARTITION_KEY_FORMAT))


@contextmanager
def quiet_warnings(*categories: type[Warning]):
    """Dagster 1.13 marks backfill policies beta and partitioned asset checks preview; the warnings would
    repeat at every load of the code location."""
    with warnings.catch_warnings():
        for category in categories:
            warnings.simplefilter("ignore", category)
        yield
