"""Hour manifests: the commit record of a landed Kafka hour.
Files that no manifest names are not part of the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum

from kafka_lake.hours import FIRST_HOUR, LAST_HOUR, ONE_HOUR, KafkaHour, hour_key, hour_of_key
from kafka_lake.lake import layout
from kafka_lake.lake.documents import DocumentCodec
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.storage import LakeStorage


@dataclass(frozen=True)
class LandedFile:
    path: str  # relative to the lake root
    kind: str  # "data", "dead_letter", or "unrouted" (a routed topic's records no table takes)
    partition: int
    first_offset: int
    rows: int
    bytes: int
    schema_version: int | None  # None for dead letters
    hour: str  # the placement hour (a dead letter's: its Kafka hour), in the one string form of an hour

    @property
    def placement_hour(self) -> datetime:
        return hour_of_key(self.hour)


@dataclass(frozen=True)
class PartitionLanding:
    """What one Kafka partition contributed to a landed hour: its offsets [start, end) and what became of them."""

    partition: int
    start: int
    end: int
    counts: LandingCounts = LandingCounts()

    @property
    def offsets(self) -> int:
        return self.end - self.start


class BoundaryOrigin(str, Enum):
    """Where a landed hour's start or end offset on a partition came from."""

    NEIGHBOUR = "manifest"  # the landed hour beside it committed this offset
    TIME_LOOKUP = "time lookup"  # the first record stamped at or after the hour's start or end, verified
    LOG_START = "log start"  # the partition's first offset: new since the hour before, or expired offsets accepted
    LOG_END = "log end"  # no record at or after the time: the log's end (the hour closed by the wall clock)

    @classmethod
    def told_by(cls, text: str) -> BoundaryOrigin:
        """The origin a boundary's text names (manifests of format 2 recorded the text alone)."""
        return next((origin for origin in cls if text.startswith(origin.value)), cls.TIME_LOOKUP)


@dataclass(frozen=True)
class Increment:
    """One landing of an hour while it was open (or the one that closed it after increments): each partition's end
    it landed up to, when it read the log, and when it committed."""

    ends: dict  # partition (as text) → the offset landed up to
    read_at: str  # when the log's ends were read: every committed record of the hour before then is landed
    landed_at: str


@dataclass(frozen=True)
class HourManifest:
    """Per Kafka partition the offset range [start, end) read and its counts, plus every file written."""

    database: str
    table: str
    topic: str
    hour: str  # the partition key, e.g. 2026-11-01-13:00
    partitions: tuple[PartitionLanding, ...]
    files: tuple[LandedFile, ...]
    landed_at: str
    run_id: str = ""
    # partition → where its start and end came from: `start_origin`/`end_origin` (a `BoundaryOrigin`), and
    # `start_from`/`end_from` saying it in words for the UI
    boundaries: dict = field(default_factory=dict)
    schema_versions: dict = field(default_factory=dict)  # version → rows
    dead_letter_causes: dict = field(default_factory=dict)
    duration_s: float = 0.0
    # partition → [start, end) of offsets that expired unlanded before this hour's start, accepted by
    # an explicit, audited run option; the check on contiguity reports them instead of failing.
    accepted_losses: dict = field(default_factory=dict)
    new_partitions: tuple[int, ...] = ()  # absent from the landed hour before; landed from their first record
    # partition → [start, end) of offsets past this hour's end held by a transaction still open when it landed
    # (the hour ended at the last stable offset); committed later, they are the next hour's offsets.
    open_transactions: dict = field(default_factory=dict)
    # partition → [start, end) of offsets past this hour's end (the committed end) whose records are stamped before
    # the hour's end: held back from a read_committed reader when the hour landed, it is incomplete by them; they
    # land with the first hour landed once readable.
    held_back: dict = field(default_factory=dict)
    # schema id → dead letters whose id the table's catalog entry lacks: a producer's new schema version, found here
    # by the run that lands it and by the sensor that reads the newest hour.
    unknown_schema_ids: dict = field(default_factory=dict)
    # schema version → how its records were decoded: "columnar", or the record path's name and why not columnar
    # (`BatchDecoder.decoding_paths`), as every slice of the hour reported it.
    decoding_paths: dict = field(default_factory=dict)
    # False while the hour is open: its landings so far (`increments`) hold what it held then, and a later landing adds
    # what it holds beyond; the landing after it closed makes it final. Compaction and retention act on final hours.
    final: bool = True
    increments: tuple[Increment, ...] = ()  # the hour's landings in increments, in order; none when landed once
    # partition (as text) → offsets where a slice of the hour starts besides its start: where its increments started.
    # A landing again slices there too, so it writes the files they wrote, of the same names and rows.
    cuts: dict = field(default_factory=dict)

    @property
    def kafka_hour(self) -> KafkaHour:
        return KafkaHour.from_partition_key(self.hour)

    def partition(self, number: int) -> PartitionLanding | None:
        return next((p for p in self.partitions if p.partition == number), None)

    @property
    def landed_through(self) -> datetime:
        """Up to when the hour's records are landed: its end once final, else when its last increment read the log."""
        if self.final or not self.increments:
            return self.kafka_hour.end
        return min(datetime.fromisoformat(self.increments[-1].read_at), self.kafka_hour.end)

    def accepted_loss(self, partition: int) -> tuple[int, int] | None:
        loss = self.accepted_losses.get(str(partition))
        return None if loss is None else (loss[0], loss[1])

    @property
    def counts(self) -> LandingCounts:
        return LandingCounts.total(p.counts for p in self.partitions)

    @property
    def offsets(self) -> int:
        return sum(p.offsets for p in self.partitions)

    @property
    def file_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> bytes:
        return HOUR_MANIFEST.to_json(self)

    @classmethod
    def from_json(cls, data: bytes, where: str = "") -> HourManifest:
        return HOUR_MANIFEST.from_json(data, where)


def _format_2(document: dict) -> dict:
    """Format 1 wrote a partition's counts beside its offsets, and a file's hour as `date=…/hour=…`; format 2 keeps
    the counts as one value, and every hour in the one string form of an hour."""
    names = ("records", "rows", "dead_letters", "tombstones", "late_events", "min_timestamp_ms", "max_timestamp_ms")
    for partition in document.get("partitions", []):
        partition["counts"] = {name: partition.pop(name) for name in names if name in partition}
    for file in document.get("files", []):
        hour = layout.hour_of_path(f"{file.get('hour')}/")
        if hour is not None:
            file["hour"] = hour_key(hour)
    return document


def _format_3(document: dict) -> dict:
    """Format 3 records where each boundary came from as a `BoundaryOrigin` beside its text; before, only the text said
    so, and it is read here, once, to say it."""
    for how in document.get("boundaries", {}).values():
        for side in ("start", "end"):
            how.setdefault(f"{side}_origin", BoundaryOrigin.told_by(how.get(f"{side}_from", "")).value)
    return document


def merged_decoding_paths(reported: Iterable[dict[int, str]]) -> dict[str, str]:
    """The decoding path of each schema version met by an hour's slices (`SliceReport.decoding_paths`), by version;
    slices of one table choose alike, and where they do not (a version decoded on one worker as columns and on another
    record by record), each path is named, separated by " | "."""
    paths: dict[str, list[str]] = {}
    for report in reported:
        for version, path in report.items():
            known = paths.setdefault(str(version), [])
            if path not in known:
                known.append(path)
    return {version: " | ".join(found) for version, found in sorted(paths.items(), key=lambda item: int(item[0]))}


HOUR_MANIFEST = DocumentCodec(HourManifest, "manifest", version=3, upgrades={1: _format_2, 2: _format_3})


class ManifestStore:
    """The manifests of one table in the lake."""

    def __init__(self, storage: LakeStorage, database: str, table: str):
        self.storage = storage
        self.database = database
        self.table = table

    def path(self, hour: KafkaHour) -> str:
        return layout.manifest_path(self.database, self.table, hour)

    def read(self, hour: KafkaHour) -> HourManifest | None:
        path = self.path(hour)
        data = self.storage.read_bytes(path)
        return None if data is None else HourManifest.from_json(data, self.storage.uri(path))

    def exists(self, hour: KafkaHour) -> bool:
        return self.storage.exists(self.path(hour))

    def write(self, manifest: HourManifest) -> str:
        """Writes (or replaces) the hour's manifest, then records the change in the lake's change log: a reader who saw
        the change reads this manifest."""
        path = self.path(manifest.kafka_hour)
        self.storage.write_bytes(path, manifest.to_json())
        ManifestChanges(self.storage).record(self.database, self.table, manifest.kafka_hour)
        return path

    def delete(self, hour: KafkaHour) -> bool:
        deleted = self.storage.delete(self.path(hour))
        if deleted:
            ManifestChanges(self.storage).record(self.database, self.table, hour)
        return deleted

    def landed_hours(self) -> list[KafkaHour]:
        """Every landed hour of the table: the whole history, for what is about all of it (erasure, reports)."""
        return self._landed_from(None)

    def landed_after(self, hour: KafkaHour | None) -> list[KafkaHour]:
        """The landed hours after `hour` (every one when None), in order: what a reader that has read the manifests
        up to `hour` has not seen yet, from a listing that starts there, however old the table."""
        if hour is not None and hour.start >= LAST_HOUR:
            return []
        return self._landed_from(hour.next() if hour is not None else None)

    def landed_in(self, first: KafkaHour, last: KafkaHour) -> list[KafkaHour]:
        """The landed hours from `first` to `last`: one listing of those hours' manifests, however old the table."""
        hours = int((last.start - first.start) / ONE_HOUR) + 1
        return [h for h in self._landed_from(first, limit=hours) if h <= last]

    def neighbours(self, hour: KafkaHour) -> tuple[HourManifest | None, HourManifest | None]:
        """The nearest landed hour before and after `hour`, whose boundaries bind it."""
        after = next(iter(self._landed_from(hour.next(), limit=1)), None) if hour.start < LAST_HOUR else None
        before = self.nearest_before(hour)
        return (self.read(before) if before else None, self.read(after) if after else None)

    def nearest_before(self, hour: KafkaHour) -> KafkaHour | None:
        """The nearest landed hour before `hour`, in listings of one manifest name each, as many as the gap to it has
        binary digits (one when the hour before landed): a window ending at `hour` doubles until it holds a landed
        hour, then the gap above the landed hour found is halved until none lies between it and `hour`."""
        if hour.start == FIRST_HOUR:
            return None
        found = self._first_landed_from(hour.previous())
        if found is None or found >= hour:
            earliest = self._first_landed_from(None)
            if earliest is None or earliest >= hour:
                return None
            span = 2
            while found is None or found >= hour:
                start = earliest if span * ONE_HOUR >= hour.start - earliest.start else KafkaHour(hour.start - span * ONE_HOUR)
                found = self._first_landed_from(start)
                span *= 2
        low, high = found, hour  # low landed; none landed in [high, hour)
        while high.start - low.start > ONE_HOUR:
            middle = KafkaHour(low.start + (high.start - low.start) // 2 // ONE_HOUR * ONE_HOUR)
            probe = self._first_landed_from(middle)
            if probe is not None and probe < high:
                low = probe
            else:
                high = middle
        return low

    def _first_landed_from(self, hour: KafkaHour | None) -> KafkaHour | None:
        return next(iter(self._landed_from(hour, limit=1)), None)

    def _landed_from(self, hour: KafkaHour | None, limit: int | None = None) -> list[KafkaHour]:
        """Landed hours from `hour` (from the first when None) in order, listing only the manifest names asked for."""
        after = layout.hour_name(hour) if hour is not None else ""
        names = self.storage.list_names(layout.manifest_prefix(self.database, self.table), prefix=layout.MANIFEST_NAME_PREFIX,
                                        start_after=after, limit=limit)
        return [h for h in map(layout.hour_of_manifest_path, names) if h is not None]

    def all(self) -> Iterable[HourManifest]:
        for hour in self.landed_hours():
            manifest = self.read(hour)
            if manifest is not None:
                yield manifest


@dataclass(frozen=True)
class ManifestChange:
    """An hour manifest written, replaced or deleted, and when (by its writer's clock)."""

    database: str
    table: str
    hour: KafkaHour
    at: datetime


class ManifestChanges:
    """The lake's log of manifest changes: an empty object per manifest written, named by when, in a folder per day. A
    reader keeping totals (the metrics server) learns which tables' hours changed since it last looked, an hour landed
    again or landed behind newer ones included, from one listing of the log instead of one listing per table; a
    manifest's name alone cannot say it was replaced. Kept `KEPT`: each retention run prunes the days before."""

    KEPT = timedelta(days=2)

    def __init__(self, storage: LakeStorage):
        self.storage = storage

    def record(self, database: str, table: str, hour: KafkaHour, at: datetime | None = None) -> None:
        self.storage.write_marker(layout.manifest_change_path(database, table, hour, at or datetime.now(timezone.utc)))

    def since(self, moment: datetime) -> list[ManifestChange]:
        """The changes recorded at or after `moment`, oldest first: one listing of the day folders, then one of the
        names after `moment` in each day from its own (usually one)."""
        first_day = layout.manifest_changes_day(moment)
        changes = []
        for day in self.storage.list_folders(layout.MANIFEST_CHANGES_PREFIX, prefix="date="):
            if day < first_day:
                continue
            # Names start with their time: those at or after the moment's time sort after this text.
            after = f"{moment:%H%M%S%f}" if day == first_day else ""
            for name in self.storage.list_names(f"{layout.MANIFEST_CHANGES_PREFIX}/{day}", start_after=after):
                parsed = layout.parse_manifest_change(day, name)
                if parsed is not None:
                    changes.append(ManifestChange(*parsed))
        return sorted(changes, key=lambda change: change.at)

    def prune(self, now: datetime) -> list[str]:
        """Deletes the day folders older than `KEPT`; returns the days deleted."""
        keep_from = layout.manifest_changes_day(now - self.KEPT)
        old = [day for day in self.storage.list_folders(layout.MANIFEST_CHANGES_PREFIX, prefix="date=") if day < keep_from]
        for day in old:
            self.storage.delete_folder(f"{layout.MANIFEST_CHANGES_PREFIX}/{day}")
        return old


class ManifestChangeFeed:
    """What a reader of the change log has not seen yet, look after look. Writers' clocks disagree a little, and a
    change is recorded a moment after its time is taken, so each look lists again from `OVERLAP` before the newest
    change seen and leaves out those already seen. The first look only marks where the reader starts: what the log
    held before, the reader reads whole."""

    OVERLAP = timedelta(minutes=10)

    def __init__(self, changes: ManifestChanges):
        self._changes = changes
        self._newest: datetime | None = None
        self._seen: set[ManifestChange] = set()

    def news(self, now: datetime) -> list[ManifestChange]:
        started = self._newest is not None
        listed = self._changes.since((self._newest or now) - self.OVERLAP)
        new = [change for change in listed if change not in self._seen]
        if listed:
            self._newest = max(self._newest or listed[-1].at, listed[-1].at)
        elif not started:
            self._newest = now
        horizon = (self._newest or now) - self.OVERLAP
        self._seen = {change for change in self._seen | set(new) if change.at >= horizon}
        return new if started else []


class AttemptJournal:
    """The folders the attempts at landing one Kafka hour wrote files into: a task records a folder before its first
    file there, so the hour's commit finds the files of crashed attempts in whichever placement hours they went by
    looking in those folders, not through the whole table."""

    def __init__(self, storage: LakeStorage, database: str, table: str, hour: KafkaHour):
        self.storage = storage
        self.directory = layout.attempt_journal_directory(database, table, hour)
        self._recorded: set[str] = set()

    def record(self, folder: str) -> None:
        if folder not in self._recorded:
            self.storage.write_marker(f"{self.directory}/{layout.folder_as_name(folder)}")
            self._recorded.add(folder)

    def folders(self) -> list[str]:
        return [layout.folder_of_name(name) for name in self.storage.list_names(self.directory)]


class PlacementIndex:
    """Which Kafka hours may own files in a folder: each landing records the folders of its data files before its commit,
    so compaction reads the manifests of the hours that wrote into a placement hour, late or early, not all of them."""

    def __init__(self, storage: LakeStorage, database: str, table: str):
        self.storage, self.database, self.table = storage, database, table

    def record(self, manifest: HourManifest) -> None:
        for folder in sorted({f.path.rsplit("/", 1)[0] for f in manifest.files if f.kind == "data"}):
            self.storage.write_marker(layout.placement_index_path(self.database, self.table, folder, manifest.kafka_hour))

    def writers(self, folder: str) -> list[KafkaHour]:
        names = self.storage.list_names(layout.placement_index_directory(self.database, self.table, folder))
        return [h for h in map(layout.hour_of_manifest_path, names) if h is not None]
