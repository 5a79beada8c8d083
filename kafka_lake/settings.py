"""The platform's configuration, read from the environment (SPEC's table), with embedded defaults.

The only place that reads these variables, so every entry point agrees on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

KAFKA_CLIENT_PREFIX = "KAFKA_CLIENT_"


@dataclass(frozen=True)
class PlatformSettings:
    kafka_bootstrap_servers: str = "127.0.0.1:9092"
    kafka_client_properties: dict = field(default_factory=dict, repr=False)
    schema_registry_url: str | None = None
    schema_catalog_dir: str = "schema_catalog"
    lake_root: str = ".lake/warehouse"
    table_catalog: str = "hive"
    hive_metastore_uri: str | None = None  # unset: the embedded Derby metastore under .lake/
    spark_master: str = "local[*]"

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "PlatformSettings":
        env = os.environ if environ is None else environ
        defaults = cls()
        return cls(
            kafka_bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS") or defaults.kafka_bootstrap_servers,
            kafka_client_properties=kafka_client_properties(env),
            schema_registry_url=env.get("SCHEMA_REGISTRY_URL") or None,
            schema_catalog_dir=env.get("SCHEMA_CATALOG_DIR") or defaults.schema_catalog_dir,
            lake_root=env.get("LAKE_ROOT") or defaults.lake_root,
            table_catalog=env.get("TABLE_CATALOG") or defaults.table_catalog,
            hive_metastore_uri=env.get("HIVE_METASTORE_URI") or None,
            spark_master=env.get("SPARK_MASTER") or defaults.spark_master,
        )


def kafka_client_properties(env) -> dict[str, str]:
    """`KAFKA_CLIENT_SECURITY_PROTOCOL=SASL_SSL` → `{"security.protocol": "SASL_SSL"}`."""
    return {
        name[len(KAFKA_CLIENT_PREFIX):].lower().replace("_", "."): value
        for name, value in env.items()
        if name.startswith(KAFKA_CLIENT_PREFIX) and value
    }


def pii_key_from_env(environ: dict | None = None) -> bytes | None:
    env = os.environ if environ is None else environ
    value = env.get("PII_HMAC_KEY")
    return value.encode() if value else None
