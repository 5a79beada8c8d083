"""Hourly partitions in UTC, one definition per topic starting at its `start_hour`."""

import warnings
from contextlib import contextmanager
from functools import cache

from dagster import HourlyPartitionsDefinition

from kafka_lake.hours import PARTITION_KEY_FORMAT


@cache
def _hourly_from(start_key: str, end_offset: int = 0) -> HourlyPartitionsDefinition:
    return HourlyPartitionsDefinition(start_date=start_key, timezone="UTC", fmt=PARTITION_KEY_FORMAT,
                                      end_offset=end_offset)


def hourly_partitions(topic, open_hour: bool = False) -> HourlyPartitionsDefinition:
    """From the topic's `start_hour` to the last hour ended; `open_hour`, to the hour the clock is in: the raw layer of
    a topic landed in increments (`open_hour`), whose open hour is a partition that shows what it holds so far."""
    return _hourly_from(topic.start_hour.strftime(PARTITION_KEY_FORMAT),
                        1 if open_hour and topic.open_hour_minutes is not None else 0)


@contextmanager
def quiet_warnings(*categories: type[Warning]):
    """Dagster 1.13 marks backfill policies beta and partitioned asset checks preview; the warnings would
    repeat at every load of the code location."""
    with warnings.catch_warnings():
        for category in categories:
            warnings.simplefilter("ignore", category)
        yield
