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
def failures_explained(context, subject: str, done_so_far: Callable[[], str] | None = None,
                       not_done: Callable[[], list[str]] | None = None):
    """Logs the cause as the step's first error line and fails the step with it, naming `subject` (the topic or table
    the step serves) and the hours it did not do (`not_done`, else all of the run's) in the failure's metadata, which
    the alert lists per failed step. A lasting cause is not retried. `done_so_far`: what the step did before the
    failure (the hours of a range it landed), said after the cause."""
    try:
        yield
    except Failure:
        raise
    except Exception as error:
        done = done_so_far() if done_so_far else ""
        line = f"{cause_line(error)}{' ' + done if done else ''}"
        context.log.error(line)
        lasting = is_lasting(error)
        _retry_the_run(context, not lasting)
        hours = not_done() if not_done is not None else _hours_of(context)
        metadata = {"cause": type(error).__name__, "subject": subject, "hours": ", ".join(hours)}
        if lasting:
            metadata["retried"] = "no: a retry cannot change it"
        raise Failure(description=line, allow_retries=not lasting, metadata=metadata) from error


def _retry_the_run(context, heals: bool) -> None:
    """The daemon decides on a run retry from the run's tags when the run fails. A run of many topics is retried (its
    failed steps only) when any step failed for a cause a retry can heal; a run whose every failure is lasting is not.
    The steps of a run run one after another, so the tag's last write is the right one."""
    current = context.instance.get_run_by_id(context.run.run_id).tags.get(RETRY_ON_ASSET_OR_OP_FAILURE_TAG)
    wanted = "true" if heals or current == "true" else "false"
    if current != wanted:
        context.instance.add_run_tags(context.run.run_id, {RETRY_ON_ASSET_OR_OP_FAILURE_TAG: wanted})


def _hours_of(context) -> list[str]:
    if context.has_partition_key_range or context.has_partition_key:
        return list(context.partition_keys)
    return []
