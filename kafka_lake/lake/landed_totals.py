"""What a table's manifests add up to (rows, dead letters, landed hours, the newest hour), kept by reading each manifest
once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kafka_lake.hours import KafkaHour
from kafka_lake.lake.manifests import HourManifest, ManifestStore

# How manifests are read: `map` one after another, or an executor's `map` to read a first tally's many at once.
ReadMany = Callable[[Callable[[KafkaHour], HourManifest | None], Iterable[KafkaHour]], Iterator[HourManifest | None]]


@dataclass(frozen=True)
class LandedTotals:
    """Totals over a table's landed hours, and the newest of them (whose partition ends are what has landed)."""

    rows: int = 0
    dead_letters: int = 0
    hours: int = 0
    newest: HourManifest | None = None

    def plus(self, manifest: HourManifest) -> LandedTotals:
        counts = manifest.counts
        newest = manifest if self.newest is None or manifest.kafka_hour > self.newest.kafka_hour else self.newest
        return LandedTotals(self.rows + counts.rows, self.dead_letters + counts.dead_letters, self.hours + 1, newest)

    @property
    def newest_hour(self) -> KafkaHour | None:
        return self.newest.kafka_hour if self.newest is not None else None

    def with_newest(self, manifest: HourManifest) -> LandedTotals:
        """The totals with the newest hour's manifest replaced by `manifest`, a later landing of that hour (an increment
        of the open hour): its counts instead of the earlier one's."""
        assert self.newest is not None and manifest.kafka_hour == self.newest.kafka_hour
        before, after = self.newest.counts, manifest.counts
        return LandedTotals(self.rows - before.rows + after.rows,
                            self.dead_letters - before.dead_letters + after.dead_letters, self.hours, manifest)


class ManifestTally:
    """The running `LandedTotals` of one table. `refresh` lists only the manifest names after the newest one read and
    reads those, so keeping up costs a listing and a read per new hour, however long the table's history;
    `recount` reads them all again, for what a listing by name cannot show: an hour re-landed since it was read
    (dead letters that a new schema version turned into rows). Both may run at once, from different threads."""

    def __init__(self, manifests: ManifestStore):
        self._manifests = manifests
        self._totals = LandedTotals()
        self._lock = threading.Lock()  # one refresh at a time, and a recount's result swapped in whole

    @property
    def totals(self) -> LandedTotals:
        return self._totals

    def refresh(self, read_many: ReadMany = map) -> LandedTotals:
        with self._lock:
            self._totals = _added(self._totals, self._manifests.landed_after(self._totals.newest_hour), self._manifests,
                                  read_many)
            return self._totals

    def reread_newest(self) -> LandedTotals:
        """The newest hour read again (landed again since: the open hour's next increment), and what comes after it."""
        with self._lock:
            newest = self._totals.newest
            if newest is not None and (manifest := self._manifests.read(newest.kafka_hour)) is not None:
                self._totals = self._totals.with_newest(manifest)
            self._totals = _added(self._totals, self._manifests.landed_after(self._totals.newest_hour), self._manifests,
                                  map)
            return self._totals

    def recount(self, read_many: ReadMany = map) -> LandedTotals:
        recounted = _added(LandedTotals(), self._manifests.landed_after(None), self._manifests, read_many)
        with self._lock:
            # Hours landed during the recount are read again by the next refresh, from the recount's newest on.
            self._totals = recounted
            return recounted


def _added(totals: LandedTotals, hours: list[KafkaHour], manifests: ManifestStore, read_many: ReadMany) -> LandedTotals:
    for manifest in read_many(manifests.read, hours):
        if manifest is not None:  # listed, then gone: not landed any more
            totals = totals.plus(manifest)
    return totals
