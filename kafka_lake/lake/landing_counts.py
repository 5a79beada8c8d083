"""What a landing did with the records it read, as one value that adds: a batch's counts, a slice's, a Kafka
partition's in an hour and the hour's are each the sum of the ones below.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class LandingCounts:
    """rows + dead letters + tombstones + routed away + unrouted + erased = records read; a table routed from a shared topic
    leaves the records other tables take (`routed_away`), and its topic's first routed table writes those no table
    takes to the unrouted dead letters (`unrouted`; the other tables count them routed away); late events are rows placed in an hour before the Kafka hour
    landed; a table that keeps its tombstones counts them as rows (`kept_tombstones` says how many), not as
    tombstones; erased records are those of subjects of accepted erasure requests, decoded and left out; the
    timestamps span the records' Kafka timestamps that name a time."""

    records: int = 0
    rows: int = 0
    dead_letters: int = 0
    tombstones: int = 0
    late_events: int = 0
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None
    routed_away: int = 0
    unrouted: int = 0
    kept_tombstones: int = 0  # rows that are tombstones, of a table that keeps them (part of `rows`)
    erased: int = 0  # records of subjects of accepted erasure requests: decoded, and not landed

    def __add__(self, other: LandingCounts) -> LandingCounts:
        return LandingCounts(
            records=self.records + other.records,
            rows=self.rows + other.rows,
            dead_letters=self.dead_letters + other.dead_letters,
            tombstones=self.tombstones + other.tombstones,
            late_events=self.late_events + other.late_events,
            routed_away=self.routed_away + other.routed_away,
            unrouted=self.unrouted + other.unrouted,
            kept_tombstones=self.kept_tombstones + other.kept_tombstones,
            erased=self.erased + other.erased,
            min_timestamp_ms=_either(min, self.min_timestamp_ms, other.min_timestamp_ms),
            max_timestamp_ms=_either(max, self.max_timestamp_ms, other.max_timestamp_ms),
        )

    @classmethod
    def total(cls, counts: Iterable[LandingCounts]) -> LandingCounts:
        return sum(counts, cls())

    @property
    def accounted(self) -> int:
        """The records this landing put somewhere: as rows, dead letters or tombstones, or left to other tables, or
        unrouted, or left out as an erased subject's."""
        return self.rows + self.dead_letters + self.tombstones + self.routed_away + self.unrouted + self.erased


def _either(pick, a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else pick(a, b)
