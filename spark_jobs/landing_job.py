"""The raw landing Spark job: one Spark task per offset slice, reports collected on the driver.

Spark schedules, retries and places the tasks; all the work is `kafka_lake.slice_landing`.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from kafka_lake.slice_landing import SliceReport, SliceTask, land_slice


def run_slices_on_spark(spark: SparkSession, tasks: list[SliceTask], description: str = "") -> list[SliceReport]:
    if not tasks:
        return []
    context = spark.sparkContext
    context.setJobDescription(description or f"land {len(tasks)} slice(s)")
    try:
        # One partition per slice: a slice is the unit Spark retries.
        return context.parallelize(tasks, numSlices=len(tasks)).map(land_slice).collect()
    finally:
        context.setJobDescription(None)
