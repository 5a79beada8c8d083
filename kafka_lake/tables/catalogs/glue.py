"""AWS Glue Data Catalog as a `TableCatalog`, through boto3."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime

from kafka_lake.lake.aws_clients import glue_client
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.tables.catalogs.protocol import (
    TableCatalogError,
    TableChange,
    batches,
    normalize_location,
    partition_from_values,
    plan_table_change,
    utc_hour,
)
from kafka_lake.tables.table_schema import (
    PARQUET_INPUT_FORMAT,
    PARQUET_OUTPUT_FORMAT,
    PARQUET_SERDE,
    Column,
    TableDefinition,
    parse_hive_type,
)

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
        self.client = client if client is not None else glue_client(region)
        self._errors = self.client.exceptions

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
                if existing is None:
                    raise TableCatalogError(f"{definition.name}: Glue said it exists, then that it does not; retry") from None
        self._check_external(definition, existing)
        descriptor = existing.get("StorageDescriptor", {})
        plan = plan_table_change(definition, tuple(map(_glue_column, descriptor.get("Columns", []))),
                                 ((k["Name"], k["Type"]) for k in existing.get("PartitionKeys", [])),
                                 descriptor.get("Location", ""))
        if not plan.changed:
            return TableChange()
        table_input = self._table_input(definition, plan.columns)
        table_input["Parameters"] = {**existing.get("Parameters", {}), **table_input["Parameters"]}
        self.client.update_table(DatabaseName=definition.database, TableInput=table_input)
        if plan.columns_changed:
            # Athena reads a partition with the partition's own column list and refuses types that differ
            # from the table's (HIVE_PARTITION_SCHEMA_MISMATCH): every partition follows the table.
            self._refresh_partition_columns(definition, plan.columns)
        return plan.applied()

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
            {"Values": list(TablePartition(version, utc_hour(hour)).values().values())}
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
