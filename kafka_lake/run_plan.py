"""Which topics and hours each run of a layer carries: the due work of many topics grouped into few runs, capped.
A run pays a process, the code location's load and a Spark application once for every topic-hour it carries.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from kafka_lake.hours import KafkaHour
from kafka_lake.settings import DEFAULT_TOPICS_PER_RUN

# A sensor catching up, or compaction following a backfill, asks for at most a day of consecutive hours per run.
HOURS_PER_RUN = 24

Unit = TypeVar("Unit", bound=Hashable)


@dataclass(frozen=True)
class PlannedRun(Generic[Unit]):
    """One run: the same consecutive hours for each of its units (a topic's tables, or a table)."""

    hours: tuple[KafkaHour, ...]
    units: tuple[Unit, ...]

    @property
    def first(self) -> KafkaHour:
        return self.hours[0]

    @property
    def last(self) -> KafkaHour:
        return self.hours[-1]

    def hours_text(self) -> str:
        """`2026-11-01-13:00`, or `2026-11-01-13:00...2026-11-01-15:00` as Dagster writes a range."""
        return str(self.first) if len(self.hours) == 1 else f"{self.first}...{self.last}"

    def key(self, names: Iterable[str]) -> str:
        """A name for the run that is the same whenever the same units and hours are planned again (a sensor's run
        key: Dagster launches a key once), short however many units it carries."""
        digest = hashlib.sha1("\n".join(sorted(names)).encode()).hexdigest()[:12]
        return f"{self.hours_text()}:{digest}"


def consecutive_hours(hours: Iterable[KafkaHour], longest: int) -> list[tuple[KafkaHour, ...]]:
    """Hours in stretches of consecutive hours, at most `longest` each, oldest first."""
    stretches: list[list[KafkaHour]] = []
    for hour in sorted(set(hours)):
        if stretches and stretches[-1][-1].next() == hour and len(stretches[-1]) < longest:
            stretches[-1].append(hour)
        else:
            stretches.append([hour])
    return [tuple(stretch) for stretch in stretches]


def plan_runs(due: Mapping[Unit, Iterable[KafkaHour]], name: Callable[[Unit], str],
              topics_per_run: int = DEFAULT_TOPICS_PER_RUN, hours_per_run: int = HOURS_PER_RUN) -> list[PlannedRun[Unit]]:
    """The runs that carry `due` (each unit's hours): the units that need the same stretch of hours share runs of at
    most `topics_per_run` units, in the order of their names; the runs of older hours come first. Every unit-hour is
    in exactly one run."""
    if topics_per_run < 1 or hours_per_run < 1:
        raise ValueError(f"a run carries at least one topic and one hour, not {topics_per_run} and {hours_per_run}")
    by_stretch: dict[tuple[KafkaHour, ...], list[Unit]] = {}
    for unit, hours in due.items():
        for stretch in consecutive_hours(hours, hours_per_run):
            by_stretch.setdefault(stretch, []).append(unit)
    runs = []
    for stretch in sorted(by_stretch, key=lambda s: (s[0], s[-1])):
        units = sorted(by_stretch[stretch], key=name)
        runs += [PlannedRun(stretch, tuple(units[i:i + topics_per_run])) for i in range(0, len(units), topics_per_run)]
    return runs
