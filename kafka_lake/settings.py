"""The platform's configuration, read from the environment (SPEC's table), with embedded defaults.

The only place that reads these variables, so every entry point agrees on them.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kafka_lake.table_spec import OPEN_HOUR_MINUTES

KAFKA_CLIENT_PREFIX = "KAFKA_CLIENT_"
# How a topic's table is kept: Hive-style folders whose partitions a table catalog registers, or an Apache Iceberg
# table committed one landed hour at a time. `TABLE_FORMAT` chooses for the deployment, `table_format:` per topic.
TABLE_FORMATS = ("hive", "iceberg")
DEFAULT_TABLE_FORMAT = "hive"
# Where the Hive layout's tables are registered: Spark's Hive metastore (embedded Derby, or HIVE_METASTORE_URI) or AWS
# Glue. `TABLE_CATALOG` chooses; Glue also holds the Iceberg tables then.
TABLE_CATALOGS = ("hive", "glue")
# The most topics one run of the sensors carries (`TOPICS_PER_RUN`, `kafka_lake.run_plan`): enough that a run's fixed
# cost (a process, the code location's load, a Spark application) is a small part of a small topic's hour, few enough
# that a run lost whole (its process killed) is retried in minutes.
DEFAULT_TOPICS_PER_RUN = 250


RUN_TABLES_VARIABLE = "PLATFORM_RUN_TABLES"


@dataclass(frozen=True)
class PlatformSettings:
    kafka_bootstrap_servers: str = "127.0.0.1:9092"
    kafka_client_properties: dict = field(default_factory=dict, repr=False)
    schema_registry_url: str | None = field(default=None, repr=False)  # may carry user:password@
    schema_catalog_dir: str = "schema_catalog"
    # The slice of the catalog this code location serves: database names or shell-style patterns; empty: all of it.
    schema_catalog_databases: tuple[str, ...] = ()
    lake_root: str = ".lake/warehouse"
    table_catalog: str = "hive"
    hive_metastore_uri: str | None = None  # unset: the embedded Derby metastore under .lake/
    table_format: str = DEFAULT_TABLE_FORMAT  # the topics' table format unless their topic.yaml says otherwise
    iceberg_rest_uri: str | None = field(default=None, repr=False)  # may carry credentials
    iceberg_catalog_uri: str | None = field(default=None, repr=False)  # a SQLAlchemy URL, may carry a password
    # The name the Iceberg tables are registered under: an SQL catalog stores it with each table (`catalog_name`), and
    # a reader of that catalog (Spark's JdbcCatalog, Trino's jdbc catalog) finds them only under the same name.
    iceberg_catalog_name: str = "kafka_lake"
    spark_master: str = "local[*]"
    # The first port the Spark UI of a run's application tries (Spark's default 4040; it takes the next free one when
    # that is taken, so several runs at once take 4040, 4041, …).
    spark_ui_port: int | None = None
    # Sensors and schedules start running when the code location loads; "off" (a staging deployment,
    # a test) loads them stopped, to be started from the UI.
    automation: bool = True
    topics_per_run: int = DEFAULT_TOPICS_PER_RUN
    # `OPEN_HOUR_EVERY_MINUTES`: the open hour of every topic lands in increments this often, unless its `open_hour`
    # says otherwise; None: off.
    open_hour_minutes: int | None = None
    # `PLATFORM_RUN_TABLES`, set for a run's own process by the run launcher (deploy/run_launcher.py): the tables
    # (`database/table`) the run carries, of which the process builds only the Kafka topics' tables; empty: every one.
    run_tables: tuple[str, ...] = ()

    @property
    def embedded_metastore(self) -> bool:
        """Spark's embedded Derby metastore, which one process at a time may open."""
        return self.table_catalog == "hive" and not self.hive_metastore_uri

    @classmethod
    def from_env(cls, environ: dict | None = None) -> PlatformSettings:
        env = os.environ if environ is None else environ
        defaults = cls()
        return cls(
            kafka_bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS") or defaults.kafka_bootstrap_servers,
            kafka_client_properties=kafka_client_properties(env),
            schema_registry_url=env.get("SCHEMA_REGISTRY_URL") or None,
            schema_catalog_dir=env.get("SCHEMA_CATALOG_DIR") or defaults.schema_catalog_dir,
            schema_catalog_databases=tuple(name.strip() for name in (env.get("SCHEMA_CATALOG_DATABASES") or "").split(",")
                                           if name.strip()),
            lake_root=env.get("LAKE_ROOT") or defaults.lake_root,
            table_catalog=_one_of(env.get("TABLE_CATALOG"), "TABLE_CATALOG", TABLE_CATALOGS, defaults.table_catalog),
            hive_metastore_uri=env.get("HIVE_METASTORE_URI") or None,
            table_format=_one_of(env.get("TABLE_FORMAT"), "TABLE_FORMAT", TABLE_FORMATS, defaults.table_format),
            iceberg_rest_uri=env.get("ICEBERG_REST_URI") or None,
            iceberg_catalog_uri=env.get("ICEBERG_CATALOG_URI") or None,
            iceberg_catalog_name=_catalog_name(env.get("ICEBERG_CATALOG_NAME"), defaults.iceberg_catalog_name),
            spark_master=env.get("SPARK_MASTER") or defaults.spark_master,
            spark_ui_port=_port(env.get("SPARK_UI_PORT"), "SPARK_UI_PORT"),
            automation=_on_or_off(env.get("PLATFORM_AUTOMATION"), "PLATFORM_AUTOMATION", defaults.automation),
            topics_per_run=_positive(env.get("TOPICS_PER_RUN"), "TOPICS_PER_RUN", defaults.topics_per_run),
            open_hour_minutes=_open_hour_minutes(env.get("OPEN_HOUR_EVERY_MINUTES")),
            run_tables=tuple(name.strip() for name in (env.get(RUN_TABLES_VARIABLE) or "").split(",") if name.strip()),
        )


def kafka_client_properties(env) -> dict[str, str]:
    """`KAFKA_CLIENT_SECURITY_PROTOCOL=SASL_SSL` → `{"security.protocol": "SASL_SSL"}`; refused where a property
    would make the landing read records that are not committed."""
    properties = {
        name[len(KAFKA_CLIENT_PREFIX):].lower().replace("_", "."): value
        for name, value in env.items()
        if name.startswith(KAFKA_CLIENT_PREFIX) and value
    }
    check_client_properties(properties)
    return properties


# The landing reads committed records only: aborted transactions never land, and an open one ends the readable log.
ISOLATION_LEVEL = "read_committed"


class KafkaClientConfigError(ValueError):
    """A `KAFKA_CLIENT_*` property the platform cannot honour without landing the wrong records."""


def check_client_properties(client_properties: dict[str, str]) -> None:
    level = client_properties.get("isolation.level")
    if level is not None and level != ISOLATION_LEVEL:
        raise KafkaClientConfigError(
            f"KAFKA_CLIENT_ISOLATION_LEVEL is {level!r}: the platform reads {ISOLATION_LEVEL} only, or aborted and "
            f"uncommitted transactional records would land as rows; unset the variable"
        )


def is_set(name: str, environ: dict | None = None) -> bool:
    """Whether the environment sets the variable to something (an empty value counts as unset)."""
    return bool((os.environ if environ is None else environ).get(name))


def _one_of(value: str | None, name: str, allowed: tuple[str, ...], default: str) -> str:
    if value is None or value == "":
        return default
    if value not in allowed:
        raise ValueError(f"{name} is {value!r}; it must be one of {', '.join(allowed)}")
    return value


def _catalog_name(value: str | None, default: str) -> str:
    """`ICEBERG_CATALOG_NAME`: a name every engine takes as a catalog identifier (Spark's `spark.sql.catalog.<name>`)."""
    if not value:
        return default
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(f"ICEBERG_CATALOG_NAME is {value!r}; it must be letters, digits and underscores, not starting "
                         f"with a digit (Spark and Trino take it as a catalog name)")
    return value


def _positive(value: str | None, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"{name} is {value!r}; it must be a whole number of at least 1")
    return int(value)


def _open_hour_minutes(value: str | None) -> int | None:
    if value is None or value.strip() in ("", "off"):
        return None
    low, high = OPEN_HOUR_MINUTES
    if not value.strip().isdigit() or not low <= int(value) <= high:
        raise ValueError(f"OPEN_HOUR_EVERY_MINUTES is {value!r}; it must be a whole number of minutes from {low} to "
                         f"{high}, or off")
    return int(value)


def _on_or_off(value: str | None, name: str, default: bool) -> bool:
    if value is None or value == "":
        return default
    if value.lower() in ("on", "off"):
        return value.lower() == "on"
    raise ValueError(f"{name} is {value!r}; it must be 'on' or 'off'")


def _port(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ValueError(f"{name} is {value!r}; it must be a port number")
    return int(value)


DEAD_LETTER_KEY_BYTES = 32


def dead_letter_key_from_env(environ: dict | None = None) -> bytes | None:
    """`DEAD_LETTER_KEY`: the base64 text of 32 random bytes (`openssl rand -base64 32`) that encrypts the value
    of every dead letter; unset, dead letters keep their values in clear. A wrong value fails without echoing it."""
    env = os.environ if environ is None else environ
    text = env.get("DEAD_LETTER_KEY")
    if not text:
        return None
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("DEAD_LETTER_KEY is not base64 text; set it to the output of `openssl rand -base64 32`") from None
    if len(key) != DEAD_LETTER_KEY_BYTES:
        raise ValueError(
            f"DEAD_LETTER_KEY decodes to {len(key)} bytes, not {DEAD_LETTER_KEY_BYTES}; "
            f"set it to the output of `openssl rand -base64 32`"
        )
    return key


def url_without_credentials(url: str) -> str:
    """The URL as safe to show: `https://user:secret@host` loses its user info."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url  # nothing to hide; rebuilt, `sqlite:////abs/path` would lose the slashes that make it a path
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
