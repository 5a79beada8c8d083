"""Files of a landed hour that no manifest keeps: those of the previous landing the new one did not rewrite, and
those of attempts that crashed before their commit.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka_lake.lake import layout
from kafka_lake.lake.layout import parse_data_file_name
from kafka_lake.lake.manifests import AttemptJournal, HourManifest, LandedFile
from kafka_lake.lake.storage import LakeStorage, StoredFile
from kafka_lake.table_spec import TableSpec

ALL_KINDS = ("data", "dead_letter", "unrouted")


def letter_prefixes(topic: TableSpec) -> tuple[str, ...]:
    """Where a table's landings write records that land in no table: its dead letters, and its topic's unrouted dead
    letters if it is the routed table that lands them."""
    unrouted = (layout.unrouted_prefix(topic.topic),) if topic.route is not None and topic.lands_unrouted else ()
    return (layout.dead_letter_prefix(topic.database, topic.table), *unrouted)


def replaced_files(previous: HourManifest | None, current: HourManifest, kinds: Iterable[str] = ALL_KINDS
                   ) -> list[LandedFile]:
    """The files of `kinds` the previous landing of the hour wrote and the new one does not own."""
    if previous is None:
        return []
    kept = {f.path for f in current.files}
    kinds = set(kinds)
    return [f for f in previous.files if f.kind in kinds and f.path not in kept]


def remove_replaced_files(storage: LakeStorage, previous: HourManifest | None, current: HourManifest,
                          kinds: Iterable[str] = ALL_KINDS) -> list[str]:
    removed = [f.path for f in replaced_files(previous, current, kinds)]
    for path in removed:
        storage.delete(path)
    return removed


def attempt_folders(storage: LakeStorage, topic: TableSpec, manifest: HourManifest, within: Iterable[str]) -> list[str]:
    """The folders under `within` (lake prefixes) that attempts at landing the manifest's hour wrote into: those its
    tasks recorded in the hour's attempt journal before their first file there, and the manifest's own. The hour's
    folders, never the table's whole history."""
    prefixes = tuple(prefix.rstrip("/") + "/" for prefix in within)
    journal = AttemptJournal(storage, topic.database, topic.table, manifest.kafka_hour)
    folders = set(journal.folders()) | {f.path.rsplit("/", 1)[0] for f in manifest.files}
    return sorted(folder for folder in folders if (folder + "/").startswith(prefixes))


def files_in_hour_ranges(storage: LakeStorage, topic: TableSpec, manifest: HourManifest, folders: Iterable[str]
                         ) -> list[StoredFile]:
    """The topic's landed files in `folders` whose first offset falls in one of the hour's offset ranges and that the
    manifest does not own: written for this hour by another attempt."""
    owned = {f.path for f in manifest.files}
    ranges = {p.partition: (p.start, p.end) for p in manifest.partitions}
    found = []
    for folder in sorted(set(folders)):
        for stored in storage.list_files(folder):
            name = parse_data_file_name(stored.path)
            if name is None or name.topic != topic.topic or stored.path in owned:
                continue
            start, end = ranges.get(name.partition, (0, 0))
            if start <= name.first_offset < end:
                found.append(stored)
    return found


def remove_orphans(storage: LakeStorage, topic: TableSpec, manifest: HourManifest, within: Iterable[str]) -> list[str]:
    """Deletes files written for this hour's offset ranges that the manifest does not own (crashed attempts), in the
    folders under `within` the hour's attempts wrote into (`attempt_folders`)."""
    removed = [stored.path for stored in
               files_in_hour_ranges(storage, topic, manifest, attempt_folders(storage, topic, manifest, within))]
    for path in removed:
        storage.delete(path)
    return removed
