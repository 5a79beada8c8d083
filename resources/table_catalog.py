"""The table catalog the lake's tables are registered in: `hive` (Spark's metastore: embedded Derby, or
`HIVE_METASTORE_URI`) or `glue` (boto3; `AWS_ENDPOINT_URL_GLUE` honoured), from `TABLE_CATALOG`.
"""

from __future__ import annotations

from typing import Callable, Optional

from dagster import ConfigurableResource

from kafka_lake.table_catalog import TableCatalog
from table_catalogs.glue import GlueCatalog

CATALOG_KINDS = ("hive", "glue")


class TableCatalogResource(ConfigurableResource):
    kind: str = "hive"
    hive_metastore_uri: Optional[str] = None  # Spark itself is pointed at it by resources.spark
    glue_region: Optional[str] = None  # unset: the standard AWS region configuration

    def catalog(self, spark_session: Callable[[], object]) -> TableCatalog:
        """The catalog; `spark_session` is called only for `hive`, so Glue never starts Spark."""
        if self.kind == "glue":
            return GlueCatalog(region=self.glue_region)
        if self.kind == "hive":
            from table_catalogs.hive import HiveCatalog

            return HiveCatalog(spark_session(), metastore_uri=self.hive_metastore_uri)
        raise ValueError(f"TABLE_CATALOG is {self.kind!r}; it must be one of {', '.join(CATALOG_KINDS)}")
