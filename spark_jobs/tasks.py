"""Running a list of domain tasks as Spark tasks: one Spark partition per task, results collected.

One task is the unit Spark schedules and retries; all the work is a plain function of the domain core.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from pyspark.sql import SparkSession

Task = TypeVar("Task")
Report = TypeVar("Report")


def run_on_spark(spark: SparkSession, tasks: list[Task], work: Callable[[Task], Report], description: str) -> list[Report]:
    if not tasks:
        return []
    context = spark.sparkContext
    context.setJobDescription(description)  # what the Spark UI shows for the job
    try:
        return context.parallelize(tasks, numSlices=len(tasks)).map(work).collect()
    finally:
        context.setJobDescription(None)
