"""The table catalogs a deployment's tables can be registered in, chosen once from `TABLE_CATALOG`: the registry beside
the `TableCatalog` protocol, each back end imported when chosen (the Hive metastore needs the Spark session).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka_lake.settings import TABLE_CATALOGS as CATALOG_NAMES
from kafka_lake.tables.catalogs.protocol import TableCatalog


@dataclass(frozen=True)
class CatalogAccess:
    """What opening a table catalog may need: Spark's session (called only by the Hive metastore, so Glue never
    starts Spark), the metastore's address, Glue's region."""

    spark_session: Callable[[], Any]
    hive_metastore_uri: str | None = None  # unset: the embedded Derby metastore
    glue_region: str | None = None  # unset: the standard AWS region configuration


def _hive_metastore(access: CatalogAccess) -> TableCatalog:
    from kafka_lake.tables.catalogs.hive_metastore import HiveCatalog

    return HiveCatalog(access.spark_session(), metastore_uri=access.hive_metastore_uri)


def _glue(access: CatalogAccess) -> TableCatalog:
    from kafka_lake.tables.catalogs.glue import GlueCatalog

    return GlueCatalog(region=access.glue_region)


TABLE_CATALOGS: dict[str, Callable[[CatalogAccess], TableCatalog]] = {"hive": _hive_metastore, "glue": _glue}
# The names users write are declared where the environment is read; each has its back end here.
assert set(TABLE_CATALOGS) == set(CATALOG_NAMES), (sorted(TABLE_CATALOGS), CATALOG_NAMES)


def open_table_catalog(kind: str, access: CatalogAccess) -> TableCatalog:
    """The table catalog `TABLE_CATALOG` names."""
    if kind not in TABLE_CATALOGS:
        raise ValueError(f"TABLE_CATALOG is {kind!r}; it must be one of {', '.join(TABLE_CATALOGS)}")
    return TABLE_CATALOGS[kind](access)
