"""What a sensor asked for and whether it was done: each requested run is an `Ask`, kept until a run of it succeeds;
what its runs did not land is asked again with back-off (`settle`), so no due hour hangs on a run that ended short."""


from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum

from kafka_lake.hours import KafkaHour
from kafka_lake.run_plan import consecutive_hours

# How long a requested run may be missing from the instance before the ask counts as lost: the daemon creates a
# sensor's runs within the tick that asked for them, or resumes the tick's requests in the next; a busy code server may
# take minutes to plan them.
LOST_AFTER = timedelta(minutes=15)
# A failed run whose retry the daemon announced (`dagster/will_retry`) but has not created within this long lost it.
RETRY_LOST_AFTER = timedelta(minutes=10)
# Back-off between attempts: the first ask again goes with the tick that finds the runs ended short (a tick or more
# after they ended), the next after 1, 2, 4 … minutes, never more than an hour apart, for as long as it takes.
FIRST_BACKOFF = timedelta(minutes=1)
LONGEST_BACKOFF = timedelta(hours=1)


class RunsOutcome(Enum):
    """How the runs of an ask stand (a run and the daemon's retries of it)."""

    GOING = "going"  # a run queued, starting or running, or a retry announced
    SUCCEEDED = "succeeded"  # a run succeeded: every table-hour it carried landed
    ENDED_SHORT = "ended short"  # every run failed or was cancelled, none to come: what they did not land is asked again
    MISSING = "missing"  # no run was ever created for it


def backoff(attempt: int) -> timedelta:
    """The wait before attempt `attempt + 1`: none before the second."""
    return timedelta(0) if attempt <= 1 else min(FIRST_BACKOFF * 2 ** (attempt - 2), LONGEST_BACKOFF)


@dataclass(frozen=True)
class Ask:
    """One requested run: `units` (table names) for the consecutive hours `first`..`last`. `attempt` counts the asks of
    these table-hours; an ask asked again waits until `not_before` before its run is requested."""

    key: str
    units: tuple[str, ...]
    first: str
    last: str
    asked_at: datetime
    attempt: int = 1
    not_before: datetime | None = None
    why: str = ""

    @property
    def hours(self) -> list[KafkaHour]:
        hour, last, hours = KafkaHour.from_partition_key(self.first), KafkaHour.from_partition_key(self.last), []
        while hour <= last:
            hours.append(hour)
            hour = hour.next()
        return hours

    @property
    def waiting(self) -> bool:
        """Asked again, its run not requested yet."""
        return self.not_before is not None

    def to_json(self) -> dict:
        document = {"key": self.key, "units": list(self.units), "first": self.first, "last": self.last,
                    "asked_at": self.asked_at.isoformat(timespec="seconds"), "attempt": self.attempt}
        if self.not_before is not None:
            document["not_before"] = self.not_before.isoformat(timespec="seconds")
        if self.why:
            document["why"] = self.why
        return document

    @classmethod
    def from_json(cls, document: Mapping) -> Ask:
        return cls(key=document["key"], units=tuple(document["units"]), first=document["first"],
                   last=document["last"], asked_at=datetime.fromisoformat(document["asked_at"]),
                   attempt=int(document.get("attempt", 1)),
                   not_before=datetime.fromisoformat(document["not_before"]) if document.get("not_before") else None,
                   why=document.get("why", ""))


@dataclass(frozen=True)
class RunsOfAsk:
    """What the instance says of an ask's runs: how they stand, the table-hours (unit, partition key) they landed, the
    units whose failure a retry cannot change (a person must act; the alert named them) and, when they ended short,
    why, in a few words."""

    outcome: RunsOutcome
    landed: frozenset[tuple[str, str]] = frozenset()
    lasting: frozenset[str] = frozenset()
    why: str = ""


@dataclass
class Settled:
    """A tick's reading of the asks: those still open, and those asked again (waiting out their back-off)."""

    kept: list[Ask] = field(default_factory=list)
    asked_again: list[Ask] = field(default_factory=list)
    done: int = 0
    given_up: list[tuple[str, str]] = field(default_factory=list)  # (unit, why): failed for a lasting cause


def settle(asks: Iterable[Ask], runs: Mapping[str, RunsOfAsk], now: datetime) -> Settled:
    """Each requested ask as its runs stand (`runs`, by key; an ask not in it has no run yet). An ask whose runs ended
    short, or whose run never appeared within `LOST_AFTER`, is asked again for the table-hours not landed, but not for a
    unit that failed for a lasting cause. Waiting asks (not requested yet) are kept as they are."""
    settled = Settled()
    for ask in asks:
        if ask.waiting:
            settled.kept.append(ask)
            continue
        of_ask = runs.get(ask.key, RunsOfAsk(RunsOutcome.MISSING))
        if of_ask.outcome is RunsOutcome.SUCCEEDED:
            settled.done += 1
        elif of_ask.outcome is RunsOutcome.GOING or (
                of_ask.outcome is RunsOutcome.MISSING and now - ask.asked_at < LOST_AFTER):
            settled.kept.append(ask)
        else:
            why = of_ask.why or f"no run was created within {LOST_AFTER.total_seconds() / 60:.0f} min"
            settled.given_up += [(unit, why) for unit in ask.units if unit in of_ask.lasting]
            again = asked_again(ask, of_ask, now, why)
            settled.asked_again += again
            settled.kept += again
            if not again:
                settled.done += 1
    return settled


def asked_again(ask: Ask, of_ask: RunsOfAsk, now: datetime, why: str) -> list[Ask]:
    """The table-hours of `ask` its runs did not land, as asks of the same hours per stretch, waiting out the back-off."""
    missing: dict[str, list[KafkaHour]] = {}
    for unit in ask.units:
        if unit in of_ask.lasting:
            continue
        hours = [hour for hour in ask.hours if (unit, hour.partition_key) not in of_ask.landed]
        if hours:
            missing[unit] = hours
    by_stretch: dict[tuple[KafkaHour, ...], list[str]] = {}
    for unit, hours in missing.items():
        for stretch in consecutive_hours(hours, len(ask.hours)):
            by_stretch.setdefault(stretch, []).append(unit)
    base = ask.key.split(":again", 1)[0]
    return [Ask(key=f"{base}:again{ask.attempt + 1}" + (f".{index}" if len(by_stretch) > 1 else ""),
                units=tuple(sorted(units)), first=stretch[0].partition_key, last=stretch[-1].partition_key,
                asked_at=now, attempt=ask.attempt + 1, not_before=now + backoff(ask.attempt), why=why)
            for index, (stretch, units) in enumerate(sorted(by_stretch.items()))]


def due_again(asks: Iterable[Ask], now: datetime) -> list[Ask]:
    """The waiting asks whose back-off has passed: their runs are requested this tick."""
    return [ask for ask in asks if ask.not_before is not None and ask.not_before <= now]


def requested(ask: Ask, now: datetime) -> Ask:
    """A waiting ask once its run is requested."""
    return replace(ask, asked_at=now, not_before=None)
