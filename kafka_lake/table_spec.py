"""One table of the topic catalog as every wing sees it: the keys of its `topic.yaml` as validated (`TableKeys`,
declared once), and what loading resolved from its folder and schema files (`TableSpec`, built by `topics.loader`).
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

# A raw table's one schema version (`format: raw`: no schema files), in `schema_version=0`.
RAW_SCHEMA_VERSION = 0
# `route.field` naming no field but the Avro record's full name (Confluent's record-name subject strategies).
RECORD_NAME = "record_name"

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}\Z")
# Database and table names become lake paths and SQL identifiers: lowercase, no dots, no traversal. `\Z`, not `$`,
# which would let a trailing newline through.
_TABLE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,127}\Z")


def is_table_name(name: str) -> bool:
    """Whether `name` may name a database or a table: lowercase letters, digits and underscores, starting with a
    letter, at most 128 characters."""
    return _TABLE_NAME.match(name) is not None
# Upper bounds of durations, so an absurd value fails here rather than overflowing a date in a run.
CENTURY_DAYS, CENTURY_HOURS, CENTURY_MINUTES = 36_525, 876_600, 52_596_000
DAYS = f"a positive whole number of days, at most a century ({CENTURY_DAYS})"
_MINUTES = f"a whole number of minutes, at most a century ({CENTURY_MINUTES})"
_POSITIVE_MINUTES = f"a positive whole number of minutes, at most a century ({CENTURY_MINUTES})"
# Dead letters hold raw values, PII in clear included: they expire after this many days unless the catalog says
# otherwise, and never later than the table's own retention_days.
DEFAULT_DEAD_LETTER_RETENTION_DAYS = 14
# Snapshots of an Iceberg table are kept this long for time travel; rows expired or erased leave storage when the
# snapshots still holding them expire, so this is also how long an erasure takes to reach the files.
DEFAULT_SNAPSHOT_RETENTION_DAYS = 7
# Shown values in errors are cut short: a YAML alias bomb must not expand into a message.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict = 3, 80, 80, 6, 6


class SchemaFileError(ValueError):
    """A schema file of the catalog that cannot be a version of a table; the message names the file."""


def shown(value: Any) -> str:
    """A value of a catalog file as an error message shows it: cut short."""
    return _SHOWN.repr(value)


def refused(message: str) -> PydanticCustomError:
    """A refusal of a catalog key whose message is complete (it names its key): shown as it is."""
    return PydanticCustomError("catalog", "{message}", {"message": message})


def _start_hour_on_the_hour(value: Any) -> datetime:
    """`start_hour`: an ISO 8601 time (UTC when it names no zone) on the hour, in the years 1..9999 in UTC."""
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            if not isinstance(value, (str, date)):  # a list's text could be an alias bomb's expansion
                raise ValueError(value)
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise refused(f"start_hour {shown(value)} is not an ISO 8601 time like \"2026-11-01T00:00Z\"") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        moment = moment.astimezone(timezone.utc)
    except OverflowError:  # an offset that pushes year 1 or 9999 out of range
        raise refused(f"start_hour {shown(value)} is outside the years 1..9999 in UTC") from None
    if moment.minute or moment.second or moment.microsecond:
        raise refused(f"start_hour {shown(value)} must be on the hour")
    return moment


def _one_path_or_a_list(value: Any) -> Any:
    """`subject_field`: one dotted path as text, or a YAML list of them (as a tuple, for the frozen model)."""
    if isinstance(value, list):
        if not value or not all(isinstance(path, str) and path for path in value):
            raise refused(f"subject_field {shown(value)} must be a dotted field path or a non-empty list of them")
        return tuple(value)
    return value


def _kafka_topic_name(value: Any) -> Any:
    if isinstance(value, str):
        if not _TOPIC_NAME.match(value):
            raise refused(f"topic {shown(value)} is not a valid Kafka topic name")
        if value.startswith("."):
            # Data files are named after the topic, and a leading dot makes them hidden from every listing.
            raise refused(f"topic {value!r} starts with a dot; the platform cannot land it")
    return value


class CatalogKeys(BaseModel):
    """Frozen, strict (a string is no number, a number no string) and closed: a key it does not declare is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # `key:` with no value, or `key: null`, reads as if the key were not there.
        return {key: value for key, value in data.items() if value is not None} if isinstance(data, dict) else data


# How often the open hour may land in increments: `open_hour: {every_minutes: N}` of topic.yaml, `OPEN_HOUR_EVERY_MINUTES`.
OPEN_HOUR_MINUTES = (1, 30)


class OpenHourKeys(CatalogKeys):
    """`open_hour: {every_minutes: N}`: while a Kafka hour is open, what it holds so far lands every N minutes."""

    every_minutes: int = Field(ge=OPEN_HOUR_MINUTES[0], le=OPEN_HOUR_MINUTES[1],
                               description=f"a whole number of minutes from {OPEN_HOUR_MINUTES[0]} to {OPEN_HOUR_MINUTES[1]}")


def _off(value: Any) -> Any:
    """`open_hour: off`, which YAML reads as false."""
    return "off" if value is False else value


class TableKeys(CatalogKeys):
    """The keys of `topic.yaml` a table carries as written (defaults filled in); the keys that loading resolves
    against the schema files (versions, route, time field, …) are `topics.topic_yaml.TopicYaml`'s own."""

    topic: Annotated[str, BeforeValidator(_kafka_topic_name)] = Field(description="a Kafka topic name")
    owner: str = Field(description="text")
    start_hour: Annotated[datetime, BeforeValidator(_start_hour_on_the_hour)] = Field(
        description="an ISO 8601 time on the hour", examples=["2026-11-01T00:00Z"])
    keep_tombstones: bool = Field(False, description="true or false")
    # One path or several (`[after.id, before.id]`: a delete event's subject is in `before`), kept as written.
    subject_field: Annotated[str | tuple[str, ...], BeforeValidator(_one_path_or_a_list)] | None = Field(
        None, description="the dotted path of an Avro field, or a list of them")
    retention_days: int | None = Field(None, gt=0, le=CENTURY_DAYS, description=DAYS)
    freshness_minutes: int | None = Field(None, gt=0, le=CENTURY_MINUTES, description=_POSITIVE_MINUTES)
    max_rows_per_task: int = Field(1_000_000, gt=0, description="a positive whole number")
    close_grace_minutes: int = Field(10, ge=0, le=CENTURY_MINUTES, description=_MINUTES)
    # Producers stamp records with their own clocks: one stamped a little after H+1 does not yet mean every producer
    # has moved past H.
    record_grace_minutes: int = Field(2, ge=0, le=CENTURY_MINUTES, description=_MINUTES)
    dead_letter_rate_threshold: float = Field(0.05, ge=0, le=1, allow_inf_nan=False,
                                              description="a fraction between 0 and 1")
    target_file_mb: int = Field(256, gt=0, description="a positive whole number of megabytes")
    dead_letter_retention_days: int = Field(DEFAULT_DEAD_LETTER_RETENTION_DAYS, gt=0, le=CENTURY_DAYS, description=DAYS)
    snapshot_retention_days: int = Field(DEFAULT_SNAPSHOT_RETENTION_DAYS, gt=0, le=CENTURY_DAYS, description=DAYS)
    # As written: increments every N minutes, `off`, or (absent) the deployment's `OPEN_HOUR_EVERY_MINUTES`.
    open_hour: Annotated[OpenHourKeys | Literal["off"], BeforeValidator(_off)] | None = Field(
        None, description="a mapping with every_minutes, or off")

    @property
    def subject_fields(self) -> tuple[tuple[str, ...], ...]:
        """The Avro field paths erasure requests match on (`subject_field`: one or several; none without it)."""
        named = (self.subject_field,) if isinstance(self.subject_field, str) else (self.subject_field or ())
        return tuple(tuple(path.split(".")) for path in named)

    @property
    def subject_field_text(self) -> str:
        """`subject_field` as the docs and audits say it: `after.id` or `after.id, before.id`."""
        return ", ".join(".".join(path) for path in self.subject_fields)

    def keys_by_name(self) -> dict[str, Any]:
        """These keys by name, to build a `TableSpec` from a validated document without copying them one by one."""
        return {name: getattr(self, name) for name in TableKeys.model_fields}


@dataclass(frozen=True)
class SchemaVersion:
    version: int
    file: str
    registry_id: int | None  # None: a JSON version that framed values never name
    schema: dict[str, Any] = field(repr=False, compare=False)  # the Avro schema as JSON
    parsed: Any = field(repr=False, compare=False)  # fastavro's parsed form, for decoding
    recursions: tuple[str, ...] = ()  # where a record contains itself: those fields land as JSON text


RouteValue = str | int | bool
# (version, Avro field path, the column path it lands in) of the fields that land in another column than their name.
FieldColumns = tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...]


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


@dataclass(frozen=True)
class CurrentState:
    """A change topic's table of the newest row per key (`current_state` of topic.yaml): its name in the topic's
    database, the Avro field path of the record that is the row (None: the whole value), and which changes delete
    their key as a tombstone does (`delete_when`, a field holding one of its values)."""

    table: str
    row: tuple[str, ...] | None = None
    delete_when: Route | None = None


@dataclass(frozen=True)
class RoutedSibling:
    """Another routed table of the same topic: its name, its route, and the schema ids its versions answer to."""

    name: str
    route: Route
    registry_ids: frozenset[int]


class TableSpec(TableKeys):
    """One table of the catalog and the Kafka topic it lands: everything the platform needs to land it. Several
    tables may land one topic (`route`, or copies placed otherwise). Built by `topics.loader` (`model_copy(update=…)`
    for a variant); frozen."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    database: str
    table: str
    source_file: str
    payload_format: str  # `format:` of topic.yaml, a name of `decoding.formats.PAYLOAD_FORMATS`
    # "hive" or "iceberg": `table_format` of topic.yaml, else the deployment's `TABLE_FORMAT`, decided at load.
    table_format: str
    time_source: Literal["event_time", "kafka_time"]
    time_field: tuple[str, ...] | None  # an Avro field path, like every field path of the catalog
    time_unit: str | None  # what a plain long event time counts (s, ms, us, ns); None: not set, ms
    schema_versions: tuple[SchemaVersion, ...]
    pii_fields: tuple[tuple[str, ...], ...]
    allowed_lateness_hours: int
    # Column → the name it lands under, for fields whose own name a column cannot take (`date`, `hour`, …); a column
    # is named by the first name its field had (`field_columns`), as `rename` in topic.yaml may name any of its names.
    rename: tuple[tuple[str, str], ...] = ()
    route: Route | None = None  # None: every record of the topic
    key_schema: SchemaVersion | None = None  # the key's schema (version 0): its fields land as `_kafka_key_<field>`
    archived: bool = False  # made by the archive rule, not by a folder of its own
    current_state: CurrentState | None = None  # a change topic's table of the newest row per key, beside this one
    # The other routed tables of the topic (set by the loader): a record one of them takes is theirs, one that none
    # takes is unrouted, and lands in the topic's unrouted dead letters through the first routed table alone.
    routed_siblings: tuple[RoutedSibling, ...] = ()
    lands_unrouted: bool = True
    # (version, Avro field path, the column path it lands in) of every field renamed with an Avro alias, and the fields
    # inside it: they land in the column of the field they renamed (`schemas.column_lineage`).
    field_columns: FieldColumns = ()
    # Minutes between increments of the open hour (`open_hour`, else the deployment's default); None: off, an hour
    # lands once it is closed.
    open_hour_minutes: int | None = None

    @property
    def placement(self) -> tuple:
        """How the table lands its records: two copies of a topic with equal placements would hold the same rows."""
        return self.payload_format, self.time_source, self.time_field, self.time_unit

    @property
    def version_numbers(self) -> tuple[int, ...]:
        """The `schema_version=` values the table's partitions may have."""
        return tuple(v.version for v in self.schema_versions) or (RAW_SCHEMA_VERSION,)

    @property
    def name(self) -> str:
        """`database/table`, the suffix of every asset key of this table."""
        return f"{self.database}/{self.table}"

    @property
    def columns_by_field(self) -> dict[str, str]:
        """The renamed columns: column (its first name) → the name it lands under (`rename`)."""
        return dict(self.rename)

    def columns_of(self, version: SchemaVersion) -> dict[str, str]:
        """A version's top-level Avro fields whose column has another name: by `rename`, or the field an alias renamed."""
        renamed = dict(self.rename)
        followed = {path[0]: landed[0] for number, path, landed in self.field_columns
                    if number == version.version and len(path) == 1}
        columns = {}
        for avro_field in version.schema["fields"]:
            column = followed.get(avro_field["name"], avro_field["name"])
            column = renamed.get(column, column)
            if column != avro_field["name"]:
                columns[avro_field["name"]] = column
        return columns

    def column_path(self, field_path: tuple[str, ...]) -> tuple[str, ...]:
        """Where an Avro field path (as the catalog's keys name fields, in any version's names) lands among the
        table's columns."""
        landed = next((landed for _, path, landed in self.field_columns if path == field_path), field_path)
        return (self.columns_by_field.get(landed[0], landed[0]), *landed[1:])

    @property
    def subject_columns(self) -> tuple[tuple[str, ...], ...]:
        """Where each of `subject_fields` landed among the table's columns (`rename` may have given it another)."""
        return tuple(self.column_path(path) for path in self.subject_fields)


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
