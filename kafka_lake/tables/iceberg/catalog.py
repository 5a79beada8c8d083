"""Which Iceberg catalog holds a deployment's tables, and how its tables reach the lake's files.
Every catalog reads and writes files through the lake's own S3 client.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import PY_IO_IMPL
from pyiceberg.io.pyarrow import PyArrowFileIO

from kafka_lake.lake import layout
from kafka_lake.lake.aws_clients import glue_client
from kafka_lake.lake.storage import LakeStorage, s3_filesystem_from_env
from kafka_lake.settings import PlatformSettings, url_without_credentials

CATALOG_NAME = "kafka_lake"  # the default of ICEBERG_CATALOG_NAME


class IcebergCatalogError(ValueError):
    """The configuration names no Iceberg catalog the platform can use."""


@dataclass(frozen=True)
class IcebergCatalogConfig:
    """Where a deployment's Iceberg tables are registered: a REST catalog at `rest_uri`, Glue with `table_catalog ==
    "glue"`, else the SQL catalog at `sql_uri` (a SQLAlchemy URL) or, for a local lake, in the SQLite file
    `{LAKE_ROOT}/_iceberg/catalog.db`. Naming two is refused. `name` is the catalog's name, which an SQL catalog
    stores with every table: its readers must use it as their catalog's name."""

    lake_root: str
    table_catalog: str = "hive"
    rest_uri: str | None = field(default=None, repr=False)  # may carry credentials
    sql_uri: str | None = field(default=None, repr=False)  # may carry a password
    name: str = CATALOG_NAME

    @classmethod
    def from_settings(cls, settings: PlatformSettings) -> IcebergCatalogConfig:
        return cls(settings.lake_root, settings.table_catalog, settings.iceberg_rest_uri, settings.iceberg_catalog_uri,
                   settings.iceberg_catalog_name)

    @property
    def kind(self) -> str:
        chosen = [name for name, given in (("ICEBERG_REST_URI", self.rest_uri), ("TABLE_CATALOG=glue", self.table_catalog == "glue"),
                                           ("ICEBERG_CATALOG_URI", self.sql_uri)) if given]
        if len(chosen) > 1:
            raise IcebergCatalogError(f"{' and '.join(chosen)} each name an Iceberg catalog: set only one")
        if self.rest_uri:
            return "rest"
        return "glue" if self.table_catalog == "glue" else "sql"

    def describe(self) -> str:
        """As safe to show in the UI and in logs."""
        if self.rest_uri:
            return f"REST catalog {url_without_credentials(self.rest_uri)}"
        if self.kind == "glue":
            return "Glue Data Catalog"
        return f"SQL catalog {url_without_credentials(self.embedded_sql_uri())}"

    def embedded_sql_uri(self) -> str:
        if self.sql_uri:
            return self.sql_uri
        storage = LakeStorage(self.lake_root)
        if storage.is_s3:
            # SQLite needs a file system with locks; an object store has none, and a copy on one host's disk would
            # be a second source of truth that dies with the host.
            raise IcebergCatalogError(
                f"LAKE_ROOT {self.lake_root} is on S3, where the embedded SQLite catalog cannot live: set "
                f"TABLE_CATALOG=glue, ICEBERG_REST_URI, or ICEBERG_CATALOG_URI to a SQLAlchemy URL of a shared "
                f"database (postgresql+psycopg2://user:password@host/db)"
            )
        return f"sqlite:///{storage.full_path(layout.EMBEDDED_ICEBERG_CATALOG_PATH)}"


def open_catalog(config: IcebergCatalogConfig) -> Catalog:
    """The catalog itself; the embedded SQLite file and its folder are created on first use."""
    io = {PY_IO_IMPL: f"{LakeFileIO.__module__}.{LakeFileIO.__qualname__}"}
    if config.kind == "rest":
        return RestCatalog(config.name, uri=config.rest_uri, **io)
    if config.kind == "glue":
        # The Hive layout's Glue client: AWS_REGION, credentials, AWS_ENDPOINT_URL_GLUE, adaptive retries.
        return GlueCatalog(config.name, client=glue_client(), **io)
    uri = config.embedded_sql_uri()
    if uri.startswith("sqlite:///"):
        pafs.LocalFileSystem().create_dir(uri[len("sqlite:///"):].rsplit("/", 1)[0], recursive=True)
    return SqlCatalog(config.name, uri=uri, **io)


def table_location(storage: LakeStorage, database: str, table: str) -> str:
    """The table's root: the same folder as its Hive layout, so landed files are data files of the table as they
    lie, in their `schema_version=/date=/hour=` folders."""
    return lake_file_uri(storage, layout.table_prefix(database, table))


def lake_file_uri(storage: LakeStorage, relative: str) -> str:
    """A lake path as Iceberg metadata records it: `s3://bucket/key` or `file:///absolute/path`, never a bare path
    (which an engine on a cluster would read on its default file system)."""
    return storage.uri(relative) if storage.is_s3 else f"file://{storage.full_path(relative)}"


def lake_relative_path(storage: LakeStorage, uri: str) -> str | None:
    """The lake path of a file URI recorded in Iceberg metadata; None for a file outside the lake."""
    root = lake_file_uri(storage, "") + "/"
    return uri[len(root):] if uri.startswith(root) else None


class LakeFileIO(PyArrowFileIO):
    """pyiceberg's file access with the lake's S3 client: the same endpoint, credentials and retries with backoff
    as every other write of the platform (`AWS_ENDPOINT_URL`, `AWS_*`)."""

    def _initialize_s3_fs(self, netloc: str | None) -> pafs.FileSystem:
        return s3_filesystem_from_env()
