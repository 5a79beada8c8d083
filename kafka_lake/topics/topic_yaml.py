"""The model of `topic.yaml`: every key, its type, what it must be and its default, declared once.

What can be checked without the schema files is checked here; `catalog.load_topic` checks the rest against them.
"""

from __future__ import annotations

import re
import reprlib
from datetime import date, datetime, timezone
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError

from kafka_lake.event_time import TIME_UNITS
from kafka_lake.schemas.avro_types import AVRO_NAME
from kafka_lake.settings import TABLE_FORMATS

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}\Z")
# Upper bounds of durations, so an absurd value fails here rather than overflowing a date in a run.
_CENTURY_DAYS, _CENTURY_HOURS, _CENTURY_MINUTES = 36_525, 876_600, 52_596_000
# Dead letters hold raw values, PII in clear included: they expire after this many days unless the catalog says
# otherwise, and never later than the table's own retention_days.
DEFAULT_DEAD_LETTER_RETENTION_DAYS = 14
# Snapshots of an Iceberg table are kept this long for time travel; rows expired or erased leave storage when the
# snapshots still holding them expire, so this is also how long an erasure takes to reach the files.
DEFAULT_SNAPSHOT_RETENTION_DAYS = 7
# How many raw hours after H may still add rows to H: late events for event time, out-of-order producer timestamps
# for Kafka time.
DEFAULT_ALLOWED_LATENESS_HOURS = {"event_time": 3, "kafka_time": 1}
# Shown values in errors are cut short: a YAML alias bomb must not expand into a message.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict = 3, 80, 80, 6, 6


def shown(value: Any) -> str:
    """A value of a catalog file as an error message shows it: cut short."""
    return _SHOWN.repr(value)


class TopicYamlError(ValueError):
    """What is wrong with a `topic.yaml` document, naming the key."""


def _refused(message: str) -> PydanticCustomError:
    """A refusal whose message is complete (it names its key): shown as it is."""
    return PydanticCustomError("catalog", "{message}", {"message": message})


def _a_list(value: Any) -> Any:
    """YAML lists only (not sets, not text), as a tuple for the frozen model; the items are checked by their type."""
    if not isinstance(value, list):
        raise PydanticCustomError("list_type", "not a list")
    return tuple(value)


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
            raise _refused(f"start_hour {shown(value)} is not an ISO 8601 time like \"2026-11-01T00:00Z\"") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        moment = moment.astimezone(timezone.utc)
    except OverflowError:  # an offset that pushes year 1 or 9999 out of range
        raise _refused(f"start_hour {shown(value)} is outside the years 1..9999 in UTC") from None
    if moment.minute or moment.second or moment.microsecond:
        raise _refused(f"start_hour {shown(value)} must be on the hour")
    return moment


def _kafka_topic_name(value: Any) -> Any:
    if isinstance(value, str):
        if not _TOPIC_NAME.match(value):
            raise _refused(f"topic {shown(value)} is not a valid Kafka topic name")
        if value.startswith("."):
            # Data files are named after the topic, and a leading dot makes them hidden from every listing.
            raise _refused(f"topic {value!r} starts with a dot; the platform cannot land it")
    return value


def _column_names(value: Any) -> Any:
    """`rename`: top-level Avro field names to column names, both Avro names (they reach paths and DDL)."""
    if not isinstance(value, dict):
        raise _refused(f"'rename' must map Avro field names to column names, got {shown(value)}")
    for field_name, column in value.items():
        key = f"rename.{shown(field_name) if not isinstance(field_name, str) else field_name}"
        if not isinstance(field_name, str) or not AVRO_NAME.match(field_name):
            extra = "; it renames top-level fields only (nested fields never clash with the lake's columns)" if (
                isinstance(field_name, str) and "." in field_name) else ""
            raise _refused(f"{shown(key)} does not name an Avro field{extra}")
        if not isinstance(column, str) or not AVRO_NAME.match(column):
            raise _refused(f"{key} is {shown(column)}; a column name is letters, digits and underscores, not starting "
                           f"with a digit")
    return value


FieldPath = Annotated[str, Field(min_length=1)]
_DAYS = f"a positive whole number of days, at most a century ({_CENTURY_DAYS})"
_MINUTES = f"a whole number of minutes, at most a century ({_CENTURY_MINUTES})"
_POSITIVE_MINUTES = f"a positive whole number of minutes, at most a century ({_CENTURY_MINUTES})"
_FROM_A_LIST = BeforeValidator(_a_list)


class _CatalogYaml(BaseModel):
    """Frozen, strict (a string is no number, a number no string) and closed: a key it does not declare is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # `key:` with no value, or `key: null`, reads as if the key were not there.
        return {key: value for key, value in data.items() if value is not None} if isinstance(data, dict) else data


class TimePartitioningYaml(_CatalogYaml):
    source: Literal["event_time", "kafka_time"] = Field(description="event_time or kafka_time")
    field: FieldPath | None = Field(None, description="the dotted path of an Avro field")
    unit: Literal[tuple(TIME_UNITS)] | None = Field(None, description=f"one of {', '.join(TIME_UNITS)}")  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _field_for_event_time_only(self) -> TimePartitioningYaml:
        if self.source == "kafka_time":
            for key in ("field", "unit"):
                if getattr(self, key) is not None:
                    raise _refused(f"time_partitioning.{key} is only for source event_time")
        elif self.field is None:
            raise _refused("time_partitioning.field is required for source event_time")
        return self


class SchemaVersionYaml(_CatalogYaml):
    version: int = Field(description="a whole number")
    file: str = Field(description="the name of an .avsc file beside topic.yaml")
    # Required for Avro; JSON values name a version only when framed (Confluent's JSON Schema serializer).
    registry_id: int | None = Field(None, ge=0, lt=2**31, description="a schema id in 0..2^31-1")


RouteValue = Annotated[str, Field(min_length=1)] | int | bool
# `route.field` naming no field but the Avro record's full name (Confluent's record-name subject strategies).
RECORD_NAME = "record_name"


def _distinct(values: tuple) -> tuple:
    if len({(type(v), v) for v in values}) != len(values):
        raise _refused(f"route.in lists a value twice: {shown(list(values))}")
    return values


class RouteYaml(_CatalogYaml):
    """`route`: which of its topic's records a table takes, by a field's value or by the Avro record's name."""

    field: FieldPath = Field(description=f"the dotted path of a field, or {RECORD_NAME}")
    equals: RouteValue | None = Field(None, description="a string, a whole number or true/false")
    in_: Annotated[tuple[RouteValue, ...], _FROM_A_LIST, Field(min_length=1), AfterValidator(_distinct)] | None = Field(
        None, alias="in", description="a list of strings, whole numbers or true/false")

    @model_validator(mode="after")
    def _one_of_equals_and_in(self) -> RouteYaml:
        if (self.equals is None) == (self.in_ is None):
            raise _refused("route takes exactly one of equals and in")
        if self.field == RECORD_NAME and not all(isinstance(v, str) for v in self.values):
            raise _refused(f"route by {RECORD_NAME} takes record full names, like com.example.CartOpen")
        return self

    @property
    def values(self) -> tuple:
        return (self.equals,) if self.in_ is None else self.in_


def _numbered_in_order(versions: tuple[SchemaVersionYaml, ...]) -> tuple[SchemaVersionYaml, ...]:
    for expected, entry in enumerate(versions, start=1):
        if entry.version != expected:
            raise _refused(f"schema_versions must be numbered 1, 2, … in order; got {entry.version}, expected {expected}")
    return versions


# Keys that say something about the decoded values: a raw table has none.
_VALUE_KEYS = ("schema_versions", "route", "rename", "pii_fields", "subject_field", "key_schema", "recursive_records")


class TopicYaml(_CatalogYaml):
    """A `topic.yaml` as written; defaults fill the optional keys."""

    topic: Annotated[str, BeforeValidator(_kafka_topic_name)] = Field(description="a Kafka topic name")
    owner: str = Field(description="text")
    format: Literal["avro", "json", "raw"] = Field("avro", description="avro, json or raw")
    schema_versions: Annotated[tuple[SchemaVersionYaml, ...], _FROM_A_LIST, Field(min_length=1),
                               AfterValidator(_numbered_in_order)] = Field(
        (), description="a list of {version, file, registry_id}, at least version 1")
    route: RouteYaml | None = Field(None, description="a mapping with field and equals or in")
    key_schema: str | None = Field(None, description="the name of an .avsc file beside topic.yaml")
    keep_tombstones: bool = Field(False, description="true or false")
    recursive_records: Literal["json", "refuse"] = Field("json", description="json or refuse")
    rename: Annotated[dict[str, str], BeforeValidator(_column_names)] = Field(
        default_factory=dict, description="a mapping of top-level Avro field names to column names")
    # Required, but for a raw table, which is always placed by Kafka time.
    time_partitioning: TimePartitioningYaml | None = Field(None, description="a mapping with source, field and unit")
    start_hour: Annotated[datetime, BeforeValidator(_start_hour_on_the_hour)] = Field(
        description="an ISO 8601 time on the hour", examples=["2026-11-01T00:00Z"])
    pii_fields: Annotated[tuple[FieldPath, ...], _FROM_A_LIST] = Field((), description="a list of dotted Avro field paths")
    subject_field: str | None = Field(None, description="the dotted path of an Avro field")
    retention_days: int | None = Field(None, gt=0, le=_CENTURY_DAYS, description=_DAYS)
    freshness_minutes: int | None = Field(None, gt=0, le=_CENTURY_MINUTES, description=_POSITIVE_MINUTES)
    max_rows_per_task: int = Field(1_000_000, gt=0, description="a positive whole number")
    close_grace_minutes: int = Field(10, ge=0, le=_CENTURY_MINUTES, description=_MINUTES)
    # Producers stamp records with their own clocks: one stamped a little after H+1 does not yet mean every producer
    # has moved past H.
    record_grace_minutes: int = Field(2, ge=0, le=_CENTURY_MINUTES, description=_MINUTES)
    dead_letter_rate_threshold: float = Field(0.05, ge=0, le=1, allow_inf_nan=False,
                                              description="a fraction between 0 and 1")
    allowed_lateness_hours: int | None = Field(None, ge=0, le=_CENTURY_HOURS,
                                               description=f"a whole number of hours, at most a century ({_CENTURY_HOURS})")
    target_file_mb: int = Field(256, gt=0, description="a positive whole number of megabytes")
    dead_letter_retention_days: int = Field(DEFAULT_DEAD_LETTER_RETENTION_DAYS, gt=0, le=_CENTURY_DAYS, description=_DAYS)
    table_format: Literal[TABLE_FORMATS] | None = Field(  # type: ignore[valid-type]
        None, description=f"one of {', '.join(TABLE_FORMATS)}")
    snapshot_retention_days: int = Field(DEFAULT_SNAPSHOT_RETENTION_DAYS, gt=0, le=_CENTURY_DAYS, description=_DAYS)

    @model_validator(mode="after")
    def _keys_the_format_needs(self) -> TopicYaml:
        if self.format == "raw":
            present = [key for key in _VALUE_KEYS if key in self.model_fields_set]
            if present:
                raise _refused(f"format raw lands the value's bytes as they are, without a schema; remove "
                               f"{', '.join(present)}")
            if self.time_partitioning is not None and self.time_partitioning.source != "kafka_time":
                raise _refused("format raw is placed by Kafka time: time_partitioning.source must be kafka_time")
            return self
        for key in ("schema_versions", "time_partitioning"):
            if key not in self.model_fields_set:
                raise _refused(f"missing required key {key!r}")
        if self.format == "avro":
            for entry in self.schema_versions:
                if entry.registry_id is None:
                    raise _refused(f"schema_versions[{entry.version - 1}].registry_id is required for format avro: the "
                                   f"schema id its records carry")
        if self.route is not None and self.route.field == RECORD_NAME and self.format != "avro":
            raise _refused(f"route by {RECORD_NAME} needs format avro: a {self.format} value names no record")
        if self.keep_tombstones and self.route is not None:
            raise _refused("keep_tombstones and route exclude each other: a tombstone has no value to route by")
        return self

    @property
    def time_source(self) -> Literal["event_time", "kafka_time"]:
        return self.time_partitioning.source if self.time_partitioning is not None else "kafka_time"

    @property
    def lateness_hours(self) -> int:
        """`allowed_lateness_hours`, or its default for the topic's time source."""
        if self.allowed_lateness_hours is not None:
            return self.allowed_lateness_hours
        return DEFAULT_ALLOWED_LATENESS_HOURS[self.time_source]


def read_topic_yaml(document: dict) -> TopicYaml:
    """The document (as YAML loaded it) as a `TopicYaml`, or `TopicYamlError` naming the first key that is wrong."""
    unknown = sorted(set(map(str, document)) - set(_keys(TopicYaml)))
    if unknown:
        listed = ", ".join(shown(key) if not key.isidentifier() else key for key in unknown[:10])
        raise TopicYamlError(f"unknown key(s) {listed}; allowed: {', '.join(sorted(_keys(TopicYaml)))}")
    try:
        return TopicYaml.model_validate(document)
    except ValidationError as invalid:
        raise TopicYamlError(_described(invalid.errors()[0], document)) from None


def _described(error: ErrorDetails, document: dict) -> str:
    """One validation error as a sentence naming the key: what it must be, and what it is."""
    if error["type"] == "catalog":
        return error["ctx"]["message"]
    loc = error["loc"]
    depth, field, model = _field_at(loc)
    key = _dotted(loc[:depth])
    if error["type"] in ("extra_forbidden", "invalid_key"):
        allowed = ", ".join(_keys(model)) if model is not None else "none"
        return f"unknown key {shown(loc[-1])} in {_dotted(loc[:-1])}; allowed there: {allowed}"
    if error["type"] == "missing":
        example = f" (e.g. \"{field.examples[0]}\")" if field is not None and field.examples else ""
        return f"missing required key {key!r}{example}"
    what = field.description if field is not None else "something else"
    return f"{key} must be {what}, got {shown(_value_at(document, loc[:depth]))}"


def _field_at(loc: tuple) -> tuple[int, FieldInfo | None, type[BaseModel] | None]:
    """(how many steps of `loc` lead to the deepest declared key, that key's field, the model of its value if any)."""
    model: type[BaseModel] | None = TopicYaml
    depth, found = 0, None
    for step, part in enumerate(loc):
        if isinstance(part, int) and found is not None:
            continue  # an item of a list
        if model is None or not isinstance(part, str) or part not in _keys(model):
            break
        depth, found = step + 1, _keys(model)[part]
        model = _nested_model(found.annotation)
    return depth, found, model


def _keys(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's keys as a document spells them (`in`, not `in_`)."""
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_nested_model, get_args(annotation)) if m is not None), None)


def _dotted(loc: tuple) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f"{'.' if index else ''}{part}" for index, part in enumerate(loc))


def _value_at(document: Any, loc: tuple) -> Any:
    for part in loc:
        try:
            document = document[part]
        except (KeyError, IndexError, TypeError):
            return None
    return document


# Keys of `_archive.yaml` beside those every archived topic's table takes, as a raw `topic.yaml` would.
_ARCHIVE_DATABASE = re.compile(r"^[a-z][a-z0-9_]{0,127}\Z")


class ArchiveYaml(_CatalogYaml):
    """`_archive.yaml`: which new topics are archived without a folder of their own, and the keys of their tables."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    pattern: str = Field(description="a Python regular expression the whole topic name must match")
    database: str = Field("archive", description="a database name: lowercase letters, digits and underscores")

    @model_validator(mode="after")
    def _valid(self) -> ArchiveYaml:
        try:
            re.compile(self.pattern)
        except (re.error, RecursionError, OverflowError) as error:
            raise _refused(f"pattern {shown(self.pattern)} is not a regular expression: {error}") from None
        if not _ARCHIVE_DATABASE.match(self.database):
            raise _refused(f"database {shown(self.database)} must be lowercase letters, digits and underscores, "
                           f"starting with a letter")
        for key in ("topic", "format"):
            if key in (self.model_extra or {}):
                raise _refused(f"{key} is set by the archive (each matching topic, format raw); remove it")
        return self

    @property
    def table_keys(self) -> dict:
        """The `topic.yaml` keys every archived table takes."""
        return dict(self.model_extra or {})


def read_archive_yaml(document: dict) -> ArchiveYaml:
    """`_archive.yaml` as an `ArchiveYaml` whose table keys make a valid raw `topic.yaml`, or `TopicYamlError`."""
    try:
        rule = ArchiveYaml.model_validate(document)
    except ValidationError as invalid:
        error = invalid.errors()[0]
        if error["type"] == "catalog":
            raise TopicYamlError(error["ctx"]["message"]) from None
        if error["type"] == "missing":
            raise TopicYamlError(f"missing required key {_dotted(error['loc'])!r}") from None
        field = ArchiveYaml.model_fields.get(str(error["loc"][0]))
        what = field.description if field is not None else "something else"
        raise TopicYamlError(f"{_dotted(error['loc'])} must be {what}, got "
                             f"{shown(_value_at(document, error['loc']))}") from None
    read_topic_yaml(archived_topic_yaml(rule, "archived.topic"))  # the table keys, checked once here
    return rule


def archived_topic_yaml(rule: ArchiveYaml, topic: str) -> dict:
    """The `topic.yaml` document of an archived topic's table."""
    return {**rule.table_keys, "topic": topic, "format": "raw"}
