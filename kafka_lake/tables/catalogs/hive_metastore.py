"""The Hive metastore as a `TableCatalog`, through a SparkSession with Hive support: the embedded
Derby metastore by default, or the one at `HIVE_METASTORE_URI`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Collection, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kafka_lake.lake.layout import date_text
from kafka_lake.lake.table_partition import TablePartition
from kafka_lake.schemas.avro_types import AVRO_NAME
from kafka_lake.tables.catalogs.protocol import (
    TableCatalogError,
    TableChange,
    batches,
    normalize_location,
    partition_from_values,
    plan_table_change,
)
from kafka_lake.tables.table_schema import Column, TableDefinition, parse_hive_type

if TYPE_CHECKING:  # the session is handed in by the Spark layer: the core never imports Spark
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SQL_BATCH = 100  # partitions per ALTER TABLE statement
BUSY_WAIT_S = 600  # how long to wait for another process to release the embedded metastore
BUSY_POLL_S = 5
PER_HOUR_LISTING = 24  # up to this many hours are listed hour by hour, more as the whole table
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}\Z")
_HOUR = re.compile(r"^\d{2}\Z")


def quote(identifier: str) -> str:
    """A backquoted identifier; only plain names are accepted, so nothing else can reach the SQL."""
    if not AVRO_NAME.match(identifier):
        raise ValueError(f"{identifier!r} is not a plain identifier; refusing to put it in SQL")
    return f"`{identifier}`"


def sql_string(value: str) -> str:
    """A Spark SQL string literal (backslash escapes are on by default)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _column_ddl(column: Column) -> str:
    comment = f" COMMENT {sql_string(column.comment)}" if column.comment else ""
    return f"{quote(column.name)} {column.type.spark_ddl()}{comment}"


def _column_of(spark_field) -> Column:
    """A column as the session catalog holds it (a Spark StructField through py4j), comment included."""
    comment = spark_field.getComment()
    return Column(spark_field.name(), parse_hive_type(spark_field.dataType().catalogString()),
                  comment.get() if comment.isDefined() else "")


class MetastoreBusy(TableCatalogError):
    """Another process holds the embedded Derby metastore."""


def to_hive_location(uri: str) -> str:
    """Open-source Hadoop reads S3 through S3A, registered for `s3a://` only (EMR registers both), so a
    Hive table says `s3a://` where the lake and Glue say `s3://`."""
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def from_hive_location(location: str) -> str:
    location = "s3://" + location[len("s3a://"):] if location.startswith("s3a://") else location
    return normalize_location(location)


class HiveCatalog:
    """Tables are EXTERNAL: dropping a partition never deletes files, which storage owns."""

    kind = "hive"

    def __init__(self, spark: SparkSession, metastore_uri: str | None = None, busy_wait_s: float = BUSY_WAIT_S):
        if spark.conf.get("spark.sql.catalogImplementation", "in-memory") != "hive":
            raise TableCatalogError(
                "the Spark session has no Hive support (spark.sql.catalogImplementation=hive): start it through "
                "resources.spark, which sets it, or use TABLE_CATALOG=glue"
            )
        if metastore_uri:
            configured = spark.sparkContext._jsc.hadoopConfiguration().get("hive.metastore.uris")
            if configured != metastore_uri:
                raise TableCatalogError(
                    f"HIVE_METASTORE_URI is {metastore_uri} but this Spark session talks to {configured or 'the embedded Derby metastore'}; "
                    f"the session must start with spark.hadoop.hive.metastore.uris={metastore_uri} (resources.spark sets it)"
                )
        self.spark = spark
        self.busy_wait_s = busy_wait_s
        self.metastore = (f"the Hive metastore at {metastore_uri} (HIVE_METASTORE_URI)" if metastore_uri
                          else "the embedded Hive metastore (Derby)")
        self._jvm: Any = spark._jvm
        self._session_catalog = spark._jsparkSession.sessionState().catalog()

    # The table ------------------------------------------------------------------------------------
    def ensure_table(self, definition: TableDefinition) -> TableChange:
        """Carries out the plan of a table change (`kafka_lake.tables.catalogs.protocol.plan_table_change`) in the
        metastore's own terms."""
        table = self._name(definition)
        self._sql(f"CREATE DATABASE IF NOT EXISTS {quote(definition.database)}", definition)
        created = False
        if self._metadata(definition) is None:
            column_ddl = ", ".join(map(_column_ddl, definition.columns))
            keys = ", ".join(map(_column_ddl, definition.partition_keys))
            self._sql(
                f"CREATE EXTERNAL TABLE IF NOT EXISTS {table} ({column_ddl}) PARTITIONED BY ({keys}) STORED AS PARQUET "
                f"LOCATION {sql_string(to_hive_location(definition.location))} TBLPROPERTIES ({self._properties(definition)})",
                definition,
            )
            created = True
        metadata = self._metadata(definition)  # also when created concurrently with other columns
        if metadata.tableType().name() != "EXTERNAL":
            raise TableCatalogError(
                f"{definition.name} exists in the Hive metastore as a {metadata.tableType().name()} table, not EXTERNAL; "
                f"dropping its partitions would delete lake files: rename or drop it"
            )
        plan = plan_table_change(
            definition, tuple(map(_column_of, metadata.dataSchema().fields())),
            ((f.name(), f.dataType().catalogString()) for f in metadata.partitionSchema().fields()),
            from_hive_location(metadata.location().toString()),
        )
        columns, added, widened = plan.columns, plan.added, plan.widened
        if widened or plan.recased:
            # Spark SQL's ALTER TABLE … CHANGE COLUMN refuses type changes on Hive tables, and ADD COLUMNS
            # cannot reach inside a struct: the session catalog replaces the column list in one update.
            ddl = ", ".join(map(_column_ddl, columns))
            schema = self._jvm.org.apache.spark.sql.types.StructType.fromDDL(ddl)
            self._call(lambda: self._session_catalog.alterTableDataSchema(self._identifier(definition), schema), definition)
        elif added:
            new = ", ".join(_column_ddl(c) for c in columns if c.name in added)
            self._sql(f"ALTER TABLE {table} ADD COLUMNS ({new})", definition)
        if plan.relocated:
            self._sql(f"ALTER TABLE {table} SET LOCATION {sql_string(to_hive_location(definition.location))}", definition)
        if plan.columns_changed:
            self._sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({self._properties(definition)})", definition)
            self.spark.catalog.refreshTable(f"{definition.database}.{definition.table}")
        return plan.applied(created)

    def table_columns(self, definition: TableDefinition) -> tuple[Column, ...] | None:
        metadata = self._metadata(definition)
        if metadata is None:
            return None
        return tuple(map(_column_of, metadata.dataSchema().fields()))

    def _metadata(self, definition: TableDefinition):
        identifier = self._identifier(definition)
        if not self._call(lambda: self._session_catalog.tableExists(identifier), definition):
            return None
        return self._call(lambda: self._session_catalog.getTableMetadata(identifier), definition)

    @staticmethod
    def _properties(definition: TableDefinition) -> str:
        properties = {
            "kafka_lake.topic": definition.topic,
            "kafka_lake.schema_versions": ",".join(map(str, definition.schema_versions)),
        }
        return ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in properties.items())

    # Partitions -----------------------------------------------------------------------------------
    def list_partitions(self, definition: TableDefinition, hours: Collection[datetime] | None = None) -> dict[TablePartition, str]:
        identifier = self._identifier(definition)
        wanted = None if hours is None else {h.astimezone(timezone.utc) for h in hours}
        if wanted is None or len(wanted) > PER_HOUR_LISTING:
            specs = [self._jvm.scala.Option.apply(None)]  # one listing of the table beats one call per hour
        else:
            specs = [self._partial_spec({"date": date_text(h), "hour": f"{h:%H}"}) for h in sorted(wanted)]
        converters = self._jvm.scala.jdk.javaapi.CollectionConverters
        found = {}
        for spec in specs:
            listed = self._call(lambda: self._session_catalog.listPartitions(identifier, spec), definition).iterator()
            while listed.hasNext():
                partition = listed.next()
                values = dict(converters.asJava(partition.spec()))
                key = partition_from_values(definition, [values.get(c.name, "") for c in definition.partition_keys])
                if wanted is None or key.hour in wanted:
                    found[key] = from_hive_location(partition.location().toString())
        return found

    def add_partitions(self, definition: TableDefinition, locations: Mapping[TablePartition, str]) -> None:
        for batch in batches(sorted(locations.items()), SQL_BATCH):
            specs = " ".join(
                f"PARTITION ({self._spec(p)}) LOCATION {sql_string(to_hive_location(location))}" for p, location in batch
            )
            self._sql(f"ALTER TABLE {self._name(definition)} ADD IF NOT EXISTS {specs}", definition)

    def set_locations(self, definition: TableDefinition, locations: Mapping[TablePartition, str]) -> None:
        for partition, location in sorted(locations.items()):  # Spark SQL moves one partition per statement
            self._sql(
                f"ALTER TABLE {self._name(definition)} PARTITION ({self._spec(partition)}) "
                f"SET LOCATION {sql_string(to_hive_location(location))}",
                definition,
            )

    def drop_partitions(self, definition: TableDefinition, partitions: Collection[TablePartition]) -> None:
        for batch in batches(sorted(partitions), SQL_BATCH):
            specs = ", ".join(f"PARTITION ({self._spec(p)})" for p in batch)
            self._sql(f"ALTER TABLE {self._name(definition)} DROP IF EXISTS {specs}", definition)

    @staticmethod
    def _spec(partition: TablePartition) -> str:
        values = partition.values()
        if not (values["schema_version"].isdigit() and _DATE.match(values["date"]) and _HOUR.match(values["hour"])):
            raise ValueError(f"partition values {values} are not a schema_version/date/hour")
        return f"`schema_version`={int(values['schema_version'])}, `date`={sql_string(values['date'])}, `hour`={sql_string(values['hour'])}"

    def _partial_spec(self, values: dict[str, str]):
        scala_map = getattr(self._jvm.scala.collection.immutable.Map, "from")(
            self._jvm.scala.jdk.javaapi.CollectionConverters.asScala(values)
        )
        return self._jvm.scala.Some(scala_map)

    # Plumbing -------------------------------------------------------------------------------------
    def _identifier(self, definition: TableDefinition):
        for name in (definition.database, definition.table):
            quote(name)  # validated like every name that reaches the metastore
        return self._jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(
            definition.table, self._jvm.scala.Some(definition.database)
        )

    @staticmethod
    def _name(definition: TableDefinition) -> str:
        return f"{quote(definition.database)}.{quote(definition.table)}"

    def _sql(self, statement: str, definition: TableDefinition):
        return self._call(lambda: self.spark.sql(statement), definition, statement)

    def _call(self, action, definition: TableDefinition | None, statement: str | None = None):
        deadline = time.monotonic() + self.busy_wait_s
        while True:
            try:
                return action()
            except Exception as error:  # py4j and Spark raise many types; the message decides
                explained = _explained(error, definition, statement, self.metastore)
                # Derby refuses before any statement runs, and the holder (another run, spark-sql) lets go
                # when it ends; the session connects on a later attempt.
                if not isinstance(explained, MetastoreBusy) or time.monotonic() >= deadline:
                    raise explained from error
                log.warning("%s; retrying for up to %.0f s more", explained, deadline - time.monotonic())
                time.sleep(BUSY_POLL_S)


def _causes(error: Exception) -> str:
    """The error's text and its Java cause chain: the metastore's real reason sits several causes deep
    (Derby's "Another instance … may have already booted the database" under four wrappers)."""
    texts = [str(error)]
    java = getattr(error, "_origin", None) or getattr(error, "java_exception", None)
    for _ in range(30):
        if java is None:
            break
        try:
            texts.append(str(java.toString()))
            java = java.getCause()
        except Exception:  # a py4j object we cannot walk further
            break
    return "\n".join(texts)


def _explained(error: Exception, definition: TableDefinition | None, statement: str | None,
               metastore: str = "the Hive metastore") -> Exception:
    text = _causes(error)
    what = f" ({definition.name})" if definition else ""
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    if "Another instance of Derby" in text:
        where = re.search(r"booted the database (\S+?)\.?$", text, re.MULTILINE)
        return MetastoreBusy(
            f"the embedded Hive metastore{what} ({where.group(1) if where else 'Derby'}) is in use by another process "
            f"(a Dagster run, spark-sql or pyspark): embedded Derby serves one process at a time. Retry when it is "
            f"done, or set HIVE_METASTORE_URI to a shared metastore"
        )
    if "Could not connect to meta store" in text or "Unable to instantiate org.apache.hadoop.hive" in text:
        # Spark's Hive client says only that it could not instantiate its client; the reason is its deepest cause.
        tried = re.search(r"Most recent failure: (.+)", text)
        cause = tried.group(1).strip() if tried else text.strip().splitlines()[-1]
        return TableCatalogError(f"{metastore} cannot be opened{what}: {cause}")
    if "types incompatible with the existing columns" in text:
        return TableCatalogError(
            f"the Hive metastore refused to widen a column{what}: set hive.metastore.disallow.incompatible.col.type.changes"
            f"=false on the metastore (the embedded one has it), which allows struct fields to be added. {first_line}"
        )
    if "No FileSystem for scheme" in text:
        return TableCatalogError(
            f"the Hive metastore cannot reach the lake's file system{what}: {first_line}. For s3a:// the metastore "
            f"and Spark need hadoop-aws on their class path"
        )
    if statement is not None:
        return TableCatalogError(f"Hive metastore statement failed{what}: {statement[:300]}: {first_line}")
    return TableCatalogError(f"Hive metastore call failed{what}: {first_line}")
