"""The topic catalog: `schema_catalog/<database>/<table>/topic.yaml` plus its Avro schemas.

Loads and validates every topic up front so a bad entry fails at load, naming the file.
"""

from __future__ import annotations

import json
import re
import reprlib
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Literal

import fastavro
import yaml

from kafka_lake.avro_types import (
    AVRO_NAME,
    evolution_problem,
    field_type_at,
    is_time_type,
    json_field_at,
    logical_type,
    schema_shape,
    type_name,
    unwrap_nullable,
)
from kafka_lake.event_time import TIME_UNITS
from kafka_lake.layout import KAFKA_COLUMN_PREFIX, PARTITION_COLUMNS, is_lake_column

# Names that become paths and SQL identifiers: lowercase, no dots, no traversal. `\Z`, not `$`, which would
# let a trailing newline through.
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]{0,127}\Z")
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}\Z")
# Records, arrays and maps inside each other: deeper schemas are refused at load. Generous for real events,
# and it keeps every recursive walk of a schema (ours, fastavro's, the catalogs' type strings) far from limits.
MAX_SCHEMA_DEPTH = 32
# A catalog file larger than this is no hand-written topic entry or schema; refused before parsing.
MAX_CATALOG_FILE_BYTES = 1024 * 1024
# Shown values in errors are cut short: a YAML alias bomb must not expand into a message.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict = 3, 80, 80, 6, 6

DEFAULT_MAX_ROWS_PER_TASK = 1_000_000
DEFAULT_CLOSE_GRACE_MINUTES = 10
# Producers stamp records with their own clocks: one stamped a little after H+1 does not yet mean
# every producer has moved past H.
DEFAULT_RECORD_GRACE_MINUTES = 2
DEFAULT_TARGET_FILE_MB = 256
# Dead letters hold raw values, PII in clear included: they expire after this many days unless the catalog says
# otherwise, and never later than the table's own retention_days.
DEFAULT_DEAD_LETTER_RETENTION_DAYS = 14
# Upper bounds of durations, so an absurd value fails here rather than overflowing a date in a run.
_CENTURY = {"days": 36_525, "hours": 876_600, "minutes": 52_596_000}
# How many raw hours after H may still add rows to H: late events for event time, out-of-order
# producer timestamps for Kafka time.
DEFAULT_ALLOWED_LATENESS_HOURS = {"event_time": 3, "kafka_time": 1}

# `recursive_records`: a record that contains itself lands the field where it recurs as JSON text, or is refused.
RECURSIVE_RECORDS = ("json", "refuse")

_KNOWN_KEYS = {
    "topic", "owner", "time_partitioning", "start_hour", "schema_versions", "retention_days",
    "pii_fields", "subject_field", "freshness_minutes", "max_rows_per_task",
    "close_grace_minutes", "record_grace_minutes", "dead_letter_rate_threshold", "allowed_lateness_hours", "target_file_mb",
    "dead_letter_retention_days", "rename", "recursive_records",
}


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
    retention_days: int | None = None
    pii_fields: tuple[tuple[str, ...], ...] = ()
    subject_field: str | None = None
    freshness_minutes: int | None = None
    max_rows_per_task: int = DEFAULT_MAX_ROWS_PER_TASK
    close_grace_minutes: int = DEFAULT_CLOSE_GRACE_MINUTES
    record_grace_minutes: int = DEFAULT_RECORD_GRACE_MINUTES
    dead_letter_rate_threshold: float = 0.05
    allowed_lateness_hours: int = 3
    target_file_mb: int = DEFAULT_TARGET_FILE_MB
    dead_letter_retention_days: int = DEFAULT_DEAD_LETTER_RETENTION_DAYS
    # Top-level Avro field → column name, for fields whose own name a column cannot take (`date`, `hour`, …).
    rename: tuple[tuple[str, str], ...] = ()
    time_unit: str | None = None  # what a plain long event time counts (s, ms, us, ns); None: not set, ms
    source_file: str = ""

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
class TopicCatalog:
    topics: tuple[TopicSpec, ...]
    directory: str = ""

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


def load_catalog(directory: str | Path) -> TopicCatalog:
    """Loads every `<database>/<table>/topic.yaml` under `directory`, validated."""
    root = Path(directory)
    if not root.is_dir():
        raise CatalogError(f"{root}: the topic catalog directory does not exist (set SCHEMA_CATALOG_DIR)")
    topics = [load_topic(path) for path in sorted(root.glob("*/*/topic.yaml"))]
    _check_unique(topics)
    return TopicCatalog(topics=tuple(topics), directory=str(root))


def _check_unique(topics: list[TopicSpec]) -> None:
    seen_topics: dict[str, str] = {}
    seen_ids: dict[int, str] = {}
    for spec in topics:
        if spec.topic in seen_topics:
            raise CatalogError(
                f"{spec.source_file}: Kafka topic {spec.topic!r} is already declared in {seen_topics[spec.topic]}"
            )
        seen_topics[spec.topic] = spec.source_file
        for version in spec.schema_versions:
            if version.registry_id in seen_ids:
                raise CatalogError(
                    f"{spec.source_file}: registry_id {version.registry_id} (version {version.version}) "
                    f"is already used by {seen_ids[version.registry_id]}"
                )
            seen_ids[version.registry_id] = f"{spec.source_file} version {version.version}"


def load_topic(path: str | Path) -> TopicSpec:
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
    unknown = sorted(set(map(str, document)) - _KNOWN_KEYS)
    if unknown:
        shown = ", ".join(_shown(key) if not key.isidentifier() else key for key in unknown[:10])
        raise CatalogError(f"{where}: unknown key(s) {shown}; allowed: {', '.join(sorted(_KNOWN_KEYS))}")

    database, table = path.parent.parent.name, path.parent.name
    for label, name in (("database folder", database), ("table folder", table)):
        if not _IDENTIFIER.match(name):
            raise CatalogError(
                f"{where}: {label} {name!r} must be lowercase letters, digits and underscores, starting with a letter"
            )

    topic = _required(document, "topic", str, where)
    if not _TOPIC_NAME.match(topic):
        raise CatalogError(f"{where}: topic {_shown(topic)} is not a valid Kafka topic name")
    if topic.startswith("."):
        # Data files are named after the topic, and a leading dot makes them hidden from every listing.
        raise CatalogError(f"{where}: topic {topic!r} starts with a dot; the platform cannot land it")
    owner = _required(document, "owner", str, where)

    versions = _load_versions(document, path.parent, where)
    _check_recursion(document, versions, where)
    rename = _load_rename(document, versions, where)
    time_source, time_field, time_unit = _load_time_partitioning(document, versions, where)
    start_hour = _parse_start_hour(document.get("start_hour"), where)

    pii_fields = tuple(tuple(p.split(".")) for p in _optional_list_of_str(document, "pii_fields", where))
    for pii in pii_fields:
        _check_field_path(versions, pii, f"pii_fields entry {'.'.join(pii)!r}", where, json_allowed=True)
    subject_field = _optional(document, "subject_field", str, where)
    if subject_field is not None:
        _check_field_path(versions, tuple(subject_field.split(".")), f"subject_field {subject_field!r}", where)

    return TopicSpec(
        database=database,
        table=table,
        topic=topic,
        owner=owner,
        time_source=time_source,
        time_field=time_field,
        start_hour=start_hour,
        schema_versions=tuple(versions),
        retention_days=_optional_positive_int(document, "retention_days", where, _CENTURY["days"]),
        pii_fields=pii_fields,
        subject_field=subject_field,
        freshness_minutes=_optional_positive_int(document, "freshness_minutes", where, _CENTURY["minutes"]),
        max_rows_per_task=_optional_positive_int(document, "max_rows_per_task", where) or DEFAULT_MAX_ROWS_PER_TASK,
        close_grace_minutes=_optional_int(
            document, "close_grace_minutes", where, DEFAULT_CLOSE_GRACE_MINUTES, _CENTURY["minutes"]
        ),
        record_grace_minutes=_optional_int(
            document, "record_grace_minutes", where, DEFAULT_RECORD_GRACE_MINUTES, _CENTURY["minutes"]
        ),
        dead_letter_rate_threshold=_optional_rate(document, "dead_letter_rate_threshold", where, 0.05),
        allowed_lateness_hours=_optional_int(
            document, "allowed_lateness_hours", where, DEFAULT_ALLOWED_LATENESS_HOURS[time_source], _CENTURY["hours"]
        ),
        target_file_mb=_optional_positive_int(document, "target_file_mb", where) or DEFAULT_TARGET_FILE_MB,
        dead_letter_retention_days=_optional_positive_int(
            document, "dead_letter_retention_days", where, _CENTURY["days"]
        ) or DEFAULT_DEAD_LETTER_RETENTION_DAYS,
        rename=rename,
        time_unit=time_unit,
        source_file=where,
    )


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


def _check_recursion(document: dict, versions: list[SchemaVersion], where: str) -> None:
    choice = document.get("recursive_records")
    choice = "json" if choice is None else choice
    if choice not in RECURSIVE_RECORDS:
        raise CatalogError(f"{where}: recursive_records must be json or refuse, got {_shown(choice)}")
    if choice == "refuse":
        for version in versions:
            if version.recursions:
                raise CatalogError(
                    f"{where}: version {version.version} ({version.file}) has a record that contains itself "
                    f"({version.recursions[0]}), and recursive_records is refuse; remove that key to land the field "
                    f"as JSON text"
                )


def _load_rename(document: dict, versions: list[SchemaVersion], where: str) -> tuple[tuple[str, str], ...]:
    """`rename` (top-level Avro field → column name), checked against every version's columns."""
    rename = document.get("rename")
    if rename is None:
        rename = {}
    if not isinstance(rename, dict):
        raise CatalogError(f"{where}: 'rename' must map Avro field names to column names, got {_shown(rename)}")
    for field_name, column in rename.items():
        key = f"rename.{_shown(field_name) if not isinstance(field_name, str) else field_name}"
        if not isinstance(field_name, str) or not AVRO_NAME.match(field_name):
            extra = "; it renames top-level fields only (nested fields never clash with the lake's columns)" if (
                isinstance(field_name, str) and "." in field_name) else ""
            raise CatalogError(f"{where}: {_shown(key)} does not name an Avro field{extra}")
        if not any(field_name in _top_level_names(v) for v in versions):
            raise CatalogError(f"{where}: {key} names no top-level field of any schema version")
        if not isinstance(column, str) or not AVRO_NAME.match(column):
            raise CatalogError(
                f"{where}: {key} is {_shown(column)}; a column name is letters, digits and underscores, not "
                f"starting with a digit"
            )
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
    return tuple(sorted(rename.items()))


def _top_level_names(version: SchemaVersion) -> list[str]:
    return [f["name"] for f in version.schema["fields"]]


def _load_versions(document: dict, folder: Path, where: str) -> list[SchemaVersion]:
    entries = _required(document, "schema_versions", list, where)
    if not entries:
        raise CatalogError(f"{where}: schema_versions is empty; declare at least version 1")
    versions: list[SchemaVersion] = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: schema_versions[{position}] must be a mapping with version, file, registry_id")
        number = _required(entry, "version", int, f"{where}: schema_versions[{position}]")
        file_name = _required(entry, "file", str, f"{where}: schema_versions[{position}]")
        registry_id = _required(entry, "registry_id", int, f"{where}: schema_versions[{position}]")
        expected = versions[-1].version + 1 if versions else 1
        if number != expected:
            raise CatalogError(f"{where}: schema_versions must be numbered 1, 2, … in order; got {number}, expected {expected}")
        if not 0 <= registry_id < 2**31:
            raise CatalogError(f"{where}: registry_id {registry_id} of version {number} is outside 0..2^31-1")
        try:
            schema_path = (folder / file_name).resolve()
        except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop, an overlong name
            schema_path = None
        if schema_path is None or schema_path.parent != folder.resolve():
            raise CatalogError(
                f"{where}: schema file {_shown(file_name)} of version {number} must sit beside topic.yaml"
            )
        schema, parsed, recursions = _parse_schema_file(schema_path)
        versions.append(SchemaVersion(number, file_name, registry_id, schema, parsed, recursions))
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


def _load_time_partitioning(document: dict, versions: list[SchemaVersion], where: str):
    """(source, Avro field path or None, unit of a plain long event time or None)."""
    block = _required(document, "time_partitioning", dict, where)
    source = block.get("source")
    if source not in ("event_time", "kafka_time"):
        raise CatalogError(f"{where}: time_partitioning.source must be event_time or kafka_time, got {_shown(source)}")
    unit = block.get("unit")
    if source == "kafka_time":
        for key in ("field", "unit"):
            if block.get(key) is not None:
                raise CatalogError(f"{where}: time_partitioning.{key} is only for source event_time")
        return source, None, None
    field_name = block.get("field")
    if not isinstance(field_name, str) or not field_name:
        raise CatalogError(f"{where}: time_partitioning.field is required for source event_time")
    if unit is not None and (not isinstance(unit, str) or unit not in TIME_UNITS):
        raise CatalogError(f"{where}: time_partitioning.unit must be one of {', '.join(TIME_UNITS)}, got {_shown(unit)}")
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
            shown = logical_type(plain_long) or type_name(plain_long)
            raise CatalogError(
                f"{where}: time_partitioning.unit is for a plain long event time, but field {field_name!r} is a "
                f"{shown} in version {version.version} ({version.file}); remove unit"
            )
    return source, path, unit


def _parse_start_hour(value: Any, where: str) -> datetime:
    if value is None:
        raise CatalogError(f"{where}: missing required key 'start_hour' (e.g. \"2026-11-01T00:00Z\")")
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            if not isinstance(value, (str, date)):  # a list's text could be an alias bomb's expansion
                raise ValueError(value)
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise CatalogError(f"{where}: start_hour {_shown(value)} is not an ISO 8601 time like \"2026-11-01T00:00Z\"") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        moment = moment.astimezone(timezone.utc)
    except OverflowError:  # an offset that pushes year 1 or 9999 out of range
        raise CatalogError(f"{where}: start_hour {_shown(value)} is outside the years 1..9999 in UTC") from None
    if moment.minute or moment.second or moment.microsecond:
        raise CatalogError(f"{where}: start_hour {_shown(value)} must be on the hour")
    return moment


def _required(document: dict, key: str, kind: type, where: str):
    if key not in document or document[key] is None:
        raise CatalogError(f"{where}: missing required key {key!r}")
    value = document[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CatalogError(f"{where}: {key!r} must be a {kind.__name__}, got {_shown(value)}")
    return value


def _optional(document: dict, key: str, kind: type, where: str):
    if document.get(key) is None:
        return None
    return _required(document, key, kind, where)


def _optional_int(document: dict, key: str, where: str, default: int, at_most: int | None = None) -> int:
    value = _optional(document, key, int, where)
    if value is None:
        return default
    if value < 0:
        raise CatalogError(f"{where}: {key!r} must not be negative, got {value}")
    _check_at_most(value, at_most, key, where)
    return value


def _optional_positive_int(document: dict, key: str, where: str, at_most: int | None = None) -> int | None:
    value = _optional(document, key, int, where)
    if value is not None and value <= 0:
        raise CatalogError(f"{where}: {key!r} must be a positive whole number, got {_shown(value)}")
    _check_at_most(value, at_most, key, where)
    return value


def _check_at_most(value: int | None, at_most: int | None, key: str, where: str) -> None:
    if value is not None and at_most is not None and value > at_most:
        raise CatalogError(f"{where}: {key!r} is {_shown(value)}, more than a century ({at_most})")


def _optional_rate(document: dict, key: str, where: str, default: float) -> float:
    value = document.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise CatalogError(f"{where}: {key!r} must be a fraction between 0 and 1, got {_shown(value)}")
    return float(value)


def _optional_list_of_str(document: dict, key: str, where: str) -> list[str]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise CatalogError(f"{where}: {key!r} must be a list of field names, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    return _SHOWN.repr(value)
