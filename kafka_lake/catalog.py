"""The topic catalog: `schema_catalog/<database>/<table>/topic.yaml` plus its Avro schemas.

Loads and validates every topic up front so a bad entry fails at load, naming the file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import fastavro
import yaml

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
from kafka_lake.layout import KAFKA_COLUMN_PREFIX, PARTITION_COLUMNS, is_lake_column
from kafka_lake.topic_yaml import SchemaVersionYaml, TimePartitioningYaml, TopicYamlError, read_topic_yaml, shown

# Names that become paths and SQL identifiers: lowercase, no dots, no traversal. `\Z`, not `$`, which would
# let a trailing newline through.
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]{0,127}\Z")
# Records, arrays and maps inside each other: deeper schemas are refused at load. Generous for real events,
# and it keeps every recursive walk of a schema (ours, fastavro's, the catalogs' type strings) far from limits.
MAX_SCHEMA_DEPTH = 32
# A catalog file larger than this is no hand-written topic entry or schema; refused before parsing.
MAX_CATALOG_FILE_BYTES = 1024 * 1024


class CatalogError(ValueError):
    """A topic catalog entry is wrong; the message names the file and the problem."""


@dataclass(frozen=True)
class SchemaVersion:
    version: int
    file: str
    registry_id: int
    schema: dict[str, Any] = field(repr=False, compare=False)  # the Avro schema as JSON
    parsed: Any = field(repr=False, compare=False)  # fastavro's parsed form, for decoding
    recursions: tuple[str, ...] = ()  # where a record contains itself: those fields land as JSON text


@dataclass(frozen=True)
class TopicSpec:
    """One topic of the catalog: everything the platform needs to land it."""

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
    """A catalog entry that failed to load: its `topic.yaml` and why. Its topic is not landed."""

    path: str
    error: CatalogError

    @property
    def database(self) -> str:
        return Path(self.path).parent.parent.name

    @property
    def table(self) -> str:
        return Path(self.path).parent.name


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

    def by_topic(self, topic_name: str) -> TopicSpec:
        for topic in self.topics:
            if topic.topic == topic_name:
                return topic
        raise KeyError(f"no catalog entry for Kafka topic {topic_name!r} in {self.directory}")


def load_catalog(directory: str | Path, tolerant: bool = False, table_format: str = "hive") -> TopicCatalog:
    """Loads every `<database>/<table>/topic.yaml` under `directory`, validated; `table_format` is the deployment's
    (`TABLE_FORMAT`), for the topics whose entry names none.

    Strict (the default), the first broken entry raises its `CatalogError`. Tolerant (a code location serving
    many topics), each broken entry is set aside in `broken` with its error and every other topic loads; two
    entries that clash (same topic, same registry id) are both set aside.
    """
    root = Path(directory)
    if not root.is_dir():
        raise CatalogError(f"{root}: the topic catalog directory does not exist (set SCHEMA_CATALOG_DIR)")
    paths = sorted(root.glob("*/*/topic.yaml"))
    if not tolerant:
        topics = [load_topic(path, table_format) for path in paths]
        _check_unique(topics)
        return TopicCatalog(topics=tuple(topics), directory=str(root))
    topics, broken = [], []
    for path in paths:
        try:
            topics.append(load_topic(path, table_format))
        except CatalogError as error:
            broken.append(BrokenEntry(str(path), error))
        except Exception as error:  # a loader bug must cost only its own entry too
            broken.append(BrokenEntry(str(path), CatalogError(f"{path}: {type(error).__name__}: {error}")))
    broken += [BrokenEntry(spec.source_file, error) for spec, error in _check_unique(topics, tolerant=True)]
    kept = tuple(spec for spec in topics if spec.source_file not in {b.path for b in broken})
    return TopicCatalog(topics=kept, directory=str(root), broken=tuple(sorted(broken, key=lambda b: b.path)))


def _check_unique(topics: list[TopicSpec], tolerant: bool = False) -> list[tuple[TopicSpec, CatalogError]]:
    """Raises on the first entry that repeats a topic or registry id of an earlier one. Tolerant, returns
    both entries of every clash: which of the two is right only a person can say."""
    seen_topics: dict[str, TopicSpec] = {}
    seen_ids: dict[int, tuple[TopicSpec, int]] = {}
    clashing = []
    for spec in topics:
        clash = None
        if spec.topic in seen_topics:
            earlier = seen_topics[spec.topic]
            clash = (earlier, f"Kafka topic {spec.topic!r} is already declared in {earlier.source_file}",
                     f"Kafka topic {spec.topic!r} is also declared in {spec.source_file}")
        ids = dict(seen_ids)
        for version in spec.schema_versions:
            if clash is None and version.registry_id in ids:
                earlier, earlier_version = ids[version.registry_id]
                where = spec.source_file if earlier is spec else earlier.source_file
                clash = (earlier, f"registry_id {version.registry_id} (version {version.version}) is already used by "
                                  f"{where} version {earlier_version}",
                         f"registry_id {version.registry_id} (version {earlier_version}) is also used by {spec.source_file}")
            ids[version.registry_id] = (spec, version.version)
        if clash is not None:
            earlier, problem, their_problem = clash
            error = CatalogError(f"{spec.source_file}: {problem}")
            if not tolerant:
                raise error
            clashing.append((spec, error))
            if earlier is not spec:
                clashing.append((earlier, CatalogError(f"{earlier.source_file}: {their_problem}")))
            continue
        seen_topics[spec.topic] = spec
        seen_ids = ids
    return clashing


def load_topic(path: str | Path, table_format: str = "hive") -> TopicSpec:
    """One catalog entry, validated; `table_format`: the deployment's, unless the entry names its own."""
    path = Path(path)
    where = str(path)
    text = _read_catalog_file(path, where)
    try:
        document = yaml.safe_load(text)
    # Beyond YAMLError: a date like 2026-13-45 raises ValueError while being built, deep nesting RecursionError.
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as error:
        raise CatalogError(f"{where}: not valid YAML: {str(error)[:500]}") from None
    if not isinstance(document, dict):
        raise CatalogError(f"{where}: expected a mapping of keys, got {type(document).__name__}")
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

    # What the document alone cannot say: its names checked against the schema versions.
    versions = _load_versions(entry.schema_versions, path.parent, where)
    _check_recursion(entry.recursive_records, versions, where)
    _check_rename(entry.rename, versions, where)
    time_field = _check_time_partitioning(entry.time_partitioning, versions, where)
    pii_fields = tuple(tuple(p.split(".")) for p in entry.pii_fields)
    for pii in pii_fields:
        _check_field_path(versions, pii, f"pii_fields entry {'.'.join(pii)!r}", where, json_allowed=True)
    if entry.subject_field is not None:
        _check_field_path(versions, tuple(entry.subject_field.split(".")), f"subject_field {entry.subject_field!r}", where)

    spec = TopicSpec(
        database=database,
        table=table,
        topic=entry.topic,
        owner=entry.owner,
        time_source=entry.time_partitioning.source,
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
        time_unit=entry.time_partitioning.unit,
        source_file=where,
        table_format=entry.table_format or table_format,
        snapshot_retention_days=entry.snapshot_retention_days,
    )
    if spec.table_format == "iceberg":
        _check_iceberg_table(spec)
    return spec


def _check_iceberg_table(spec: TopicSpec) -> None:
    """An Iceberg topic's versions must fold into one Iceberg schema (`iceberg_schema`, imported only for them)."""
    from kafka_lake.iceberg_schema import IcebergSchemaError, check_topic

    try:
        check_topic(spec)
    except IcebergSchemaError as error:
        raise CatalogError(str(error)) from None


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


def _load_versions(entries: tuple[SchemaVersionYaml, ...], folder: Path, where: str) -> list[SchemaVersion]:
    versions: list[SchemaVersion] = []
    for entry in entries:
        try:
            schema_path = (folder / entry.file).resolve()
        except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop, an overlong name
            schema_path = None
        if schema_path is None or schema_path.parent != folder.resolve():
            raise CatalogError(
                f"{where}: schema file {shown(entry.file)} of version {entry.version} must sit beside topic.yaml"
            )
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


def _check_time_partitioning(block: TimePartitioningYaml, versions: list[SchemaVersion],
                             where: str) -> tuple[str, ...] | None:
    """The event-time field's path, checked to place records in every version; None for Kafka time."""
    if block.field is None:
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
