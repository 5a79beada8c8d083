"""The sensors' memory of what they asked for (`kafka_lake.asks`), read against the instance: each requested run is
found by its run key, and an ask whose runs ended without landing all of it is asked again with back-off, with an
alert naming what was asked again and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from dagster import AssetKey, DagsterEventType, DagsterRunStatus, RunRequest, RunsFilter
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, RUN_FAILURE_REASON_TAG, RUN_KEY_TAG, WILL_RETRY_TAG

from kafka_lake import asks
from kafka_lake.asks import Ask, RunsOfAsk, RunsOutcome
from platform_assets.jobs import PARTITION_RANGE_END, PARTITION_RANGE_START, PARTITION_TAG

# The cursor entry of a sensor holding its open asks (no Kafka topic name holds parentheses).
ASKED = "(asked)"
# Run keys asked of the instance in one query.
_KEYS_A_QUERY = 100
_EVENTS_A_PAGE = 5_000


def read_asks(cursor: Mapping) -> list[Ask]:
    return [Ask.from_json(document) for document in cursor.get(ASKED, [])]


def write_asks(cursor: dict, open_asks: Iterable[Ask]) -> None:
    cursor[ASKED] = [ask.to_json() for ask in open_asks]


def ask_of_request(request: RunRequest, unit_of_key: Mapping[AssetKey, str], now: datetime) -> Ask:
    """What a run request asks for, in the units (table names) its selected assets belong to."""
    tags = request.tags
    first = tags.get(PARTITION_TAG) or tags[PARTITION_RANGE_START]
    last = tags.get(PARTITION_TAG) or tags[PARTITION_RANGE_END]
    units = sorted({unit_of_key[key] for key in request.asset_selection or [] if key in unit_of_key})
    return Ask(key=request.run_key, units=tuple(units), first=first, last=last, asked_at=now)


def runs_of_asks(instance, open_asks: Iterable[Ask], unit_of_key: Mapping[AssetKey, str],
                 units_of_subject: Callable[[str], Iterable[str]], now: datetime) -> dict[str, RunsOfAsk]:
    """How the runs of each requested ask stand: one query of the instance per hundred asks, and for an ask whose
    runs ended short, the table-hours they landed and the units whose failure was lasting."""
    keys = [ask.key for ask in open_asks if not ask.waiting]
    by_key: dict[str, list] = {}
    for start in range(0, len(keys), _KEYS_A_QUERY):
        for record in instance.get_run_records(RunsFilter(tags={RUN_KEY_TAG: keys[start:start + _KEYS_A_QUERY]})):
            by_key.setdefault(record.dagster_run.tags[RUN_KEY_TAG], []).append(record)
    return {key: _runs_of_ask(instance, records, unit_of_key, units_of_subject, now) for key, records in by_key.items()}


def _runs_of_ask(instance, records: list, unit_of_key, units_of_subject, now: datetime) -> RunsOfAsk:
    runs = [record.dagster_run for record in records]
    if any(not run.is_finished for run in runs):
        return RunsOfAsk(RunsOutcome.GOING)
    if any(run.status == DagsterRunStatus.SUCCESS for run in runs):
        return RunsOfAsk(RunsOutcome.SUCCEEDED)
    newest = max(records, key=lambda record: record.create_timestamp)
    ended = newest.end_time or newest.update_timestamp.timestamp()
    retry_announced = (newest.dagster_run.tags.get(WILL_RETRY_TAG) == "true"
                       and AUTO_RETRY_RUN_ID_TAG not in newest.dagster_run.tags)
    if retry_announced and now.timestamp() - ended < asks.RETRY_LOST_AFTER.total_seconds():
        return RunsOfAsk(RunsOutcome.GOING)
    landed, lasting = set(), set()
    for run in runs:
        landed |= _landed_by(instance, run.run_id, unit_of_key)
        lasting |= {unit for subject in _lasting_subjects(instance, run.run_id) for unit in units_of_subject(subject)}
    newest_run = newest.dagster_run
    how = "cancelled" if newest_run.status == DagsterRunStatus.CANCELED else (
        f"failed ({newest_run.tags[RUN_FAILURE_REASON_TAG]})" if RUN_FAILURE_REASON_TAG in newest_run.tags else "failed")
    runs_named = ", ".join(run.run_id[:8] for run in runs)
    said = _ending_message(instance, newest_run.run_id)
    return RunsOfAsk(RunsOutcome.ENDED_SHORT, frozenset(landed), frozenset(lasting),
                     f"run {runs_named} {how}{': ' + said if said else ''}")


def _ending_message(instance, run_id: str) -> str:
    """The first line of what ended the run (run monitoring's verdict, the cancellation), shortened."""
    entries = instance.all_logs(run_id, of_type={DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED})
    message = next((entry.message for entry in reversed(entries) if entry.message), "")
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= 300 else line[:297] + "..."


def _landed_by(instance, run_id: str, unit_of_key: Mapping[AssetKey, str]) -> set[tuple[str, str]]:
    return {(unit_of_key[key], partition) for key, partition in materialized_by(instance, run_id) if key in unit_of_key}


def materialized_by(instance, run_id: str) -> set[tuple[AssetKey, str]]:
    """The (asset key, partition) pairs the run's materializations record, read a page at a time."""
    found, cursor = set(), None
    while True:
        page = instance.get_records_for_run(run_id, cursor=cursor, of_type=DagsterEventType.ASSET_MATERIALIZATION,
                                            limit=_EVENTS_A_PAGE)
        for record in page.records:
            event = record.event_log_entry.dagster_event
            if event is not None and event.asset_key is not None and event.partition:
                found.add((event.asset_key, event.partition))
        if not page.has_more:
            return found
        cursor = page.cursor


def _lasting_subjects(instance, run_id: str) -> set[str]:
    """The topics or tables of the run's steps that failed for a cause a retry cannot change (`failures_explained`
    marks them `retried: no`)."""
    subjects = set()
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE):
        failure = entry.dagster_event.step_failure_data if entry.dagster_event else None
        metadata = failure.user_failure_data.metadata if failure and failure.user_failure_data else {}
        if "retried" in metadata and "subject" in metadata:
            subjects.add(str(metadata["subject"].value))
    return subjects


def asked_again_alert(sensor_name: str, again: list[Ask], given_up: list[tuple[str, str]]) -> str:
    """One alert for a tick's asks asked again, and for the units left to a person (a lasting cause)."""
    lines = [f"- {', '.join(ask.units[:10])}{f' and {len(ask.units) - 10} more' if len(ask.units) > 10 else ''} "
             f"for {ask.first}{'...' + ask.last if ask.last != ask.first else ''}: {ask.why}; attempt {ask.attempt} "
             f"requested from {ask.not_before:%Y-%m-%d %H:%M}Z" for ask in again]
    lines += [f"- {unit}: not asked again, its failure is lasting ({why}); the failed-run alert says why"
              for unit, why in given_up]
    table_hours = sum(len(ask.units) * len(ask.hours) for ask in again)
    return (f"[ASKED AGAIN] {sensor_name} asks again for {table_hours} table-hour(s) that their runs did not land:\n"
            + "\n".join(lines))


def follow_asks(context, sensor_name: str, cursor: dict, request_of: Callable[[Ask], RunRequest],
                unit_of_key: Mapping[AssetKey, str], units_of_subject: Callable[[str], Iterable[str]], alerts,
                now: datetime) -> list[RunRequest]:
    """A tick's reading of its sensor's asks, kept in `cursor`: how the open asks' runs stand, what ended short asked
    again (with an alert), and the runs of the asks whose back-off has passed (returned, to request this tick)."""
    open_asks = read_asks(cursor)
    settled = asks.settle(open_asks, runs_of_asks(context.instance, open_asks, unit_of_key, units_of_subject, now), now)
    if settled.asked_again or settled.given_up:
        alerts.send(asked_again_alert(sensor_name, settled.asked_again, settled.given_up), context.log)
    again, kept, due = [], [], asks.due_again(settled.kept, now)
    for ask in settled.kept:
        if ask in due:
            again.append(request_of(ask))
            kept.append(asks.requested(ask, now))
            context.log.info(f"asked again (attempt {ask.attempt}, {ask.why}): {', '.join(ask.units)} for "
                             f"{ask.first}{'...' + ask.last if ask.last != ask.first else ''}")
        else:
            kept.append(ask)
    write_asks(cursor, kept)
    return again


def in_flight(cursor: Mapping) -> set[tuple[str, str]]:
    """The table-hours (unit, partition key) of the open asks in `cursor`: queued, running, or waiting to be asked
    again."""
    return {(unit, hour.partition_key) for ask in read_asks(cursor) for unit in ask.units for hour in ask.hours}


def record_asks(cursor: dict, requests: Iterable[RunRequest], unit_of_key: Mapping[AssetKey, str],
                now: datetime) -> None:
    """This tick's requests as open asks, beside those in `cursor`."""
    write_asks(cursor, read_asks(cursor) + [ask_of_request(request, unit_of_key, now) for request in requests])
