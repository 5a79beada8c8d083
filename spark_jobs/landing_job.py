"""The raw landing Spark job: one Spark task per offset slice, reports collected on the driver.

Spark schedules, retries and places the tasks; all the work is `kafka_lake.slice_landing`.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from kafka_lake.slice_landing import SliceReport, SliceTask, land_slice
from spark_jobs.tasks import run_on_spark


def run_slices_on_spark(spark: SparkSession, tasks: list[SliceTask], description: str = "") -> list[SliceReport]:
    return run_on_spark(spark, tasks, land_slice, description or f"land {len(tasks)} slice(s)")
