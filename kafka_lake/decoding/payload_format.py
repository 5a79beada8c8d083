"""The seam of payload formats: what a topic's values are (`PayloadFormat`): their framing, their schema files, their
decode paths and how a route reads them. The formats (Avro, JSON, raw) are chosen once per table, in `formats`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from kafka_lake.decoding.decoded_batch import Placement
from kafka_lake.decoding.pii import ColumnPseudonymizer
from kafka_lake.decoding.placement import TimePlacement
from kafka_lake.kafka.framing import FramedValues
from kafka_lake.kafka.records import KafkaBatch, KafkaColumns
from kafka_lake.kafka.schema_resolution import SchemaResolver
from kafka_lake.schemas.arrow_mapping import ArrowMapping
from kafka_lake.table_spec import SchemaVersion, TableSpec


class RecordPath(Protocol):
    """How one schema version's payloads are decoded one at a time, into the values its `ArrowMapping` takes."""

    def read(self, payload: memoryview, schema_id: int | None) -> dict:
        """The payload's value; raises `Undecodable` saying what is wrong with the bytes."""
        ...


class ColumnarPath(Protocol):
    """How many payloads of one schema version are decoded at once, as columns."""

    def decode(self, framed: FramedValues, indices: np.ndarray, batch: KafkaBatch, kafka: KafkaColumns,
               placed: dict[Placement, list[pa.Table]]) -> list[int]:
        """Lands the rows of the batch's records at `indices` that the path vouches for in `placed`; returns the
        records it leaves to the record path, which lands them or says why not."""
        ...


@dataclass(frozen=True)
class ColumnarInputs:
    """What the columnar path of one schema version is built from: it must give exactly the record path's columns."""

    version: SchemaVersion
    mapping: ArrowMapping  # the record path's table and converters
    pii_fields: tuple[tuple[str, ...], ...]
    pseudonyms: ColumnPseudonymizer | None
    placement: TimePlacement
    time_field: tuple[str, ...] | None


@dataclass(frozen=True)
class LoadedSchema:
    """A schema file as the table takes it: an Avro schema (as JSON), from which every column of the table follows
    (`schemas.arrow_mapping`), what the format decodes with, and where a record contains itself."""

    schema: dict[str, Any]
    parsed: Any
    recursions: tuple[str, ...] = ()


@dataclass
class RouteValues:
    """The route field of a batch's present records as read before decoding: its value where one was read (None:
    absent or null), or why it could not be read."""

    values: dict[int, object] = field(default_factory=dict)
    unreadable: dict[int, str] = field(default_factory=dict)


class PayloadFormat(Protocol):
    """One format of a topic's values (`format:` of topic.yaml). A table's versions are Avro schemas whatever the
    format (a format with other schema files translates them at load), so the columns, the table catalogs' schemas
    and every field path follow from them alike."""

    name: str  # as `format:` names it
    title: str  # as people name it, in the UI's descriptions: "Avro", "Protobuf", "raw bytes"
    kind: str  # the kind its topics' raw assets show in the UI (`raw` is a layer's kind already: raw bytes are `bytes`)
    has_schemas: bool  # False: no schema versions, the value's bytes are the row (`format: raw`)
    schema_ids_required: bool  # every value carries a schema id in its framing: each version needs a `registry_id`
    names_records: bool  # a value names its record (Avro's full name): tables may route by `record_name`
    needs_message: bool  # a schema file holds several messages: each version names its own (`message:`)
    record_path_name: str  # the record path, as the decoding paths name it ("fastavro", "record by record")

    def load_schema(self, path: Path, text: str, message: str | None) -> LoadedSchema:
        """A schema file of a version (and the message it lands, for a format that `needs_message`; None: the first
        of the file, as for a key); raises `SchemaFileError` naming the file."""
        ...

    def evolution_problem(self, older: SchemaVersion, newer: SchemaVersion) -> str | None:
        """Why `newer` cannot follow `older` in one table, or None."""
        ...

    def registered_form(self, version: SchemaVersion) -> str:
        """What a registry id stands for: two versions given one id must have the same form."""
        ...

    def schemas(self, topic: TableSpec, registry_url: str | None) -> SchemaResolver:
        """How the schema ids of the table's values resolve to its versions: through `SCHEMA_REGISTRY_URL` where the
        format's schemas can be matched against the registry's, else through the catalog's `registry_id`s."""
        ...

    def framed(self, values: pa.BinaryArray) -> FramedValues:
        """A batch's values with their framing read as columns."""
        ...

    def split(self, value: bytes) -> tuple[int | None, memoryview]:
        """(schema id, payload) of one value; raises `FramingError`."""
        ...

    def record_path(self, version: SchemaVersion) -> RecordPath: ...

    def columnar_path(self, inputs: ColumnarInputs) -> ColumnarPath:
        """The version's columnar path, or raises `NotColumnar` saying why its values take the record path."""
        ...

    def record_name(self, version: SchemaVersion, payload: memoryview) -> str:
        """The full name of the record a payload of the version is (for `route: {field: record_name}`); raises
        `Undecodable` where the payload cannot say."""
        ...

    def route_values(self, batch: KafkaBatch, framed: FramedValues, field: tuple[str, ...], value_type: pa.DataType,
                     version_of: Callable[[int | None], SchemaVersion]) -> RouteValues | None:
        """The route field read from the values before decoding, where the format reads one field cheaper than a
        whole value, under its names in the version `version_of` a schema id names; None: the route reads it from the
        values decoded by the table's versions."""
        ...

    def shown(self, value: Any) -> str:
        """A value as its producers wrote it, for the cause of a dead letter or of an unrouted record."""
        ...
