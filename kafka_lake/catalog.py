"""The topic catalog: `schema_catalog/<database>/<table>/topic.yaml` plus its Avro schemas.

Loads and validates every topic up front so a bad entry fails at load, naming the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import fastavro
import yaml
from fastavro.schema import to_parsing_canonical_form

from kafka_lake.avro_types import (
    evolution_problem,
    field_type_at,
    is_time_type,
    json_field_at,
    logical_type,
    schema_shape,
    type_name,
    unwrap_nullable,
)
from kafka_lake.connect_types import TIME_UNIT_OF, connect_name, with_connect_logical_types
from kafka_lake.layout import KAFKA_COLUMN_PREFIX, PARTITION_COLUMNS, is_lake_column
from kafka_lake.topic_yaml import (
    RECORD_NAME,
    ArchiveYaml,
    RouteYaml,
    SchemaVersionYaml,
    TimePartitioningYaml,
    TopicYaml,
    TopicYamlError,
    archived_topic_yaml,
    read_archive_yaml,
    read_topic_yaml,
    shown,
)

# Names that become paths and SQL identifiers: lowercase, no dots, no traversal. `\Z`, not `$`, which would
# let a trailing newline through.
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]{0,127}\Z")
# Records, arrays and maps inside each other: deeper schemas are refused at load. Generous for real events,
# and it keeps every recursive walk of a schema (ours, fastavro's, the catalogs' type strings) far from limits.
MAX_SCHEMA_DEPTH = 32
# A catalog file larger than this is no hand-written topic entry or schema; refused before parsing.
MAX_CATALOG_FILE_BYTES = 1024 * 1024
# The catalog's archive rule: new topics matching its pattern land as raw tables without a folder of their own.
ARCHIVE_FILE = "_archive.yaml"


class CatalogError(ValueError):
    """A topic catalog entry is wrong; the message names the file and the problem."""


@dataclass(frozen=True)
class SchemaVersion:
    version: int
    file: str
    registry_id: int | None  # None: a JSON version that framed values never name
    schema: dict[str, Any] = field(repr=False, compare=False)  # the Avro schema as JSON
    parsed: Any = field(repr=False, compare=False)  # fastavro's parsed form, for decoding
    recursions: tuple[str, ...] = ()  # where a record contains itself: those fields land as JSON text


RouteValue = str | int | bool


@dataclass(frozen=True)
class Route:
    """Which of its topic's records a table takes: those whose field (an Avro field path) holds one of `values`, or
    with `field` None, whose Avro record's full name is one of them."""

    field: tuple[str, ...] | None
    values: tuple[RouteValue, ...]
    written_as_equals: bool = False  # `equals: x`, not `in: [x]`: the same route, told as written

    @property
    def by_record_name(self) -> bool:
        return self.field is None

    @property
    def field_text(self) -> str:
        return RECORD_NAME if self.field is None else ".".join(self.field)

    def takes(self, value: object) -> bool:
        """Whether a record whose route value is `value` is this table's; a value matches only one of its own type."""
        return any(type(value) is type(wanted) and value == wanted for wanted in self.values)

    def __str__(self) -> str:
        if len(self.values) == 1:
            return f"{self.field_text} = {self.values[0]!r}"
        return f"{self.field_text} in [{', '.join(map(repr, self.values))}]"


# A raw table's one schema version (`format: raw`: no schema files), in `schema_version=0`.
RAW_SCHEMA_VERSION = 0


@dataclass(frozen=True)
class RoutedSibling:
    """Another routed table of the same topic: its name, its route, and the schema ids its versions answer to."""

    name: str
    route: Route
    registry_ids: frozenset[int]


@dataclass(frozen=True)
class TopicSpec:
    """One table of the catalog and the Kafka topic it lands: everything the platform needs to land it. Several
    tables may land one topic (`route`, or copies placed otherwise)."""

    database: str
    table: str
    topic: str
    owner: str
    time_source: Literal["event_time", "kafka_time"]
    time_field: tuple[str, ...] | None  # an Avro field path, like every field path of the catalog
    start_hour: datetime
    schema_versions: tuple[SchemaVersion, ...]
    # The keys below are those of `topic.yaml` (`topic_yaml.TopicYaml`, where their defaults are).
    retention_days: int | None
    pii_fields: tuple[tuple[str, ...], ...]
    subject_field: str | None
    freshness_minutes: int | None
    max_rows_per_task: int
    close_grace_minutes: int
    record_grace_minutes: int
    dead_letter_rate_threshold: float
    allowed_lateness_hours: int
    target_file_mb: int
    dead_letter_retention_days: int
    # Top-level Avro field → column name, for fields whose own name a column cannot take (`date`, `hour`, …).
    rename: tuple[tuple[str, str], ...]
    time_unit: str | None  # what a plain long event time counts (s, ms, us, ns); None: not set, ms
    source_file: str
    # "hive" or "iceberg": `table_format` of topic.yaml, else the deployment's `TABLE_FORMAT`, decided at load.
    table_format: str
    snapshot_retention_days: int  # Iceberg tables: how long snapshots are kept for time travel
    format: Literal["avro", "json", "raw"] = "avro"
    route: Route | None = None  # None: every record of the topic
    key_schema: SchemaVersion | None = None  # the key's schema (version 0): its fields land as `_kafka_key_<field>`
    keep_tombstones: bool = False
    archived: bool = False  # made by the archive rule, not by a folder of its own
    # The other routed tables of the topic (set by `load_catalog`): a record one of them takes is theirs, one that
    # none takes is unrouted, and lands in the topic's unrouted dead letters through the first routed table alone.
    routed_siblings: tuple[RoutedSibling, ...] = ()
    lands_unrouted: bool = True

    @property
    def placement(self) -> tuple:
        """How the table lands its records: two copies of a topic with equal placements would hold the same rows."""
        return self.format, self.time_source, self.time_field, self.time_unit

    @property
    def version_numbers(self) -> tuple[int, ...]:
        """The `schema_version=` values the table's partitions may have."""
        return (RAW_SCHEMA_VERSION,) if self.format == "raw" else tuple(v.version for v in self.schema_versions)

    @property
    def name(self) -> str:
        """`database/table`, the suffix of every asset key of this topic."""
        return f"{self.database}/{self.table}"

    @property
    def columns_by_field(self) -> dict[str, str]:
        """The renamed top-level fields: Avro field name → column name."""
        return dict(self.rename)

    def column_path(self, field_path: tuple[str, ...]) -> tuple[str, ...]:
        """Where an Avro field path (as the catalog's keys name fields) lands among the table's columns."""
        return (self.columns_by_field.get(field_path[0], field_path[0]), *field_path[1:])

    @property
    def subject_column(self) -> tuple[str, ...] | None:
        """The column path erasure requests match on, or None without a `subject_field`."""
        return self.column_path(tuple(self.subject_field.split("."))) if self.subject_field else None

    def version_for_registry_id(self, registry_id: int) -> SchemaVersion | None:
        for version in self.schema_versions:
            if version.registry_id == registry_id:
                return version
        return None

    def version(self, number: int) -> SchemaVersion:
        for version in self.schema_versions:
            if version.version == number:
                return version
        raise KeyError(f"{self.topic}: no schema version {number}")


@dataclass(frozen=True)
class BrokenEntry:
    """A catalog entry that failed to load: its `topic.yaml` (or `_archive.yaml`) and why. Its table is not landed."""

    path: str
    error: CatalogError
    # The table it would have been; by default its folder's, which an archived topic has not.
    table_database: str | None = None
    table_name: str | None = None
    topic: str | None = None  # the Kafka topic it names, where its file says one: rejected, not missing

    @property
    def database(self) -> str:
        return self.table_database or Path(self.path).parent.parent.name

    @property
    def table(self) -> str:
        return self.table_name or Path(self.path).parent.name


@dataclass(frozen=True)
class TopicCatalog:
    topics: tuple[TopicSpec, ...]
    directory: str = ""
    broken: tuple[BrokenEntry, ...] = ()  # only from `load_catalog(..., tolerant=True)`

    def by_name(self, database: str, table: str) -> TopicSpec:
        for topic in self.topics:
            if topic.database == database and topic.table == table:
                return topic
        raise KeyError(f"no topic {database}/{table} in the catalog at {self.directory}")

    archive: ArchiveRule | None = None  # from `_archive.yaml`, if the catalog has one

    def by_topic(self, topic_name: str) -> TopicSpec:
        """The one table of a Kafka topic; a topic landed into several tables has `tables_of`."""
        tables = self.tables_of(topic_name)
        if len(tables) != 1:
            names = ", ".join(t.name for t in tables)
            raise KeyError(f"Kafka topic {topic_name!r} is landed by {len(tables)} tables in {self.directory}"
                           + (f" ({names})" if names else ""))
        return tables[0]

    def tables_of(self, topic_name: str) -> tuple[TopicSpec, ...]:
        """Every table landing the Kafka topic, ordered by database and table."""
        return tuple(sorted((t for t in self.topics if t.topic == topic_name), key=lambda t: t.name))

    @property
    def kafka_topics(self) -> tuple[str, ...]:
        return tuple(sorted({t.topic for t in self.topics}))


def load_catalog(directory: str | Path, tolerant: bool = False, table_format: str = "hive",
                 archived_topics: Iterable[str] = ()) -> TopicCatalog:
    """Loads every `<database>/<table>/topic.yaml` under `directory`, validated, and the archive rule of
    `_archive.yaml` if there is one, which makes a raw table of each of `archived_topics` (the topics the archive has
    taken on, `archive.ArchivedTopics`) that no folder names. `table_format` is the deployment's (`TABLE_FORMAT`),
    for the topics whose entry names none.

    Strict (the default), the first broken entry raises its `CatalogError`. Tolerant (a code location serving
    many topics), each broken entry is set aside in `broken` with its error and every other topic loads; two
    entries that clash (their routes overlap, they land one topic twice alike, they give one registry id two
    schemas) are both set aside.
    """
    root = Path(directory)
    if not root.is_dir():
        raise CatalogError(f"{root}: the topic catalog directory does not exist (set SCHEMA_CATALOG_DIR)")
    paths = sorted(root.glob("*/*/topic.yaml"))
    archive_path = root / ARCHIVE_FILE
    if not tolerant:
        topics = [load_topic(path, table_format) for path in paths]
        archive = load_archive_rule(archive_path) if archive_path.exists() else None
        if archive is not None:
            archived, refused = archive.tables_for(archived_topics, topics)
            if refused:
                raise refused[0].error
            topics += archived
        _check_clashes(topics)
        return TopicCatalog(topics=_with_routed_siblings(topics), directory=str(root), archive=archive)
    topics, broken = [], []
    for path in paths:
        try:
            topics.append(load_topic(path, table_format))
        except CatalogError as error:
            broken.append(BrokenEntry(str(path), error, topic=declared_topic(path)))
        except Exception as error:  # a loader bug must cost only its own entry too
            broken.append(BrokenEntry(str(path), CatalogError(f"{path}: {type(error).__name__}: {error}"),
                                      topic=declared_topic(path)))
    archive = None
    if archive_path.exists():
        try:
            archive = load_archive_rule(archive_path)
        except CatalogError as error:
            broken.append(BrokenEntry(str(archive_path), error, "_archive", "rule"))
    if archive is not None:
        archived, refused = archive.tables_for(archived_topics, topics)
        topics += archived
        broken += refused
    broken += [BrokenEntry(spec.source_file, error, spec.database, spec.table, spec.topic)
               for spec, error in _check_clashes(topics, tolerant=True)]
    rejected = {(b.path, b.database, b.table) for b in broken}
    kept = tuple(spec for spec in topics if (spec.source_file, spec.database, spec.table) not in rejected)
    return TopicCatalog(topics=_with_routed_siblings(kept), directory=str(root),
                        broken=tuple(sorted(broken, key=lambda b: (b.path, b.table))), archive=archive)


def _with_routed_siblings(topics: Iterable[TopicSpec]) -> tuple[TopicSpec, ...]:
    """Each routed table told the other routed tables of its topic; the first by name lands the unrouted records."""
    topics = tuple(topics)
    routed: dict[str, list[TopicSpec]] = {}
    for spec in sorted(topics, key=lambda t: t.name):
        if spec.route is not None:
            routed.setdefault(spec.topic, []).append(spec)

    def told(spec: TopicSpec) -> TopicSpec:
        group = routed.get(spec.topic, [])
        if spec.route is None or len(group) < 2:
            return spec
        siblings = tuple(RoutedSibling(other.name, other_route, frozenset(
            v.registry_id for v in other.schema_versions if v.registry_id is not None))
            for other in group if other is not spec and (other_route := other.route) is not None)
        return replace(spec, routed_siblings=siblings, lands_unrouted=group[0] is spec)

    return tuple(told(spec) for spec in topics)


def _check_clashes(topics: list[TopicSpec], tolerant: bool = False) -> list[tuple[TopicSpec, CatalogError]]:
    """Raises on the first entry that clashes with an earlier one. Tolerant, returns both entries of every clash:
    which of the two is right only a person can say.

    Tables of one Kafka topic clash when a record could land twice in the same way: two routed tables whose routes
    could both take it (another field, a shared value), or two tables without a route in the same placement. One
    registry id clashes when it stands for two schemas, or twice in one table."""
    accepted: list[TopicSpec] = []
    ids: dict[int, tuple[TopicSpec, int, str]] = {}
    clashing = []
    for spec in topics:
        clash = next(((other, *problems) for other in accepted if other.topic == spec.topic
                      for problems in [_tables_clash(other, spec)] if problems), None)
        new_ids = dict(ids)
        for version in spec.schema_versions:
            if clash is not None or version.registry_id is None:
                continue
            form = to_parsing_canonical_form(version.parsed)
            if version.registry_id in new_ids:
                earlier, earlier_version, earlier_form = new_ids[version.registry_id]
                if earlier is spec or earlier_form != form:
                    where = spec.source_file if earlier is spec else earlier.source_file
                    other = "" if earlier is spec else " with another schema"
                    clash = (earlier, f"registry_id {version.registry_id} (version {version.version}) is already used by "
                                      f"{where} version {earlier_version}{other}",
                             f"registry_id {version.registry_id} (version {earlier_version}) is also used by "
                             f"{spec.source_file}{other}")
            new_ids[version.registry_id] = (spec, version.version, form)
        if clash is not None:
            earlier, problem, their_problem = clash
            error = CatalogError(f"{spec.source_file}: {problem}")
            if not tolerant:
                raise error
            clashing.append((spec, error))
            if earlier is not spec:
                clashing.append((earlier, CatalogError(f"{earlier.source_file}: {their_problem}")))
            continue
        accepted.append(spec)
        ids = new_ids
    return clashing


def _tables_clash(earlier: TopicSpec, spec: TopicSpec) -> tuple[str, str] | None:
    """(the problem as `spec`'s file says it, as `earlier`'s says it) of two tables of one topic, or None."""
    topic = f"Kafka topic {spec.topic!r}"
    if earlier.route is None and spec.route is None:
        if earlier.placement != spec.placement:
            return None  # a copy placed otherwise: valve's archive by event time and warehouse by Kafka time
        how = f"format {spec.format}, placed by {spec.time_source}" + (
            f" field {'.'.join(spec.time_field)}" if spec.time_field else "")
        advice = "give one a route, or another time_partitioning or format"
        return (f"{topic} is already landed by {earlier.source_file} in the same way ({how}); {advice}",
                f"{topic} is also landed by {spec.source_file} in the same way ({how}); {advice}")
    if earlier.route is None or spec.route is None:
        return None  # a routed table beside a copy of every record
    if earlier.format != spec.format:
        return (f"the routed tables of {topic} must read it in one format: this one is {spec.format}, "
                f"{earlier.source_file} is {earlier.format}",
                f"the routed tables of {topic} must read it in one format: this one is {earlier.format}, "
                f"{spec.source_file} is {spec.format}")
    if earlier.route.field != spec.route.field:
        return (f"the routes of {topic} must all name one field, or a record could match two tables: this one routes "
                f"by {spec.route.field_text}, {earlier.source_file} by {earlier.route.field_text}",
                f"the routes of {topic} must all name one field, or a record could match two tables: this one routes "
                f"by {earlier.route.field_text}, {spec.source_file} by {spec.route.field_text}")
    shared = [value for value in spec.route.values if earlier.route.takes(value)]
    if shared:
        listed = ", ".join(map(repr, shared))
        return (f"route {spec.route} of {topic} overlaps route {earlier.route} of {earlier.source_file} "
                f"({spec.route.field_text} {listed} would land in both tables)",
                f"route {earlier.route} of {topic} overlaps route {spec.route} of {spec.source_file} "
                f"({spec.route.field_text} {listed} would land in both tables)")
    return None


@dataclass(frozen=True)
class ArchiveRule:
    """`_archive.yaml`: topics matching `pattern` that no folder names are archived as raw tables of `database`, with
    the keys of the rule's file."""

    rule: ArchiveYaml
    source_file: str

    @property
    def database(self) -> str:
        return self.rule.database

    def matches(self, topic: str) -> bool:
        """Whether the rule archives the topic; Kafka's and tools' internal topics never."""
        return not is_internal_topic(topic) and re.fullmatch(self.rule.pattern, topic) is not None

    def tables_for(self, archived_topics: Iterable[str],
                   catalogued: list[TopicSpec]) -> tuple[list[TopicSpec], list[BrokenEntry]]:
        """The raw tables of the archived topics that still match and that no folder names. Their table names come
        from the topic's; a name another table has is refused (a broken entry), naming both."""
        named = {t.topic for t in catalogued}
        taken = {(t.database, t.table): t.source_file for t in catalogued}
        tables, refused = [], []
        for topic in sorted(set(archived_topics)):
            if topic in named or not self.matches(topic):
                continue
            table = archived_table_name(topic)
            if (self.database, table) in taken:
                refused.append(BrokenEntry(self.source_file, CatalogError(
                    f"{self.source_file}: archived topic {topic!r} would be table {self.database}/{table}, which "
                    f"{taken[self.database, table]} already is; give the topic a folder of its own"
                ), self.database, table, topic))
                continue
            entry = read_topic_yaml(archived_topic_yaml(self.rule, topic))
            spec = _topic_spec(entry, self.database, table, Path(self.source_file).parent, self.source_file, archived=True)
            taken[self.database, table] = f"the archive's table of topic {topic!r}"
            tables.append(spec)
        return tables, refused


def is_internal_topic(topic: str) -> bool:
    """Kafka's own topics and those of Kafka Connect and other tools, which the platform never lands by itself."""
    return topic.startswith(("_", "connect-", "__"))


def archived_table_name(topic: str) -> str:
    """An archived topic's table: its name in lowercase, every other character than a letter, digit or underscore an
    underscore (`Audit.Log-v2` → `audit_log_v2`), led by `t_` where it would not start with a letter."""
    name = re.sub(r"[^a-z0-9_]", "_", topic.lower())
    return (name if name[:1].isalpha() else f"t_{name}")[:128]


def load_archive_rule(path: str | Path) -> ArchiveRule:
    path = Path(path)
    where = str(path)
    try:
        rule = read_archive_yaml(_read_yaml_mapping(path, where))
    except TopicYamlError as error:
        raise CatalogError(f"{where}: {error}") from None
    return ArchiveRule(rule, where)


def load_topic(path: str | Path, table_format: str = "hive") -> TopicSpec:
    """One catalog entry, validated; `table_format`: the deployment's, unless the entry names its own."""
    path = Path(path)
    where = str(path)
    document = _read_yaml_mapping(path, where)
    database, table = path.parent.parent.name, path.parent.name
    for label, name in (("database folder", database), ("table folder", table)):
        if not _IDENTIFIER.match(name):
            raise CatalogError(
                f"{where}: {label} {name!r} must be lowercase letters, digits and underscores, starting with a letter"
            )
    try:
        entry = read_topic_yaml(document)
    except TopicYamlError as error:
        raise CatalogError(f"{where}: {error}") from None
    return _topic_spec(entry, database, table, path.parent, where, table_format=table_format)


def declared_topic(path: Path) -> str | None:
    """The Kafka topic a catalog entry that failed to load names, if its file still reads as YAML and says one."""
    try:
        topic = _read_yaml_mapping(path, str(path)).get("topic")
    except CatalogError:
        return None
    return topic if isinstance(topic, str) else None


def _read_yaml_mapping(path: Path, where: str) -> dict:
    text = _read_catalog_file(path, where)
    try:
        document = yaml.safe_load(text)
    # Beyond YAMLError: a date like 2026-13-45 raises ValueError while being built, deep nesting RecursionError.
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as error:
        raise CatalogError(f"{where}: not valid YAML: {str(error)[:500]}") from None
    if not isinstance(document, dict):
        raise CatalogError(f"{where}: expected a mapping of keys, got {type(document).__name__}")
    return document


def _topic_spec(entry: TopicYaml, database: str, table: str, folder: Path, where: str, archived: bool = False,
                table_format: str = "hive") -> TopicSpec:
    """The entry checked against its schema files (what the document alone cannot say), as a `TopicSpec`;
    `table_format`: the deployment's, unless the entry names its own."""
    versions = _load_versions(entry.schema_versions, folder, where)
    _check_recursion(entry.recursive_records, versions, where)
    _check_rename(entry.rename, versions, where)
    time_field = _check_time_partitioning(entry.time_partitioning, versions, where)
    time_unit = entry.time_partitioning.unit if entry.time_partitioning is not None else None
    if time_field is not None and time_unit is None:  # Debezium's NanoTimestamp says its unit itself
        time_unit = TIME_UNIT_OF.get(connect_name(unwrap_nullable(field_type_at(versions[-1].schema, time_field))))
    pii_fields = tuple(tuple(p.split(".")) for p in entry.pii_fields)
    for pii in pii_fields:
        _check_field_path(versions, pii, f"pii_fields entry {'.'.join(pii)!r}", where, json_allowed=True)
    if entry.subject_field is not None:
        _check_field_path(versions, tuple(entry.subject_field.split(".")), f"subject_field {entry.subject_field!r}", where)
    route = _check_route(entry.route, versions, where) if entry.route is not None else None
    key_schema = _load_key_schema(entry.key_schema, folder, where) if entry.key_schema is not None else None

    spec = TopicSpec(
        database=database,
        table=table,
        topic=entry.topic,
        owner=entry.owner,
        time_source=entry.time_source,
        time_field=time_field,
        start_hour=entry.start_hour,
        schema_versions=tuple(versions),
        retention_days=entry.retention_days,
        pii_fields=pii_fields,
        subject_field=entry.subject_field,
        freshness_minutes=entry.freshness_minutes,
        max_rows_per_task=entry.max_rows_per_task,
        close_grace_minutes=entry.close_grace_minutes,
        record_grace_minutes=entry.record_grace_minutes,
        dead_letter_rate_threshold=entry.dead_letter_rate_threshold,
        allowed_lateness_hours=entry.lateness_hours,
        target_file_mb=entry.target_file_mb,
        dead_letter_retention_days=entry.dead_letter_retention_days,
        rename=tuple(sorted(entry.rename.items())),
        time_unit=time_unit,
        source_file=where,
        table_format=_table_format_of(entry, table_format, where),
        snapshot_retention_days=entry.snapshot_retention_days,
        format=entry.format,
        route=route,
        key_schema=key_schema,
        keep_tombstones=entry.keep_tombstones,
        archived=archived,
    )
    if spec.table_format == "iceberg":
        _check_iceberg_table(spec)
    return spec


def _table_format_of(entry: TopicYaml, deployment: str, where: str) -> str:
    """The entry's own `table_format`, else the deployment's; a raw archive's table is always in the Hive layout (an
    Iceberg schema is folded from schema versions, and an archive has none)."""
    if entry.format == "raw":
        if entry.table_format == "iceberg":
            raise CatalogError(f"{where}: table_format iceberg: a raw archive (format: raw) lands in the Hive layout only")
        return "hive"
    return entry.table_format or deployment


def _check_iceberg_table(spec: TopicSpec) -> None:
    """An Iceberg topic's versions must fold into one Iceberg schema (`iceberg_schema`, imported only for them)."""
    from kafka_lake.iceberg_schema import IcebergSchemaError, check_topic

    try:
        check_topic(spec)
    except IcebergSchemaError as error:
        raise CatalogError(str(error)) from None


def _check_route(route: RouteYaml, versions: list[SchemaVersion], where: str) -> Route:
    """A route's field must hold the same kind of value (text, number, true/false) as its values in every version; a
    route by record name must take every version's record."""
    if route.field == RECORD_NAME:
        for version in versions:
            name = record_full_name(version.schema)
            if name not in route.values:
                raise CatalogError(
                    f"{where}: version {version.version} ({version.file}) is record {name}, which route "
                    f"{RECORD_NAME} does not take ({', '.join(map(str, route.values))}); a table takes the records it "
                    f"has schemas for"
                )
        return Route(None, route.values, route.in_ is None)
    path = tuple(route.field.split("."))
    _check_field_path(versions, path, f"route.field {route.field!r}", where)
    for version in versions:
        avro_type = field_type_at(version.schema, path)
        if avro_type is None:
            raise CatalogError(f"{where}: route.field {route.field!r} is not a field of version {version.version} "
                               f"({version.file}): every record must say where it goes")
        kind = _ROUTE_KINDS.get(type_name(unwrap_nullable(avro_type)))
        wrong = [v for v in route.values if kind is None or type(v) is not kind]
        if wrong:
            what = {str: "text", int: "whole numbers", bool: "true or false"}.get(kind, "no value a route can match") if kind else "no value a route can match"
            raise CatalogError(
                f"{where}: route.field {route.field!r} is {_describe_route_type(avro_type)} in version {version.version} "
                f"({version.file}), which holds {what}; route value {shown(wrong[0])} could never match"
            )
    return Route(path, route.values, route.in_ is None)


# The Avro types a route may match on, and the kind of YAML value that matches each.
_ROUTE_KINDS = {"string": str, "enum": str, "int": int, "long": int, "boolean": bool}


def _describe_route_type(avro_type: Any) -> str:
    inner = unwrap_nullable(avro_type)
    return f"a {type_name(inner)}" if not isinstance(inner, list) else "a union"


def record_full_name(schema: dict) -> str:
    """The full name of a top-level record schema (its namespace and name), as record-name strategies use it."""
    name, namespace = schema["name"], schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _load_key_schema(file: str, folder: Path, where: str) -> SchemaVersion:
    """The key's schema, as version 0 of its own: a record whose fields become the columns `_kafka_key_<field>`."""
    [key] = _load_versions((SchemaVersionYaml(version=1, file=file, registry_id=None),), folder, where, label="key_schema")
    if key.recursions:
        raise CatalogError(f"{where}: key_schema {file} has a record that contains itself ({key.recursions[0]}); a key "
                           f"must be a plain record")
    return SchemaVersion(0, key.file, None, key.schema, key.parsed)


def _check_field_path(versions: list[SchemaVersion], path: tuple[str, ...], label: str, where: str,
                      json_allowed: bool = False) -> None:
    """A catalog key's field path must name a field of some version, and not reach inside a field landed as JSON
    text (whose parts are no columns); with `json_allowed`, it may name such a field itself."""
    if not any(field_type_at(v.schema, path) is not None for v in versions):
        raise CatalogError(f"{where}: {label} is not a field of any schema version")
    for version in versions:
        step = json_field_at(version.schema, path)
        if step is None or (json_allowed and step == len(path) - 1):
            continue
        json_field = ".".join(path[:step + 1])
        advice = f"name {json_field!r} itself to pseudonymize its whole text" if json_allowed else "choose another field"
        raise CatalogError(
            f"{where}: {label} is in field {json_field!r} of version {version.version} ({version.file}), where a "
            f"record contains itself: that field lands as one column of JSON text; {advice}"
        )


def _check_recursion(choice: str, versions: list[SchemaVersion], where: str) -> None:
    if choice == "refuse":
        for version in versions:
            if version.recursions:
                raise CatalogError(
                    f"{where}: version {version.version} ({version.file}) has a record that contains itself "
                    f"({version.recursions[0]}), and recursive_records is refuse; remove that key to land the field "
                    f"as JSON text"
                )


def _check_rename(rename: dict[str, str], versions: list[SchemaVersion], where: str) -> None:
    """`rename` (top-level Avro field → column name) against every version's columns."""
    for field_name in rename:
        if not any(field_name in _top_level_names(v) for v in versions):
            raise CatalogError(f"{where}: rename.{field_name} names no top-level field of any schema version")
    for version in versions:
        schema_file = Path(where).parent / version.file
        taken: dict[str, str] = {}
        for field_name in _top_level_names(version):
            column = rename.get(field_name, field_name)
            label = f"field {field_name!r}" + (f" (renamed to {column!r} by rename.{field_name})" if column != field_name else "")
            if is_lake_column(column):
                fix = "choose another name in rename" if column != field_name else (
                    f"map it to another column with `rename: {{{field_name}: <column>}}`")
                raise CatalogError(
                    f"{where}: {label} of {schema_file} takes the name of one of the lake's own columns "
                    f"({KAFKA_COLUMN_PREFIX}…, {', '.join(PARTITION_COLUMNS)}); {fix} in topic.yaml"
                )
            if column.lower() in taken:
                raise CatalogError(
                    f"{where}: {label} and {taken[column.lower()]} of {schema_file} would both be column {column!r} "
                    f"(names are compared ignoring case); choose another name in rename"
                )
            taken[column.lower()] = label


def _top_level_names(version: SchemaVersion) -> list[str]:
    return [f["name"] for f in version.schema["fields"]]


def _load_versions(entries: tuple[SchemaVersionYaml, ...], folder: Path, where: str,
                   label: str = "") -> list[SchemaVersion]:
    versions: list[SchemaVersion] = []
    for entry in entries:
        try:
            schema_path = (folder / entry.file).resolve()
        except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop, an overlong name
            schema_path = None
        if schema_path is None or schema_path.parent != folder.resolve():
            what = label or f"schema file {shown(entry.file)} of version {entry.version}"
            raise CatalogError(f"{where}: {what} must sit beside topic.yaml")
        schema, parsed, recursions = _parse_schema_file(schema_path)
        versions.append(SchemaVersion(entry.version, entry.file, entry.registry_id, schema, parsed, recursions))
    for older, newer in zip(versions, versions[1:]):
        problem = evolution_problem(older.schema, newer.schema)
        if problem:
            raise CatalogError(
                f"{where}: version {newer.version} ({newer.file}) is not a compatible evolution of "
                f"version {older.version} ({older.file}): {problem}"
            )
    return versions


def _parse_schema_file(schema_path: Path) -> tuple[dict, Any, tuple[str, ...]]:
    try:
        exists = schema_path.is_file()
    except OSError:
        exists = False
    if not exists:
        raise CatalogError(f"{schema_path}: schema file does not exist")
    text = _read_catalog_file(schema_path, str(schema_path))
    try:
        schema = json.loads(text)
    except RecursionError:
        raise CatalogError(f"{schema_path}: nested too deeply to read (the limit is {MAX_SCHEMA_DEPTH} levels)") from None
    except ValueError as error:  # JSONDecodeError, and numbers too long to convert
        raise CatalogError(f"{schema_path}: not valid JSON: {str(error)[:300]}") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise CatalogError(f"{schema_path}: the top-level Avro schema must be a record")
    # Before fastavro and every walk of ours: the shape check is the one walk that cannot recurse without bound.
    shape = schema_shape(schema, MAX_SCHEMA_DEPTH)
    if shape.problem:
        raise CatalogError(f"{schema_path}: {shape.problem}")
    schema = with_connect_logical_types(schema)
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as error:  # fastavro raises several types for bad schemas
        raise CatalogError(f"{schema_path}: not a valid Avro schema: {str(error)[:300]}") from None
    return schema, parsed, shape.recursions


def _read_catalog_file(path: Path, where: str) -> str:
    """The text of a catalog file, read with a size cap; anything else is a CatalogError naming it."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_CATALOG_FILE_BYTES + 1)
    except (OSError, ValueError) as error:
        raise CatalogError(f"{where}: cannot be read: {getattr(error, 'strerror', None) or error}") from None
    if len(data) > MAX_CATALOG_FILE_BYTES:
        raise CatalogError(f"{where}: larger than {MAX_CATALOG_FILE_BYTES // 1024} KiB; not a catalog file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CatalogError(f"{where}: not UTF-8 text: {error}") from None


def _check_time_partitioning(block: TimePartitioningYaml | None, versions: list[SchemaVersion],
                             where: str) -> tuple[str, ...] | None:
    """The event-time field's path, checked to place records in every version; None for Kafka time."""
    if block is None or block.field is None:
        return None
    field_name, unit = block.field, block.unit
    path = tuple(field_name.split("."))
    for version in versions:
        avro_type = field_type_at(version.schema, path)
        if avro_type is None:
            raise CatalogError(
                f"{where}: time_partitioning.field {field_name!r} is not a field of version {version.version} ({version.file})"
            )
        if json_field_at(version.schema, path) is not None or not is_time_type(avro_type):
            raise CatalogError(
                f"{where}: time_partitioning.field {field_name!r} in version {version.version} must be a "
                f"timestamp-millis/micros long, a plain long of epoch time (see unit) or an RFC 3339 string"
            )
        plain_long = unwrap_nullable(avro_type)
        if unit is not None and (type_name(plain_long) != "long" or logical_type(plain_long) is not None):
            shown_type = logical_type(plain_long) or type_name(plain_long)
            raise CatalogError(
                f"{where}: time_partitioning.unit is for a plain long event time, but field {field_name!r} is a "
                f"{shown_type} in version {version.version} ({version.file}); remove unit"
            )
    return path
