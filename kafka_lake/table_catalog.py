"""The table catalog (Glue, or a Hive metastore in `spark_jobs.hive_catalog`): one protocol, and the
reconciliation that makes the catalog's partitions equal the partitions in storage.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Collection, Iterable, Mapping, Protocol

from kafka_lake.table_schema import (
    PARQUET_INPUT_FORMAT,
    PARQUET_OUTPUT_FORMAT,
    PARQUET_SERDE,
    Column,
    TableDefinition,
    merge_with_catalog,
    parse_hive_type,
)
from kafka_lake.table_partition import TablePartition

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

    @property
    def changed(self) -> bool:
        return self.created or bool(self.added_columns or self.widened_columns or self.relocated_table)


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
    wanted = None if hours is None else {_utc(hour) for hour in hours}
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
    hours = None if only_hours is None else [_utc(hour) for hour in only_hours]
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


def column_changes(old: tuple[Column, ...], new: tuple[Column, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(added column names, columns whose type changed) from `old` to `new`."""
    old_types = {c.name.lower(): c.type for c in old}
    added = tuple(c.name for c in new if c.name.lower() not in old_types)
    widened = tuple(c.name for c in new if c.name.lower() in old_types and old_types[c.name.lower()] != c.type)
    return added, widened


def check_partition_keys(definition: TableDefinition, keys: Iterable[tuple[str, str]]) -> None:
    found = [(name.lower(), parse_hive_type(type_text)) for name, type_text in keys]
    wanted = [(c.name, c.type) for c in definition.partition_keys]
    if found != wanted:
        raise TableCatalogError(
            f"{definition.name} exists in the catalog partitioned by {[f'{n} {t}' for n, t in found]}, not by "
            f"{[f'{n} {t}' for n, t in wanted]}; it was not created by this platform: rename or drop it"
        )


def _utc(hour: datetime) -> datetime:
    if hour.tzinfo is None:
        raise ValueError(f"{hour!r} has no time zone; placement hours are UTC")
    return hour.astimezone(timezone.utc)


def batches(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# --- AWS Glue ---------------------------------------------------------------------------------------

# Glue's API limits per call.
GLUE_CREATE_BATCH = 100
GLUE_UPDATE_BATCH = 100
GLUE_DELETE_BATCH = 25
GLUE_GET_BATCH = 1000


def _glue_column(column: dict) -> Column:
    return Column(column["Name"], parse_hive_type(column["Type"]), column.get("Comment", ""))


class GlueCatalog:
    """AWS Glue Data Catalog through boto3. The endpoint, credentials and region come from the standard
    AWS configuration (`AWS_REGION` too, like the lake's S3 client); `AWS_ENDPOINT_URL_GLUE` (read by
    botocore itself) points it elsewhere."""

    kind = "glue"

    def __init__(self, client=None, region: str | None = None):
        if client is None:
            import boto3
            from botocore.config import Config

            # Glue throttles bursts of partition calls; adaptive retries back off instead of failing.
            region = region or os.environ.get("AWS_REGION") or None  # botocore reads AWS_DEFAULT_REGION itself
            client = boto3.client("glue", region_name=region, config=Config(retries={"mode": "adaptive", "max_attempts": 10}))
        self.client = client
        self._errors = client.exceptions

    # The table ------------------------------------------------------------------------------------
    def ensure_table(self, definition: TableDefinition) -> TableChange:
        self._ensure_database(definition.database)
        existing = self._get_table(definition)
        if existing is None:
            try:
                self.client.create_table(DatabaseName=definition.database, TableInput=self._table_input(definition, definition.columns))
                return TableChange(created=True)
            except self._errors.AlreadyExistsException:
                existing = self._get_table(definition)  # created concurrently: evolve it like any other
        self._check_external(definition, existing)
        check_partition_keys(definition, ((k["Name"], k["Type"]) for k in existing.get("PartitionKeys", [])))
        descriptor = existing.get("StorageDescriptor", {})
        current = tuple(map(_glue_column, descriptor.get("Columns", [])))
        columns = merge_with_catalog(current, definition)
        added, widened = column_changes(current, columns)
        relocated = normalize_location(descriptor.get("Location", "")) != normalize_location(definition.location)
        if not (added or widened or relocated):
            return TableChange()
        table_input = self._table_input(definition, columns)
        table_input["Parameters"] = {**existing.get("Parameters", {}), **table_input["Parameters"]}
        self.client.update_table(DatabaseName=definition.database, TableInput=table_input)
        if added or widened:
            # Athena reads a partition with the partition's own column list and refuses types that differ
            # from the table's (HIVE_PARTITION_SCHEMA_MISMATCH): every partition follows the table.
            self._refresh_partition_columns(definition, columns)
        return TableChange(added_columns=added, widened_columns=widened, relocated_table=relocated)

    def table_columns(self, definition: TableDefinition) -> tuple[Column, ...] | None:
        existing = self._get_table(definition)
        if existing is None:
            return None
        return tuple(map(_glue_column, existing["StorageDescriptor"]["Columns"]))

    def _ensure_database(self, database: str) -> None:
        try:
            self.client.get_database(Name=database)
        except self._errors.EntityNotFoundException:
            try:
                self.client.create_database(
                    DatabaseInput={"Name": database, "Description": "Kafka topics landed by kafka_lake"}
                )
            except self._errors.AlreadyExistsException:
                pass

    def _get_table(self, definition: TableDefinition) -> dict | None:
        try:
            return self.client.get_table(DatabaseName=definition.database, Name=definition.table)["Table"]
        except self._errors.EntityNotFoundException:
            return None

    @staticmethod
    def _check_external(definition: TableDefinition, table: dict) -> None:
        if table.get("TableType", "EXTERNAL_TABLE") != "EXTERNAL_TABLE":
            raise TableCatalogError(
                f"{definition.name} exists in Glue as a {table.get('TableType')}, not an EXTERNAL_TABLE; the platform "
                f"only manages external tables over the lake: rename or drop it"
            )

    def _table_input(self, definition: TableDefinition, columns: tuple[Column, ...]) -> dict:
        return {
            "Name": definition.table,
            "Description": f"Kafka topic {definition.topic}, landed hourly as Parquet by kafka_lake",
            "TableType": "EXTERNAL_TABLE",
            "Parameters": {
                "EXTERNAL": "TRUE",
                "classification": "parquet",
                "kafka_lake.topic": definition.topic,
                "kafka_lake.schema_versions": ",".join(map(str, definition.schema_versions)),
            },
            "PartitionKeys": [{"Name": c.name, "Type": c.type.hive()} for c in definition.partition_keys],
            "StorageDescriptor": self._descriptor(columns, definition.location),
        }

    @staticmethod
    def _descriptor(columns: tuple[Column, ...], location: str) -> dict:
        return {
            "Columns": [{"Name": c.name, "Type": c.type.hive(), **({"Comment": c.comment} if c.comment else {})}
                        for c in columns],
            "Location": location,
            "InputFormat": PARQUET_INPUT_FORMAT,
            "OutputFormat": PARQUET_OUTPUT_FORMAT,
            "SerdeInfo": {"SerializationLibrary": PARQUET_SERDE, "Parameters": {"serialization.format": "1"}},
            "Compressed": False,
            "StoredAsSubDirectories": False,
        }

    def _columns_now(self, definition: TableDefinition) -> tuple[Column, ...]:
        return self.table_columns(definition) or definition.columns

    # Partitions -----------------------------------------------------------------------------------
    def list_partitions(self, definition: TableDefinition, hours: Collection[datetime] | None = None) -> dict[TablePartition, str]:
        found = {}
        for raw in self._raw_partitions(definition, hours):
            found[partition_from_values(definition, raw["Values"])] = normalize_location(raw["StorageDescriptor"]["Location"])
        return found

    def _raw_partitions(self, definition: TableDefinition, hours: Collection[datetime] | None) -> Iterable[dict]:
        if hours is None:
            pages = self.client.get_paginator("get_partitions").paginate(
                DatabaseName=definition.database, TableName=definition.table
            )
            for page in pages:
                yield from page["Partitions"]
            return
        # Every partition a placement hour can have, fetched by value: Glue's filter expressions trip
        # over partition keys that are keywords (`date`), and the schema versions are known.
        keys = [
            {"Values": list(TablePartition(version, _utc(hour)).values().values())}
            for hour in sorted(set(hours)) for version in definition.schema_versions
        ]
        for batch in batches(keys, GLUE_GET_BATCH):
            while batch:
                answer = self.client.batch_get_partition(
                    DatabaseName=definition.database, TableName=definition.table, PartitionsToGet=batch
                )
                yield from answer.get("Partitions", [])
                batch = answer.get("UnprocessedKeys", [])

    def add_partitions(self, definition: TableDefinition, locations: Mapping[TablePartition, str]) -> None:
        columns = self._columns_now(definition)
        inputs = [
            {"Values": list(partition.values().values()), "StorageDescriptor": self._descriptor(columns, location), "Parameters": {}}
            for partition, location in sorted(locations.items())
        ]
        for batch in batches(inputs, GLUE_CREATE_BATCH):
            answer = self.client.batch_create_partition(
                DatabaseName=definition.database, TableName=definition.table, PartitionInputList=batch
            )
            # Added concurrently is as good as added here; its location is checked on the next reconcile.
            self._raise_errors(definition, "add", answer.get("Errors", []), ignore="AlreadyExistsException")

    def set_locations(self, definition: TableDefinition, locations: Mapping[TablePartition, str]) -> None:
        columns = self._columns_now(definition)
        self._update_partitions(definition, {p: self._descriptor(columns, location) for p, location in locations.items()})

    def drop_partitions(self, definition: TableDefinition, partitions: Collection[TablePartition]) -> None:
        values = [{"Values": list(p.values().values())} for p in sorted(partitions)]
        for batch in batches(values, GLUE_DELETE_BATCH):
            answer = self.client.batch_delete_partition(
                DatabaseName=definition.database, TableName=definition.table, PartitionsToDelete=batch
            )
            self._raise_errors(definition, "drop", answer.get("Errors", []), ignore="EntityNotFoundException")

    def _refresh_partition_columns(self, definition: TableDefinition, columns: tuple[Column, ...]) -> None:
        descriptors = {}
        for raw in self._raw_partitions(definition, None):
            location = raw["StorageDescriptor"]["Location"]
            descriptors[partition_from_values(definition, raw["Values"])] = self._descriptor(columns, location)
        self._update_partitions(definition, descriptors)

    def _update_partitions(self, definition: TableDefinition, descriptors: Mapping[TablePartition, dict]) -> None:
        entries = [
            {
                "PartitionValueList": list(partition.values().values()),
                "PartitionInput": {"Values": list(partition.values().values()), "StorageDescriptor": descriptor, "Parameters": {}},
            }
            for partition, descriptor in sorted(descriptors.items())
        ]
        for batch in batches(entries, GLUE_UPDATE_BATCH):
            answer = self.client.batch_update_partition(
                DatabaseName=definition.database, TableName=definition.table, Entries=batch
            )
            self._raise_errors(definition, "update", answer.get("Errors", []))

    @staticmethod
    def _raise_errors(definition: TableDefinition, action: str, errors: list[dict], ignore: str | None = None) -> None:
        real = [e for e in errors if e.get("ErrorDetail", {}).get("ErrorCode") != ignore]
        if real:
            shown = "; ".join(
                f"{'/'.join(e.get('PartitionValues') or e.get('PartitionValueList') or [])}: "
                f"{e.get('ErrorDetail', {}).get('ErrorCode')} {e.get('ErrorDetail', {}).get('ErrorMessage', '')}"
                for e in real[:5]
            )
            raise TableCatalogError(f"Glue refused to {action} {len(real)} partition(s) of {definition.name}: {shown}")
