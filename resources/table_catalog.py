"""The table catalog the lake's tables are registered in: `hive` (Spark's metastore: embedded Derby, or
`HIVE_METASTORE_URI`) or `glue` (boto3; `AWS_ENDPOINT_URL_GLUE` honoured), from `TABLE_CATALOG`; and the catalog
of the Iceberg tables (`kafka_lake.tables.iceberg.catalog`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from dagster import ConfigurableResource

from kafka_lake.settings import PlatformSettings
from kafka_lake.tables.catalogs.glue import GlueCatalog
from kafka_lake.tables.catalogs.protocol import TableCatalog

if TYPE_CHECKING:
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig

CATALOG_KINDS = ("hive", "glue")


class TableCatalogResource(ConfigurableResource):
    kind: str = "hive"
    hive_metastore_uri: str | None = None  # Spark itself is pointed at it by resources.spark
    glue_region: str | None = None  # unset: the standard AWS region configuration

    def catalog(self, spark_session: Callable[[], object]) -> TableCatalog:
        """The catalog; `spark_session` is called only for `hive`, so Glue never starts Spark."""
        if self.kind == "glue":
            return GlueCatalog(region=self.glue_region)
        if self.kind == "hive":
            from kafka_lake.tables.catalogs.hive_metastore import HiveCatalog

            return HiveCatalog(spark_session(), metastore_uri=self.hive_metastore_uri)
        raise ValueError(f"TABLE_CATALOG is {self.kind!r}; it must be one of {', '.join(CATALOG_KINDS)}")

    def iceberg_catalog(self, lake_root: str) -> IcebergCatalogConfig:
        """Where the Iceberg tables are: Glue with this `kind`, else `ICEBERG_REST_URI` or `ICEBERG_CATALOG_URI`, read
        from the environment at use (they may carry credentials, which the UI would show as resource config), else
        the embedded SQLite catalog beside a local lake."""
        from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig

        return IcebergCatalogConfig.from_settings(replace(PlatformSettings.from_env(), lake_root=lake_root,
                                                          table_catalog=self.kind))
