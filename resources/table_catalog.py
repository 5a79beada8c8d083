"""The table catalog the lake's tables are registered in, `hive` or `glue` from `TABLE_CATALOG`, and the catalog of
the Iceberg tables (`kafka_lake.tables.iceberg.catalog`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from dagster import ConfigurableResource

from kafka_lake.settings import PlatformSettings
from kafka_lake.tables.catalogs.protocol import TableCatalog
from kafka_lake.tables.catalogs.registry import CatalogAccess, open_table_catalog

if TYPE_CHECKING:
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig


class TableCatalogResource(ConfigurableResource):
    # `hive`: Spark's metastore, embedded Derby or `HIVE_METASTORE_URI`;
    # `glue`: boto3, `AWS_ENDPOINT_URL_GLUE` honoured.
    kind: str = "hive"  # `TABLE_CATALOG`: a name of `kafka_lake.tables.catalogs.registry.TABLE_CATALOGS`
    hive_metastore_uri: str | None = None  # Spark itself is pointed at it by resources.spark
    glue_region: str | None = None  # unset: the standard AWS region configuration

    def catalog(self, spark_session: Callable[[], object]) -> TableCatalog:
        """The catalog; `spark_session` is called only for the Hive metastore, so Glue never starts Spark."""
        return open_table_catalog(self.kind, CatalogAccess(spark_session, self.hive_metastore_uri, self.glue_region))

    def iceberg_catalog(self, lake_root: str) -> IcebergCatalogConfig:
        """Where the Iceberg tables are: Glue with this `kind`, else `ICEBERG_REST_URI` or `ICEBERG_CATALOG_URI`, read
        from the environment at use (they may carry credentials, which the UI would show as resource config), else
        the embedded SQLite catalog beside a local lake."""
        from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig

        return IcebergCatalogConfig.from_settings(replace(PlatformSettings.from_env(), lake_root=lake_root,
                                                          table_catalog=self.kind))
