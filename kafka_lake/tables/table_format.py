"""The seam of table formats: what a way of keeping tables does for a topic (`TableFormat`) and the values it reports.
The implementations (the Hive layout, Apache Iceberg) are chosen once, in `tables.formats`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pyarrow as pa

from kafka_lake.lake.landing_checks import CheckOutcome
from kafka_lake.lake.manifests import HourManifest
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.table_spec import TableSpec

if TYPE_CHECKING:
    from kafka_lake.tables.catalogs.protocol import TableCatalog
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig
    from kafka_lake.upkeep.compaction import CompactionReport, CompactionTask

RunCompactions = Callable[[list["CompactionTask"], str], list["CompactionReport"]]  # (tasks, description) → reports


class Markdown(str):
    """Metadata text the UI renders as Markdown."""


class LakeUri(str):
    """Metadata naming a lake location."""


@dataclass(frozen=True)
class TableOutcome:
    """What a table-format action did: one line for the run's log, the materialization's metadata (plain values,
    `Markdown`, `LakeUri`, lists and mappings) and the result of the asset's check."""

    summary: str
    metadata: dict[str, Any] = field(default_factory=dict)
    check: CheckOutcome | None = None


@dataclass(frozen=True)
class HourCommitted:
    """What committing a landed hour did beyond writing its manifest."""

    replaced_files: tuple[str, ...] = ()  # files of the previous landing of the hour, now removed
    orphans_removed: tuple[str, ...] = ()  # files of attempts that never committed
    metadata: dict[str, Any] = field(default_factory=dict)  # shown with the hour's materialization


@dataclass(frozen=True)
class FormatDescriptions:
    """What a table format does for a topic, in the words of its layers' asset descriptions."""

    compaction: str  # how a placement hour is rewritten
    registration: str  # where the table is registered and what is checked
    retention: str = ""  # what else retention keeps, beside expiry and erasure


class TableFormat(Protocol):
    """One way of keeping tables; each method serves one topic's table. What is declared before a run (check names,
    descriptions, the load-time schema check) is asked of the class.

    Landing tasks read slices and write Parquet the same way for every format; a table format decides how a landed
    hour is committed, how an hour is compacted, how retention removes rows, and what registering the table checks."""

    name: ClassVar[str]  # as `table_format:` and `TABLE_FORMAT` name it
    # Asset check names: of `compacted/…`, of `catalog/…`, of `retention/…`, and of each landed hour (None: none).
    compaction_check: ClassVar[str]
    registration_check: ClassVar[str]
    retention_check: ClassVar[str]
    landing_check: ClassVar[str | None]
    # The kind every asset of a table of this format shows beside its layer's (None: none), and whether its
    # compaction and retention run as Spark tasks.
    kind: ClassVar[str | None]
    runs_on_spark: ClassVar[bool]
    # Whether a table without schema versions (a raw archive: the value's bytes) can be kept this way.
    holds_raw_values: ClassVar[bool]

    @staticmethod
    def schema_problem(topic: TableSpec) -> str | None:
        """Why the topic's schema versions cannot make a table of this format (naming the file), checked at load."""

    @staticmethod
    def described(topic: TableSpec) -> FormatDescriptions:
        """How the assets of the topic's layers describe what this format does."""

    @staticmethod
    def landed_rows(table: pa.Table) -> pa.Table:
        """A landing's decoded rows as this format's files hold them."""

    def file_attempt(self) -> str:
        """The token a landing puts in its data files' names ("": deterministic names, rewritten by a re-run)."""

    def prepare(self, topic: TableSpec) -> None:
        """Once per landing run, before its first commit."""

    def commit_hour(self, topic: TableSpec, manifest: HourManifest, previous: HourManifest | None,
                    attempt: str) -> HourCommitted:
        """After the hour's manifest is written: make it the table's, and remove what it replaced."""

    def landed_hour_check(self, topic: TableSpec, manifest: HourManifest) -> CheckOutcome | None:
        """`landing_check` of a landed hour."""

    def landed_hour_rows(self, topic: TableSpec, manifest: HourManifest) -> list[pa.Table]:
        """The rows a landed Kafka hour holds in the table now (compacted or erased since, as readers see them), one
        table per placement hour or one for all."""

    def compact_hour(self, topic: TableSpec, hour: datetime) -> TableOutcome:
        """Compacts placement hour `hour`, or raises `compaction.CompactionNotDue`."""

    def register(self, topic: TableSpec, hours: Collection[datetime]) -> TableOutcome:
        """The table created or evolved, and the placement hours' state in it checked."""

    def retain(self, topic: TableSpec, now: datetime, pii_key: bytes | None) -> TableOutcome:
        """Expiry, erasure requests, and whatever else the format keeps, each deletion audited."""


@dataclass(frozen=True)
class TableAccess:
    """What a table format may need to reach: the lake, the Iceberg catalog, the Hive layout's catalog and Spark.
    The last two are called only when an action of the Hive layout needs them."""

    storage: LakeStorage
    iceberg_catalog: IcebergCatalogConfig | None = None  # None: the embedded catalog beside the lake
    hive_catalog: Callable[[], TableCatalog] | None = None
    run_compactions: RunCompactions | None = None
    # `PII_HMAC_KEY`: compaction finds the pseudonyms of erased subjects with it where a subject field is pseudonymized.
    pii_key: bytes | None = field(default=None, repr=False)
