"""Files of a landed hour that no manifest keeps: those of the previous landing the new one did not rewrite, and
those of attempts that crashed before their commit, found by the offsets in their names.
"""

from __future__ import annotations

from typing import Iterable

from kafka_lake.catalog import TopicSpec
from kafka_lake.layout import parse_data_file_name
from kafka_lake.manifests import HourManifest, LandedFile
from kafka_lake.storage import LakeStorage, StoredFile


def replaced_files(previous: HourManifest | None, current: HourManifest, kinds: Iterable[str] = ("data", "dead_letter")
                   ) -> list[LandedFile]:
    """The files of `kinds` the previous landing of the hour wrote and the new one does not own."""
    if previous is None:
        return []
    kept = {f.path for f in current.files}
    kinds = set(kinds)
    return [f for f in previous.files if f.kind in kinds and f.path not in kept]


def remove_replaced_files(storage: LakeStorage, previous: HourManifest | None, current: HourManifest,
                          kinds: Iterable[str] = ("data", "dead_letter")) -> list[str]:
    removed = [f.path for f in replaced_files(previous, current, kinds)]
    for path in removed:
        storage.delete(path)
    return removed


def files_in_hour_ranges(storage: LakeStorage, topic: TopicSpec, manifest: HourManifest, prefixes: Iterable[str]
                         ) -> list[StoredFile]:
    """The topic's landed files under `prefixes` whose first offset falls in one of the hour's offset ranges and
    that the manifest does not own: written for this hour by another attempt."""
    owned = {f.path for f in manifest.files}
    ranges = {p.partition: (p.start, p.end) for p in manifest.partitions}
    found = []
    for prefix in prefixes:
        for stored in storage.list_files(prefix):
            name = parse_data_file_name(stored.path)
            if name is None or name.topic != topic.topic or stored.path in owned:
                continue
            start, end = ranges.get(name.partition, (0, 0))
            if start <= name.first_offset < end:
                found.append(stored)
    return found


def remove_orphans(storage: LakeStorage, topic: TopicSpec, manifest: HourManifest, prefixes: Iterable[str]) -> list[str]:
    """Deletes files written for this hour's offset ranges that the manifest does not own (crashed attempts)."""
    removed = [stored.path for stored in files_in_hour_ranges(storage, topic, manifest, prefixes)]
    for path in removed:
        storage.delete(path)
    return removed
