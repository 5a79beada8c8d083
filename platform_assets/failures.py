"""Failures told apart: those a retry heals (a broker or S3 server briefly away) fail the run, which the
daemon retries whole (`run_retries` in dagster.yaml); those that stay until a person acts (a missing secret,
an hour not closed yet, offsets lost, a broken catalog entry) fail without a retry. Either way the one-line
cause is the first error line of the run's log and the alert's text.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

from dagster import Failure
from dagster._core.storage.tags import RETRY_ON_ASSET_OR_OP_FAILURE_TAG

from kafka_lake.current.ledger import HourNotLanded
from kafka_lake.decoding.pii import MissingPiiKey
from kafka_lake.landing.slices import HourNotClosed, OffsetsLost
from kafka_lake.tables.table_schema import TableSchemaError
from kafka_lake.topics.loader import CatalogError
from spark_jobs.tasks import SparkTaskFailed

# A retry cannot change these: each waits for a person (a secret, the catalog) or for time (an open hour, an hour not
# landed yet: the sensors ask again when it is). An hour not due for compaction is skipped, not failed.
LASTING = (MissingPiiKey, HourNotClosed, OffsetsLost, CatalogError, TableSchemaError, HourNotLanded)
_LASTING_NAMES = {f"{kind.__module__}.{kind.__qualname__}" for kind in LASTING}


class PreflightError(RuntimeError):
    """A setting or secret the run needs is missing or malformed; found before any Spark work starts."""


def is_lasting(error: BaseException) -> bool:
    if isinstance(error, SparkTaskFailed):
        return error.error_type in _LASTING_NAMES
    return isinstance(error, (*LASTING, PreflightError))


def cause_line(error: BaseException) -> str:
    """The error as one line: its type and the first line of its message."""
    if isinstance(error, SparkTaskFailed):
        return str(error).splitlines()[0]
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0] if message else '(no message)'}"


@contextmanager
def failures_explained(context, done_so_far: Callable[[], str] | None = None):
    """Logs the cause as the run's first error line; a lasting one fails the step, and the run, without retries.
    `done_so_far`: what the run did before the failure (the hours of a range it landed), said after the cause."""
    try:
        yield
    except Failure:
        raise
    except Exception as error:
        done = done_so_far() if done_so_far else ""
        line = f"{cause_line(error)}{' ' + done if done else ''}"
        context.log.error(line)
        if is_lasting(error):
            # The daemon decides on a run retry from the run's tags when the run fails: this run is not retried.
            context.instance.add_run_tags(context.run.run_id, {RETRY_ON_ASSET_OR_OP_FAILURE_TAG: "false"})
            raise Failure(description=line, allow_retries=False,
                          metadata={"cause": type(error).__name__, "retried": "no: a retry cannot change it"}) from error
        if done:  # the alert's text is the failure's description: it says what the run did before it failed
            raise Failure(description=line, metadata={"cause": type(error).__name__}) from error
        raise
