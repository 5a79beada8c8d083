"""Reading the lake's Iceberg tables with DuckDB, as a user would: its iceberg extension, from PyPI, no download.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import duckdb

from kafka_lake.lake.storage import s3_options_from_env

# iceberg reads its manifests with avro; httpfs reaches S3.
EXTENSIONS = ("avro", "httpfs", "iceberg")


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the iceberg extension loaded, whose `iceberg_scan('<metadata.json>')` reads a table
    of the lake (local or S3), and `snapshot_from_id => …` reads an older snapshot. An `s3://` lake is reached with
    the lake's own S3 settings."""
    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for name in EXTENSIONS:
        connection.execute(f"LOAD '{extension_file(name)}'")
    options = s3_options_from_env()
    if options:
        connection.execute(
            "CREATE SECRET lake (TYPE s3, KEY_ID ?, SECRET ?, SESSION_TOKEN ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', "
            "USE_SSL ?)",
            [options.get("access_key", ""), options.get("secret_key", ""), options.get("session_token", ""),
             options.get("region", "us-east-1"), options.get("endpoint_override", "s3.amazonaws.com"),
             options.get("scheme", "https") == "https"],
        )
    return connection


def extension_file(name: str) -> Path:
    """The extensions ship as Python packages (`duckdb-extension-iceberg`, `-avro`, `-httpfs`) built for one DuckDB
    version; they are loaded from their files."""
    package = importlib.import_module(f"duckdb_extension_{name}")
    path = Path(str(package.__file__)).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise RuntimeError(
            f"the DuckDB {name} extension for DuckDB {duckdb.__version__} is not installed (looked for {path}): "
            f"install duckdb-extension-{name}=={duckdb.__version__}, as requirements.lock pins it"
        )
    return path
