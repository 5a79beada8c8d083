"""Reconciliation: the catalog's partitions made equal to the partitions in storage (registration), or pointed at
a new location (compaction's and erasure's switch to a new generation).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.tables.catalogs.protocol import TableCatalog, normalize_location, utc_hour
from kafka_lake.tables.table_schema import TableDefinition


@dataclass(frozen=True)
class ReconcileReport:
    added: tuple[TablePartition, ...] = ()
    relocated: tuple[TablePartition, ...] = ()
    dropped: tuple[TablePartition, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.added or self.relocated or self.dropped)


@dataclass(frozen=True)
class PartitionDifferences:
    """How the catalog differs from storage; empty when they are equal."""

    missing: dict[TablePartition, str]  # in storage, not in the catalog: location to add
    misplaced: dict[TablePartition, str]  # in both, the catalog points elsewhere: location to set
    unexpected: tuple[TablePartition, ...]  # in the catalog, no longer in storage

    @property
    def none(self) -> bool:
        return not (self.missing or self.misplaced or self.unexpected)

    def describe(self) -> str:
        if self.none:
            return "catalog partitions equal storage partitions"
        parts = []
        for label, partitions in (("missing from the catalog", self.missing), ("pointing at an old location", self.misplaced),
                                  ("no longer in storage", self.unexpected)):
            if partitions:
                parts.append(f"{len(partitions)} {label}: " + ", ".join(str(p) for p in sorted(partitions)[:10]))
        return "; ".join(parts)


def partition_differences(
    in_catalog: Mapping[TablePartition, str], in_storage: Mapping[TablePartition, str]
) -> PartitionDifferences:
    """Both sides map partitions to location URIs."""
    catalog = {p: normalize_location(location) for p, location in in_catalog.items()}
    storage = {p: normalize_location(location) for p, location in in_storage.items()}
    return PartitionDifferences(
        missing={p: location for p, location in storage.items() if p not in catalog},
        misplaced={p: location for p, location in storage.items() if p in catalog and catalog[p] != location},
        unexpected=tuple(sorted(p for p in catalog if p not in storage)),
    )


def storage_partition_uris(
    definition: TableDefinition, storage_partitions: Mapping[TablePartition, str], hours: Collection[datetime] | None = None
) -> dict[TablePartition, str]:
    """`table_state.storage_partitions` (relative locations) as URIs, limited to `hours` when given."""
    wanted = None if hours is None else {utc_hour(hour) for hour in hours}
    return {
        partition: definition.partition_uri(location)
        for partition, location in storage_partitions.items()
        if wanted is None or partition.hour in wanted
    }


def reconcile(
    catalog: TableCatalog,
    definition: TableDefinition,
    storage_partitions: Mapping[TablePartition, str],
    only_hours: Collection[datetime] | None = None,
) -> ReconcileReport:
    """Makes the catalog's partitions (of `only_hours`, or all) equal `storage_partitions`, which maps
    each partition to its location relative to the lake root, as `table_state.storage_partitions` does.

    New and moved partitions are published before missing ones are dropped, so a reader never loses
    a partition that storage still has."""
    hours = None if only_hours is None else [utc_hour(hour) for hour in only_hours]
    stored = storage_partition_uris(definition, storage_partitions, hours)
    differences = partition_differences(catalog.list_partitions(definition, hours), stored)
    if differences.missing:
        catalog.add_partitions(definition, differences.missing)
    if differences.misplaced:
        catalog.set_locations(definition, differences.misplaced)
    if differences.unexpected:
        catalog.drop_partitions(definition, differences.unexpected)
    return ReconcileReport(
        added=tuple(sorted(differences.missing)),
        relocated=tuple(sorted(differences.misplaced)),
        dropped=differences.unexpected,
    )


def publish(
    catalog: TableCatalog, definition: TableDefinition, locations: Mapping[TablePartition, str]
) -> ReconcileReport:
    """Points each given partition at its location (relative to the lake root), adding it if new:
    compaction's switch to a new generation. Other partitions are left alone."""
    hours = {partition.hour for partition in locations}
    current = catalog.list_partitions(definition, hours)
    wanted = {p: normalize_location(definition.partition_uri(location)) for p, location in locations.items()}
    added = {p: location for p, location in wanted.items() if p not in current}
    moved = {p: location for p, location in wanted.items() if p in current and normalize_location(current[p]) != location}
    if added:
        catalog.add_partitions(definition, added)
    if moved:
        catalog.set_locations(definition, moved)
    return ReconcileReport(added=tuple(sorted(added)), relocated=tuple(sorted(moved)))


