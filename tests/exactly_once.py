"""The exactly-once check of a lake against what was produced, which every fault scenario ends with.

Every produced record of the landed hours is in the lake once: as a row or a dead letter (read from
every file readers would see) or as a tombstone counted in a manifest; nothing is there twice, nothing
else is there, every file is owned by a manifest, and only offsets a run accepted as lost are missing.

For an Iceberg topic the rows are those its table's current snapshot reads, the table holds exactly the files of
every landed hour's manifest, and a data file in the table's folders that no snapshot holds is one of an attempt
that never committed, left for the orphan sweep (`LakeCount.unheld_files`): snapshots kept for time travel hold
the files a re-landing replaced.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from kafka_lake.lake import layout
from kafka_lake.lake.layout import parse_data_file_name
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
from kafka_lake.tables.iceberg.commits import landed_hour_matches_table
from kafka_lake.tables.iceberg.maintenance import held_files
from tests.landing_fixtures import Produced, read_lake


@dataclass(frozen=True)
class LakeCount:
    rows: int
    dead_letters: int
    tombstones: int
    accepted_lost: frozenset  # (partition, offset) a run accepted as lost, all of them produced
    unheld_files: frozenset = frozenset()  # an Iceberg table's: data files no snapshot holds (of crashed attempts)

    @property
    def records(self) -> int:
        return self.rows + self.dead_letters + self.tombstones


def _offsets(items) -> Counter:
    return Counter((item.row["_kafka_partition"], item.row["_kafka_offset"]) for item in items)


def _described(offsets) -> str:
    listed = sorted(offsets)
    return f"{len(listed)}: {listed[:20]}{' …' if len(listed) > 20 else ''}"


def assert_exactly_once(storage: LakeStorage, topic: TableSpec, expected: list[Produced],
                        iceberg_catalog: IcebergCatalogConfig | None = None) -> LakeCount:
    """`expected`: the produced records (offsets set by `produce`) the landed hours must hold. `iceberg_catalog`:
    an Iceberg topic's catalog (default: the one the environment names, else the embedded one beside a local lake)."""
    manifests = list(ManifestStore(storage, topic.database, topic.table).all())
    accepted = frozenset(
        (int(partition), offset)
        for manifest in manifests for partition, (start, end) in manifest.accepted_losses.items()
        for offset in range(start, end)
    )
    produced = {(p.partition, p.offset): p for p in expected}
    assert accepted <= set(produced), f"offsets accepted as lost that were never produced: {_described(accepted - set(produced))}"
    kept = {key: p for key, p in produced.items() if key not in accepted}

    table = None
    if topic.table_format == "iceberg":
        config = iceberg_catalog or IcebergCatalogConfig.from_settings(replace(PlatformSettings.from_env(), lake_root=storage.root))
        table = open_catalog(config).load_table((topic.database, topic.table))
        read = table.scan(selected_fields=("_kafka_partition", "_kafka_offset")).to_arrow()
        rows = Counter(zip(read.column("_kafka_partition").to_pylist(), read.column("_kafka_offset").to_pylist()))
    else:
        rows = _offsets(read_lake(storage, layout.table_prefix(topic.database, topic.table)))
    dead = _offsets(read_lake(storage, layout.dead_letter_prefix(topic.database, topic.table)))
    twice = {key for key, count in (rows + dead).items() if count > 1} | (set(rows) & set(dead))
    assert not twice, f"records in the lake more than once: {_described(twice)}"
    for found, kinds, what in ((rows, {"row"}, "rows"), (dead, None, "dead letters")):
        wanted = {key for key, p in kept.items() if (p.kind in kinds if kinds else p.kind not in ("row", "tombstone"))}
        assert not wanted - set(found), f"{what} lost: {_described(wanted - set(found))}"
        assert not set(found) - wanted, f"{what} in the lake that were not expected there: {_described(set(found) - wanted)}"

    tombstones = Counter()
    for manifest in manifests:
        tombstones.update({landed.partition: landed.counts.tombstones for landed in manifest.partitions})
    wanted_tombstones = Counter(p.partition for p in kept.values() if p.kind == "tombstone")
    assert +tombstones == +wanted_tombstones, f"tombstones counted per partition {dict(tombstones)} ≠ produced {dict(wanted_tombstones)}"

    _assert_ranges_tile(manifests)
    owned = {f.path for manifest in manifests for f in manifest.files}
    prefixes = (layout.dead_letter_prefix(topic.database, topic.table),) if table is not None else (
        layout.table_prefix(topic.database, topic.table), layout.dead_letter_prefix(topic.database, topic.table))
    on_disk = {f.path for prefix in prefixes for f in storage.list_files(prefix)}
    if table is not None:
        owned = {path for path in owned if path.startswith(prefixes)}
    assert on_disk == owned, f"files no manifest owns: {sorted(on_disk - owned)}; owned but gone: {sorted(owned - on_disk)}"
    unheld = _assert_table_holds_the_landings(storage, topic, table, manifests) if table is not None else frozenset()
    return LakeCount(sum(rows.values()), sum(dead.values()), sum(tombstones.values()), accepted, unheld)


def _assert_table_holds_the_landings(storage: LakeStorage, topic: TableSpec, table, manifests) -> frozenset:
    """Each landed hour's files are the table's for its hours, and every other data file is either held by a
    snapshot kept for time travel or one of an attempt no manifest names (its orphan age not reached yet)."""
    for manifest in manifests:
        outcome = landed_hour_matches_table(table, storage, manifest)
        assert outcome.passed, outcome.description
    held = held_files(table, storage)
    landed = {f.path for manifest in manifests for f in manifest.files}
    data = {f.path for f in storage.list_files(layout.table_prefix(topic.database, topic.table))
            if parse_data_file_name(f.path) is not None}
    unheld = data - held
    assert not unheld & landed, f"files of committed landings no snapshot holds: {sorted(unheld & landed)}"
    attempt_of = lambda path: parse_data_file_name(path).attempt
    attempts = {attempt_of(path) for path in landed if parse_data_file_name(path) is not None}
    committed = sorted(path for path in unheld if attempt_of(path) in attempts)
    assert not committed, f"files no snapshot holds, of an attempt that committed: {committed}"
    return frozenset(unheld)


def _assert_ranges_tile(manifests) -> None:
    """Per partition the landed hours' ranges follow each other: a gap only where a run accepted it."""
    ranges: dict[int, list[tuple[int, int, str]]] = {}
    for manifest in manifests:
        for landed in manifest.partitions:
            ranges.setdefault(landed.partition, []).append((landed.start, landed.end, manifest.hour))
    losses = {(int(p), start, end) for m in manifests for p, (start, end) in m.accepted_losses.items()}
    for partition, spans in ranges.items():
        spans.sort(key=lambda span: span[2])
        for (_, end, hour), (start, _, next_hour) in zip(spans, spans[1:]):
            assert start == end or (partition, end, start) in losses, (
                f"partition {partition}: hour {hour} ends at {end} but hour {next_hour} starts at {start}")
