"""The raw landing Spark job: one Spark task per offset slice, reports collected on the driver.

Spark schedules, retries and places the tasks; all the work is `kafka_lake.landing.slice_task`.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future

from pyspark.sql import SparkSession

from kafka_lake.landing.slice_task import SliceReport, SliceTask, land_slice
from spark_jobs.tasks import run_on_spark
from spark_jobs.worker_process import collector_held, keep_freed_batch_memory


def land_slice_in_worker(task: SliceTask) -> SliceReport:
    """One slice landed by a Spark Python worker, its process tuned for landing tasks (`worker_process`)."""
    keep_freed_batch_memory()
    with collector_held():
        return land_slice(task)


def run_slices_on_spark(spark: SparkSession, tasks: list[SliceTask], description: str = "") -> list[SliceReport]:
    return run_on_spark(spark, tasks, land_slice_in_worker, description or f"land {len(tasks)} slice(s)")


class SlicesOnSpark:
    """Starts each hour's landing job from a thread of its own, for `land_hours`: a job started while another
    runs takes the slots that one leaves idle, and Spark's FIFO scheduler still serves the earlier job's
    tasks first. Cancelling a job's future cancels the job's tasks."""

    def __init__(self, spark: SparkSession, topic: str):
        self._spark = spark
        self._topic = topic

    def __call__(self, tasks: list[SliceTask]) -> Future:
        job = _SparkJob(self._spark, f"kafka-lake-landing-{uuid.uuid4().hex}")
        description = f"land {self._topic} {tasks[0].hour}"
        threading.Thread(target=job.run, args=(tasks, description), name=description, daemon=True).start()
        return job


class _SparkJob(Future):
    def __init__(self, spark: SparkSession, group: str):
        super().__init__()
        self._spark, self._group = spark, group

    def run(self, tasks: list[SliceTask], description: str) -> None:
        if not self.set_running_or_notify_cancel():
            return
        try:
            self._spark.sparkContext.setJobGroup(self._group, description, interruptOnCancel=True)
            self.set_result(run_slices_on_spark(self._spark, tasks, description))
        except BaseException as error:  # handed to whoever waits for the reports
            self.set_exception(error)

    def cancel(self) -> bool:
        if self.running():
            self._spark.sparkContext.cancelJobGroup(self._group)
        return super().cancel()
