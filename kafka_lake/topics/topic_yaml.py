"""The model of `topic.yaml`: every key, its type, what it must be and its default, declared once (the keys a table
carries as written in `table_spec.TableKeys`, those resolved against the schema files here); `loader` checks the rest.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError

from kafka_lake.decoding.formats import PAYLOAD_FORMATS
from kafka_lake.event_time import TIME_UNITS
from kafka_lake.schemas.avro_types import AVRO_NAME
from kafka_lake.settings import TABLE_FORMATS
from kafka_lake.table_spec import CENTURY_HOURS, RECORD_NAME, CatalogKeys, TableKeys, is_table_name, refused, shown

# How many raw hours after H may still add rows to H: late events for event time, out-of-order producer timestamps
# for Kafka time.
DEFAULT_ALLOWED_LATENESS_HOURS = {"event_time": 3, "kafka_time": 1}

class TopicYamlError(ValueError):
    """What is wrong with a `topic.yaml` document, naming the key."""


def _a_list(value: Any) -> Any:
    """YAML lists only (not sets, not text), as a tuple for the frozen model; the items are checked by their type."""
    if not isinstance(value, list):
        raise PydanticCustomError("list_type", "not a list")
    return tuple(value)


def _column_names(value: Any) -> Any:
    """`rename`: top-level Avro field names to column names, both Avro names (they reach paths and DDL)."""
    if not isinstance(value, dict):
        raise refused(f"'rename' must map Avro field names to column names, got {shown(value)}")
    for field_name, column in value.items():
        key = f"rename.{shown(field_name) if not isinstance(field_name, str) else field_name}"
        if not isinstance(field_name, str) or not AVRO_NAME.match(field_name):
            extra = "; it renames top-level fields only (nested fields never clash with the lake's columns)" if (
                isinstance(field_name, str) and "." in field_name) else ""
            raise refused(f"{shown(key)} does not name an Avro field{extra}")
        if not isinstance(column, str) or not AVRO_NAME.match(column):
            raise refused(f"{key} is {shown(column)}; a column name is letters, digits and underscores, not starting "
                           f"with a digit")
    return value


def _listed(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


FieldPath = Annotated[str, Field(min_length=1)]
_FROM_A_LIST = BeforeValidator(_a_list)


class TimePartitioningYaml(CatalogKeys):
    source: Literal["event_time", "kafka_time"] = Field(description="event_time or kafka_time")
    field: FieldPath | None = Field(None, description="the dotted path of an Avro field")
    unit: Literal[tuple(TIME_UNITS)] | None = Field(None, description=f"one of {', '.join(TIME_UNITS)}")  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _field_for_event_time_only(self) -> TimePartitioningYaml:
        if self.source == "kafka_time":
            for key in ("field", "unit"):
                if getattr(self, key) is not None:
                    raise refused(f"time_partitioning.{key} is only for source event_time")
        elif self.field is None:
            raise refused("time_partitioning.field is required for source event_time")
        return self


class SchemaVersionYaml(CatalogKeys):
    version: int = Field(description="a whole number")
    file: str = Field(description="the name of a schema file (.avsc; .proto for protobuf) beside topic.yaml")
    # Required for Avro; JSON values name a version only when framed (Confluent's JSON Schema serializer).
    registry_id: int | None = Field(None, ge=0, lt=2**31, description="a schema id in 0..2^31-1")
    # The message of the file the version lands, for a format whose files hold several (Protobuf).
    message: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="the full name of a message of the file, like acme.orders.Order")


RouteValue = Annotated[str, Field(min_length=1)] | int | bool
def _distinct(values: tuple) -> tuple:
    if len({(type(v), v) for v in values}) != len(values):
        raise refused(f"route.in lists a value twice: {shown(list(values))}")
    return values


class RouteYaml(CatalogKeys):
    """`route`: which of its topic's records a table takes, by a field's value or by the Avro record's name."""

    field: FieldPath = Field(description=f"the dotted path of a field, or {RECORD_NAME}")
    equals: RouteValue | None = Field(None, description="a string, a whole number or true/false")
    in_: Annotated[tuple[RouteValue, ...], _FROM_A_LIST, Field(min_length=1), AfterValidator(_distinct)] | None = Field(
        None, alias="in", description="a list of strings, whole numbers or true/false")

    @model_validator(mode="after")
    def _one_of_equals_and_in(self) -> RouteYaml:
        if (self.equals is None) == (self.in_ is None):
            raise refused("route takes exactly one of equals and in")
        if self.field == RECORD_NAME and not all(isinstance(v, str) for v in self.values):
            raise refused(f"route by {RECORD_NAME} takes record full names, like com.example.CartOpen")
        return self

    @property
    def values(self) -> tuple:
        return (self.equals,) if self.in_ is None else self.in_


class DeleteWhenYaml(CatalogKeys):
    """`current_state.delete_when`: a change whose field holds this value deletes its key, as a tombstone does
    (Debezium's `op: d`)."""

    field: FieldPath = Field(description="the dotted path of a field")
    equals: RouteValue = Field(description="a string, a whole number or true/false")


class CurrentStateYaml(CatalogKeys):
    """`current_state`: beside the raw table of every change, an Iceberg table of the newest row per key."""

    table: str | None = Field(None, description="a table name: lowercase letters, digits and underscores")
    row: FieldPath | None = Field(None, description="the dotted path of a record field (Debezium's after)")
    delete_when: DeleteWhenYaml | None = Field(None, description="a mapping with field and equals")


def _numbered_in_order(versions: tuple[SchemaVersionYaml, ...]) -> tuple[SchemaVersionYaml, ...]:
    for expected, entry in enumerate(versions, start=1):
        if entry.version != expected:
            raise refused(f"schema_versions must be numbered 1, 2, … in order; got {entry.version}, expected {expected}")
    return versions


# Keys that say something about the decoded values: a raw table has none.
_VALUE_KEYS = ("schema_versions", "route", "rename", "pii_fields", "subject_field", "key_schema", "recursive_records",
               "current_state")


class TopicYaml(TableKeys):
    """A `topic.yaml` as written; defaults fill the optional keys. Beside the keys a table carries as they are
    (`TableKeys`), those the loader resolves against the schema files."""

    payload_format: Literal[tuple(PAYLOAD_FORMATS)] = Field(  # type: ignore[valid-type]
        "avro", alias="format", description=_listed(PAYLOAD_FORMATS))
    schema_versions: Annotated[tuple[SchemaVersionYaml, ...], _FROM_A_LIST, Field(min_length=1),
                               AfterValidator(_numbered_in_order)] = Field(
        (), description="a list of {version, file, registry_id} (and message for protobuf), at least version 1")
    route: RouteYaml | None = Field(None, description="a mapping with field and equals or in")
    key_schema: str | None = Field(None, description="the name of a schema file (.avsc; .proto for protobuf) beside topic.yaml")
    recursive_records: Literal["json", "refuse"] = Field("json", description="json or refuse")
    rename: Annotated[dict[str, str], BeforeValidator(_column_names)] = Field(
        default_factory=dict, description="a mapping of top-level Avro field names to column names")
    # Required, but for a raw table, which is always placed by Kafka time.
    time_partitioning: TimePartitioningYaml | None = Field(None, description="a mapping with source, field and unit")
    pii_fields: Annotated[tuple[FieldPath, ...], _FROM_A_LIST] = Field((), description="a list of dotted Avro field paths")
    allowed_lateness_hours: int | None = Field(None, ge=0, le=CENTURY_HOURS,
                                               description=f"a whole number of hours, at most a century ({CENTURY_HOURS})")
    table_format: Literal[TABLE_FORMATS] | None = Field(  # type: ignore[valid-type]
        None, description=f"one of {', '.join(TABLE_FORMATS)}")
    current_state: CurrentStateYaml | None = Field(None, description="a mapping with table, row and delete_when")

    @model_validator(mode="after")
    def _keys_the_format_needs(self) -> TopicYaml:
        payloads = PAYLOAD_FORMATS[self.payload_format]
        if not payloads.has_schemas:
            present = [key for key in _VALUE_KEYS if key in self.model_fields_set]
            if present:
                raise refused(f"format {payloads.name} lands the value's bytes as they are, without a schema; remove "
                              f"{', '.join(present)}")
            if self.time_partitioning is not None and self.time_partitioning.source != "kafka_time":
                raise refused(f"format {payloads.name} is placed by Kafka time: time_partitioning.source must be "
                              f"kafka_time")
            return self
        for key in ("schema_versions", "time_partitioning"):
            if key not in self.model_fields_set:
                raise refused(f"missing required key {key!r}")
        for entry in self.schema_versions:
            if payloads.needs_message and entry.message is None:
                raise refused(f"schema_versions[{entry.version - 1}].message is required for format {payloads.name}: "
                              f"the full name of the message its records are, like acme.orders.Order")
            if not payloads.needs_message and entry.message is not None:
                raise refused(f"schema_versions[{entry.version - 1}].message is for formats whose files hold several "
                              f"messages ({_listed([n for n, f in PAYLOAD_FORMATS.items() if f.needs_message])}); a "
                              f"{payloads.name} file holds one record: remove it")
        if payloads.schema_ids_required:
            for entry in self.schema_versions:
                if entry.registry_id is None:
                    raise refused(f"schema_versions[{entry.version - 1}].registry_id is required for format "
                                  f"{payloads.name}: the schema id its records carry")
        if self.route is not None and self.route.field == RECORD_NAME and not payloads.names_records:
            raise refused(f"route by {RECORD_NAME} needs a format whose values name their record "
                          f"({_listed([name for name, f in PAYLOAD_FORMATS.items() if f.names_records])}): a "
                          f"{payloads.name} value names no record")
        if self.keep_tombstones and self.route is not None:
            raise refused("keep_tombstones and route exclude each other: a tombstone has no value to route by")
        if self.current_state is not None:
            self._check_current_state()
        return self

    def _check_current_state(self) -> None:
        if self.key_schema is None:
            raise refused("current_state needs key_schema: the key's fields say which row each change sets")
        if "keep_tombstones" in self.model_fields_set and not self.keep_tombstones:
            raise refused("current_state lands the topic's tombstones as rows (a tombstone deletes its key); remove "
                          "keep_tombstones: false")
        if self.route is not None:
            raise refused("current_state and route exclude each other: a tombstone, which deletes its key, has no "
                          "value to route by")

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




class ArchiveYaml(CatalogKeys):
    """`_archive.yaml`: which new topics are archived without a folder of their own, and the keys of their tables."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    pattern: str = Field(description="a Python regular expression the whole topic name must match")
    database: str = Field("archive", description="a database name: lowercase letters, digits and underscores")

    @model_validator(mode="after")
    def _valid(self) -> ArchiveYaml:
        try:
            re.compile(self.pattern)
        except (re.error, RecursionError, OverflowError) as error:
            raise refused(f"pattern {shown(self.pattern)} is not a regular expression: {error}") from None
        if not is_table_name(self.database):
            raise refused(f"database {shown(self.database)} must be lowercase letters, digits and underscores, "
                           f"starting with a letter")
        for key in ("topic", "format"):
            if key in (self.model_extra or {}):
                raise refused(f"{key} is set by the archive (each matching topic, format raw); remove it")
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
