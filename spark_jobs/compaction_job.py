"""The compaction Spark job: one Spark task per partition (schema version) of a placement hour.

All the work is `kafka_lake.upkeep.compaction.compact_partition`; the driver commits and publishes.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from kafka_lake.upkeep.compaction import CompactionReport, CompactionTask, compact_partition
from spark_jobs.tasks import run_on_spark


def run_compactions_on_spark(spark: SparkSession, tasks: list[CompactionTask], description: str = "") -> list[CompactionReport]:
    return run_on_spark(spark, tasks, compact_partition, description or f"compact {len(tasks)} partition(s)")
