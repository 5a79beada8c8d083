"""What the platform reports to Prometheus, measured at each scrape: per table the totals its manifests hold, its
newest landed hour and how far landing lags the log, and how many catalog entries are rejected.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kafka_lake import automation
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.cluster import KafkaCluster, LogTail, batches
from kafka_lake.kafka.log import KafkaUnavailable
from kafka_lake.lake.landed_totals import LandedTotals, ManifestTally
from kafka_lake.lake.layout import ARCHIVED_TOPICS_PATH
from kafka_lake.lake.manifests import HourManifest, ManifestChangeFeed, ManifestChanges, ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.archive import load_platform_catalog
from kafka_lake.topics.loader import ARCHIVE_FILE, TopicCatalog

log = logging.getLogger(__name__)

# Tables refreshed at once, and manifests read at once: a first scrape reads every table's whole history.
READERS = 16
# What a scrape gives the brokers to confirm the log ends they report (`ConfirmedEnds`): Prometheus' scrape timeout
# (30 s, docs/OPERATING_METRICS.md) leaves the rest to the lake.
CONFIRM_BUDGET_S = 10.0
# What a scrape waits for the tables' manifests: well inside Prometheus' scrape timeout (30 s is common) with the log
# ends' confirmation beside it. A table not counted by then is counted on, in the background, for the next scrape.
COUNT_BUDGET_S = 12.0


@dataclass(frozen=True)
class TableMeasures:
    """One table at one moment."""

    database: str
    table: str
    topic: str
    totals: LandedTotals
    lags: tuple[automation.PartitionLag, ...] | None  # per partition; None: the topic is not on the cluster (or it is away)
    lag_seconds: float | None  # now minus the end of the newest landed hour; None: no hour landed yet

    @property
    def newest_hour(self) -> KafkaHour | None:
        return self.totals.newest_hour


@dataclass(frozen=True)
class Measures:
    """What one scrape measured: plain values of what the lake, the brokers, the catalog and the clock say;
    `deploy/metrics.py` serves them."""

    tables: tuple[TableMeasures, ...]
    rejected_entries: int
    brokers_reachable: bool
    # Tables whose manifests are still being counted (a first count of thousands of tables on S3 takes minutes): left
    # out of this scrape rather than served as zero, and in the next ones once counted.
    counting: int = 0


def lag_seconds(newest: HourManifest | None, now: datetime) -> float | None:
    """How long ago what has landed ends: the newest landed hour's end, or, for an open hour landed in increments so
    far, when its last increment read the log; None when none has landed."""
    return None if newest is None else (now - newest.landed_through).total_seconds()


def table_measures(table: TableSpec, totals: LandedTotals, log_ends: dict[int, int] | None, now: datetime) -> TableMeasures:
    """The measures of a table from its totals and its topic's log ends (partition → end; None when unknown)."""
    lags = None
    if log_ends is not None:
        tails = [LogTail(partition, end, None) for partition, end in log_ends.items()]
        lags = tuple(automation.landing_lag(totals.newest, tails))
    return TableMeasures(table.database, table.table, table.topic, totals, lags, lag_seconds(totals.newest, now))


class WatchedCatalog:
    """The catalog as the code location loads it, loaded again only when one of its files (or the archived topics
    the lake records) changed: a scrape must not parse hundreds of schemas to find nothing new."""

    def __init__(self, settings: PlatformSettings, load: Callable[[PlatformSettings], TopicCatalog] = load_platform_catalog):
        self._settings = settings
        self._load = load
        self._seen: tuple | None = None
        self._catalog: TopicCatalog | None = None

    def current(self) -> TopicCatalog:
        seen = self._fingerprint()
        if self._catalog is None or seen != self._seen:
            self._catalog, self._seen = self._load(self._settings), seen
        return self._catalog

    def _fingerprint(self) -> tuple:
        """Every catalog file's path, size and modification time, and the archived topics when there is a rule."""
        root = Path(self._settings.schema_catalog_dir)
        files = []
        for path in (*root.glob("*/*/*"), root / ARCHIVE_FILE):
            try:
                stat = path.stat()
            except OSError:
                continue
            files.append((str(path), stat.st_size, stat.st_mtime_ns))
        archived = b""
        if (root / ARCHIVE_FILE).exists():
            try:
                archived = LakeStorage(self._settings.lake_root).read_bytes(ARCHIVED_TOPICS_PATH) or b""
            except OSError:
                archived = b"unreadable"
        return tuple(sorted(files)), archived


class PlatformMeasures:
    """The measures of every table of the catalog, kept up to date scrape by scrape: each scrape reads the lake's log
    of manifest changes since the one before; a table whose hour the log names, or whose next hour can have closed,
    has its manifests listed after the newest one read and only those read, and a table an hour of which changed
    behind the newest one read (landed again, or landed late behind a newer one) is counted again whole. It asks the
    brokers for every partition's log end in batched requests, and loads the catalog again only when it changed.
    `recount` reads every manifest again, for what the change log cannot tell (a writer whose clock is far behind)."""

    def __init__(self, settings: PlatformSettings, cluster: KafkaCluster, readers: int = READERS,
                 catalog: WatchedCatalog | None = None, count_budget_s: float = COUNT_BUDGET_S):
        self._storage = LakeStorage(settings.lake_root)
        self._cluster = cluster
        self._catalog = catalog or WatchedCatalog(settings)
        self._tallies: dict[tuple[str, str], ManifestTally] = {}
        self._changes = ManifestChangeFeed(ManifestChanges(self._storage))
        self._ends = ConfirmedEnds(cluster)
        # Two pools: a table's refresh waits for its manifests' reads, which must never queue behind refreshes.
        self._tables = ThreadPoolExecutor(readers, thread_name_prefix="metrics-tables")
        self._reads = ThreadPoolExecutor(readers, thread_name_prefix="metrics-manifests")
        self._lock = threading.Lock()  # scrapes one at a time (two Prometheus servers may scrape together)
        self._count_budget_s = count_budget_s
        # A table's refresh still running from an earlier scrape (or the warm-up): not asked for again meanwhile.
        self._counting: dict[tuple[str, str], Future] = {}
        self._counted: dict[tuple[str, str], LandedTotals] = {}  # each table's totals, as last counted

    def measure(self, now: datetime) -> Measures:
        """The measures now. The tables' manifests are counted for `count_budget_s` at most: a table still being
        counted then keeps counting in the background and is served as last counted (or, never counted yet, not at
        all), so a scrape answers within its timeout however many tables a first count reads."""
        with self._lock:
            deadline = time.monotonic() + self._count_budget_s
            catalog = self._catalog.current()
            changed = self._changed_hours()
            for table in catalog.topics:
                key = (table.database, table.table)
                if key not in self._counting:
                    self._counting[key] = self._tables.submit(
                        self._refreshed, table, now, changed.get(key, []))
            wait(list(self._counting.values()), timeout=max(0.0, deadline - time.monotonic()))
            for key, counting in list(self._counting.items()):
                if not counting.done():
                    continue
                del self._counting[key]
                try:
                    self._counted[key] = counting.result()
                except Exception as error:  # the lake away for this table: served as last counted, counted next scrape
                    log.warning("manifests of %s/%s not counted this scrape: %s", *key, error)
            ends, reachable = self._log_ends(catalog.topics)
            tables = tuple(table_measures(table, self._counted[(table.database, table.table)], ends.get(table.topic), now)
                           for table in catalog.topics if (table.database, table.table) in self._counted)
            return Measures(tables, len(catalog.broken), reachable, len(catalog.topics) - len(tables))

    def recount(self) -> None:
        """Every manifest of every table read again, a table at a time: what an hour re-landed since it was read
        changed shows from the next scrape on."""
        for tally in list(self._tallies.values()):
            tally.recount(self._reads.map)

    def close(self) -> None:
        for pool in (self._tables, self._reads):
            pool.shutdown(wait=False, cancel_futures=True)

    def _changed_hours(self) -> dict[tuple[str, str], list[KafkaHour]]:
        """The hours of each table whose manifests changed since the last scrape, as the change log says; by the
        writers' clocks, which stamp it."""
        try:
            news = self._changes.news(datetime.now(timezone.utc))
        except OSError as error:  # the lake away: the tables are refreshed as their hours can close, as before
            log.warning("the manifests' change log not read this scrape: %s", error)
            return {}
        changed: dict[tuple[str, str], list[KafkaHour]] = {}
        for change in news:
            changed.setdefault((change.database, change.table), []).append(change.hour)
        return changed

    def _refreshed(self, table: TableSpec, now: datetime, changed: list[KafkaHour]) -> LandedTotals:
        """The table's totals. An hour the change log names at or before the newest one read changed what was counted:
        every manifest of the table is read again. Otherwise the manifests after the newest one read are listed when
        the log names a newer hour, or once the hour after the newest one can have closed; before, no landing can
        have added to them (an hour lands once closed), and a scrape asks storage nothing about the table."""
        tally = self._tally(table)
        newest = tally.totals.newest_hour
        if changed and newest is not None and min(changed) == newest:
            return tally.reread_newest()  # the newest hour landed again: an increment of the open hour, or its close
        if changed and newest is not None and min(changed) < newest:
            return tally.recount(self._reads.map)
        if not changed and newest is not None and now < automation.closed_by_records_from(table, newest.next()):
            return tally.totals
        return tally.refresh()

    def _tally(self, table: TableSpec) -> ManifestTally:
        key = (table.database, table.table)
        if key not in self._tallies:
            self._tallies[key] = ManifestTally(ManifestStore(self._storage, table.database, table.table))
        return self._tallies[key]

    def _log_ends(self, tables: Iterable[TableSpec]) -> tuple[dict[str, dict[int, int]], bool]:
        """Each catalogued topic's partitions and their log ends as the landing reads them (`ConfirmedEnds`), from one
        metadata request and batched ListOffsets requests; nothing when the brokers are away (the lake's measures are
        still served)."""
        wanted = {table.topic for table in tables}
        try:
            on_cluster = self._cluster.topics()
            ends, unanswered = self._ends.read({topic: on_cluster[topic] for topic in sorted(wanted & on_cluster.keys())})
        except KafkaUnavailable as error:
            log.warning("log ends not measured this scrape: %s", error)
            return {}, False
        for topic, why in sorted(unanswered.items()):
            log.warning("log ends of %s not measured this scrape: %s", topic, why)
        if unanswered and not ends:
            return {}, False
        by_topic: dict[str, dict[int, int]] = {}
        for (topic, partition), end in sorted(ends.items()):
            by_topic.setdefault(topic, {})[partition] = end
        return by_topic, True


class ConfirmedEnds:
    """Log ends as the landing reads them, kept scrape by scrape. A broker's answer is confirmed by reading at it
    (Tansu answers the first offset of a last batch of several records + 1, under-reporting the rest;
    `KafkaCluster.confirmed_ends`), for the partitions whose answer moved since it was last confirmed: an answer that
    did not move is a log that did not grow (records land in new batches, which move it), whose end read then still
    holds. Reads go in batches of whole topics, the topics confirmed longest ago first, for `budget_s` a scrape; a
    partition not confirmed this scrape counts to its answer, or to the end read before where that is further (off by
    less than a batch), and is confirmed at a later scrape. So an idle partition costs a scrape its ListOffsets alone,
    and a busy cluster's reads are bounded."""

    def __init__(self, cluster: KafkaCluster, budget_s: float = CONFIRM_BUDGET_S):
        self._cluster = cluster
        self._budget_s = budget_s
        self._read: dict[tuple[str, int], tuple[int, int]] = {}  # (topic, partition) → (end reported, end read there)
        self._scrapes = 0
        self._confirmed_in: dict[str, int] = {}  # topic → the scrape that last confirmed it

    def read(self, partitions: dict[str, list[int]]) -> tuple[dict[tuple[str, int], int], dict[str, str]]:
        """(the log end of every partition answered, per topic not answered why)."""
        self._scrapes += 1
        reported, unanswered = self._cluster.log_ends(partitions)
        moved: dict[str, dict[tuple[str, int], int]] = {}
        for key, end in reported.items():
            if self._read.get(key, (None, 0))[0] != end:
                moved.setdefault(key[0], {})[key] = end
        oldest_first = sorted(moved, key=lambda topic: (self._confirmed_in.get(topic, 0), topic))
        deadline = time.monotonic() + self._budget_s
        asked_topics = 0
        for batch in batches({topic: [partition for _, partition in moved[topic]] for topic in oldest_first}):
            left = deadline - time.monotonic()
            if left <= 0:
                log.info("log ends of %d topic(s) not confirmed this scrape: the next scrapes confirm them",
                         len(oldest_first) - asked_topics)
                break
            asked_topics += len(batch)
            asked = {key: end for topic in batch for key, end in moved[topic].items()}
            confirmed, slow = self._cluster.confirmed_ends(asked, left)
            for key, end in asked.items():
                if key[0] not in slow:
                    self._read[key] = (end, confirmed[key])
                    self._confirmed_in[key[0]] = self._scrapes
        return {key: self._best(key, end) for key, end in reported.items()}, unanswered

    def _best(self, key: tuple[str, int], reported: int) -> int:
        """The end read where the answer has not moved since; else the answer, or the end read before if further (a
        log does not shrink, unless its topic was recreated: an answer below the last one drops what was read)."""
        before = self._read.get(key)
        if before is None or before[0] > reported:
            return reported
        return max(reported, before[1])
