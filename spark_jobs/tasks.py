"""Running a list of domain tasks as Spark tasks: one Spark partition per task, results collected.
One task is the unit Spark schedules and retries; all the work is a plain function of the domain core.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from pyspark.errors import PythonException
from pyspark.sql import SparkSession

Task = TypeVar("Task")
Report = TypeVar("Report")

_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*): ?(?P<message>.*)$")


class SparkTaskFailed(RuntimeError):
    """A task raised in a Spark worker (after Spark's own retries): the worker's exception type and message."""

    def __init__(self, description: str, error_type: str, message: str):
        self.error_type = error_type  # qualified, as the worker printed it: `kafka_lake.decoding.pii.MissingPiiKey`
        self.message = message
        super().__init__(f"{error_type.rsplit('.', 1)[-1]}: {message} (raised in a Spark task of '{description}')")


def worker_exception(text: str) -> tuple[str, str] | None:
    """(type, message) of the exception a Python worker's traceback ends with; None when there is none."""
    if _TRACEBACK not in text:
        return None
    lines = text.rsplit(_TRACEBACK, 1)[1].splitlines()
    for index, line in enumerate(lines):
        if line and not line[0].isspace():
            found = _EXCEPTION_LINE.match(line)
            if not found:
                return None
            more = [rest for rest in lines[index + 1:] if rest.strip() and not rest.startswith(("\tat ", " "))]
            return found["type"], "\n".join([found["message"], *more]).strip()
    return None


def run_on_spark(spark: SparkSession, tasks: list[Task], work: Callable[[Task], Report], description: str) -> list[Report]:
    """A task that raises reaches the driver as Spark's "An exception was thrown from the Python worker", its
    cause buried in the worker's traceback: the driver raises `SparkTaskFailed` naming that cause instead."""
    if not tasks:
        return []
    context = spark.sparkContext
    context.setJobDescription(description)  # what the Spark UI shows for the job
    try:
        return context.parallelize(tasks, numSlices=len(tasks)).map(work).collect()
    except PythonException as error:
        cause = worker_exception(str(error))
        if cause is None:
            raise
        raise SparkTaskFailed(description, *cause) from error
    finally:
        context.setJobDescription(None)
