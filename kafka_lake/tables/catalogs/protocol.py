"""The table catalog as the platform sees it: one protocol every back end (`kafka_lake.tables.catalogs.glue`,
`kafka_lake.tables.catalogs.hive_metastore`) implements, and the one plan of a table change they all carry out.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol

from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.tables.table_schema import Column, TableDefinition, casefolded, merge_with_catalog, parse_hive_type

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}\Z")
_HOUR = re.compile(r"^\d{2}\Z")


class TableCatalogError(RuntimeError):
    """The catalog refused a change, or holds something the platform must not touch; the message says what."""


@dataclass(frozen=True)
class TableChange:
    """What `ensure_table` did to the catalog's table."""

    created: bool = False
    added_columns: tuple[str, ...] = ()
    widened_columns: tuple[str, ...] = ()  # a wider type, or new fields inside a struct
    relocated_table: bool = False
    recased_columns: tuple[str, ...] = ()  # registered with (struct field) names in another case, now lowercase

    @property
    def changed(self) -> bool:
        return self.created or bool(self.added_columns or self.widened_columns or self.relocated_table
                                    or self.recased_columns)


class TableCatalog(Protocol):
    """A catalog of external Parquet tables partitioned by schema_version, date, hour."""

    kind: str

    def ensure_table(self, definition: TableDefinition) -> TableChange:
        """Creates the table, or evolves it: new columns appended, types widened; never narrowed or dropped."""

    def table_columns(self, definition: TableDefinition) -> tuple[Column, ...] | None:
        """The table's data columns as the catalog holds them, or None when there is no such table."""

    def list_partitions(
        self, definition: TableDefinition, hours: Collection[datetime] | None = None
    ) -> dict[TablePartition, str]:
        """The table's partitions (of the given placement hours, or all), with their location URIs."""

    def add_partitions(self, definition: TableDefinition, locations: Mapping[TablePartition, str]) -> None: ...

    def set_locations(self, definition: TableDefinition, locations: Mapping[TablePartition, str]) -> None: ...

    def drop_partitions(self, definition: TableDefinition, partitions: Collection[TablePartition]) -> None: ...


@dataclass(frozen=True)
class TablePlan:
    """What a catalog's table must become: its columns (new fields appended, types widened, never narrowed or
    dropped), which were added or widened, and whether it moved. Every back end plans a change this one way."""

    columns: tuple[Column, ...]
    added: tuple[str, ...]
    widened: tuple[str, ...]
    relocated: bool
    recased: tuple[str, ...] = ()  # the same column, its name or a struct field's in another case: renamed lowercase

    @property
    def changed(self) -> bool:
        return bool(self.added or self.widened or self.relocated or self.recased)

    @property
    def columns_changed(self) -> bool:
        """Whether the column list changes: what partitions that carry the table's columns (Glue's) must follow."""
        return bool(self.added or self.widened or self.recased)

    def applied(self, created: bool = False) -> TableChange:
        """What the catalog reports once the plan is carried out (a table just created was not evolved)."""
        if created:
            return TableChange(created=True)
        return TableChange(added_columns=self.added, widened_columns=self.widened, relocated_table=self.relocated,
                           recased_columns=self.recased)


def plan_table_change(definition: TableDefinition, columns: tuple[Column, ...], partition_keys: Iterable[tuple[str, str]],
                      location: str) -> TablePlan:
    """The change that makes a catalog's existing table (its `columns`, `partition_keys` as (name, type text) and
    `location`) the topic's `definition`; a table partitioned otherwise is refused."""
    check_partition_keys(definition, partition_keys)
    merged = merge_with_catalog(columns, definition)
    added, widened, recased = column_changes(columns, merged)
    return TablePlan(merged, added, widened, normalize_location(location) != normalize_location(definition.location),
                     recased)


def normalize_location(location: str) -> str:
    """One spelling per location: metastores return `file:/x` or `file:///x` for the local path `/x`."""
    location = location.rstrip("/")
    if location.startswith("file://"):
        location = location[len("file://"):]
    elif location.startswith("file:"):
        location = location[len("file:"):]
    return location


def partition_from_values(definition: TableDefinition, values: Iterable[str]) -> TablePartition:
    """A catalog partition's values (schema_version, date, hour) as a `TablePartition`."""
    values = list(values)
    if len(values) == 3 and values[0].isdigit() and _DATE.match(values[1]) and _HOUR.match(values[2]):
        try:
            hour = datetime.strptime(f"{values[1]} {values[2]}", "%Y-%m-%d %H").replace(tzinfo=timezone.utc)
            return TablePartition(int(values[0]), hour)
        except ValueError:
            pass
    raise TableCatalogError(
        f"{definition.name}: the catalog holds a partition {values} that is not a schema_version/date/hour "
        f"the platform writes; drop it by hand, the platform never drops what it cannot read"
    )


def column_changes(old: tuple[Column, ...],
                   new: tuple[Column, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(added column names, columns whose type changed, columns only renamed to their lowercase name or whose
    struct fields were) from `old` to `new`."""
    before = {c.name.lower(): c for c in old}
    added = tuple(c.name for c in new if c.name.lower() not in before)
    kept = [(before[c.name.lower()], c) for c in new if c.name.lower() in before]
    widened = tuple(c.name for was, c in kept if casefolded(was.type) != casefolded(c.type))
    recased = tuple(c.name for was, c in kept if casefolded(was.type) == casefolded(c.type)
                    and (was.name, was.type) != (c.name, c.type))
    return added, widened, recased


def check_partition_keys(definition: TableDefinition, keys: Iterable[tuple[str, str]]) -> None:
    found = [(name.lower(), parse_hive_type(type_text)) for name, type_text in keys]
    wanted = [(c.name, c.type) for c in definition.partition_keys]
    if found != wanted:
        raise TableCatalogError(
            f"{definition.name} exists in the catalog partitioned by {[f'{n} {t}' for n, t in found]}, not by "
            f"{[f'{n} {t}' for n, t in wanted]}; it was not created by this platform: rename or drop it"
        )


def utc_hour(hour: datetime) -> datetime:
    if hour.tzinfo is None:
        raise ValueError(f"{hour!r} has no time zone; placement hours are UTC")
    return hour.astimezone(timezone.utc)


def batches(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


