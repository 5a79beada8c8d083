"""The compaction Spark job: one Spark task per partition (schema version) of a placement hour.

All the work is `kafka_lake.compaction.compact_partition`; the driver commits and publishes.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from kafka_lake.compaction import CompactionReport, CompactionTask, compact_partition


def run_compactions_on_spark(spark: SparkSession, tasks: list[CompactionTask], description: str = "") -> list[CompactionReport]:
    if not tasks:
        return []
    context = spark.sparkContext
    context.setJobDescription(description or f"compact {len(tasks)} partition(s)")
    try:
        return context.parallelize(tasks, numSlices=len(tasks)).map(compact_partition).collect()
    finally:
        context.setJobDescription(None)
