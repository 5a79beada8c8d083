"""What every landing of a deployment shares: where it reads from and writes to, and its secrets, shipped to every
Spark task with its slice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyiceberg is imported by the landings of Iceberg tables alone
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig


@dataclass(frozen=True)
class LandingSettings:
    """Where a landing reads from and writes to, and its secrets; the same for every topic of a deployment.
    Shipped to every Spark task with its slice."""

    lake_root: str
    kafka_config: dict = field(repr=False)
    schema_registry_url: str | None = field(default=None, repr=False)  # may carry user:password@
    pii_key: bytes | None = field(default=None, repr=False)
    batch_size: int = 20_000  # records of a decode batch (fewer where their values reach the byte cap)
    max_open_files: int = 16  # Parquet files a task keeps open at once
    dead_letter_key: bytes | None = field(default=None, repr=False)  # unset: dead-letter values stay in clear
    # Where the Iceberg topics' tables are committed; None: the embedded catalog beside a local lake.
    iceberg_catalog: IcebergCatalogConfig | None = None
