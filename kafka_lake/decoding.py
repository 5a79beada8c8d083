"""Decoding a batch of one topic's Kafka records into Arrow tables, one per (schema version, hour).

Every record lands in exactly one place: a row, a dead letter (with its raw bytes and why), or a tombstone.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from operator import attrgetter
from typing import Any, NamedTuple, Protocol, Sequence
from urllib.parse import urlsplit

import fastavro
import pyarrow as pa
from fastavro.schema import to_parsing_canonical_form

from kafka_lake.avro_arrow import DEAD_LETTER_SCHEMA, ArrowMapping, arrow_mapping_for
from kafka_lake.catalog import SchemaVersion, TopicSpec
from kafka_lake.framing import FramingError, split_confluent
from kafka_lake.hours import floor_hour, hour_of_millis
from kafka_lake.pii import pseudonymizer_for

_SCHEMA_NOT_FOUND = 40403  # Confluent Schema Registry's error code for an unknown id
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))?"
)
_FIRST_MS, _END_MS = 0, 253_402_300_800_000  # [1970-01-01, 10000-01-01): the hours a lake path can name
# What Arrow raises for a decoded value its column cannot hold (a decimal beyond its precision, …).
_UNFIT_FOR_ARROW = (pa.ArrowException, ValueError, TypeError, OverflowError)


@dataclass(frozen=True)
class KafkaRecord:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None  # None: a tombstone


@dataclass(frozen=True, order=True)
class Placement:
    """Where decoded rows land: `schema_version={v}/date=…/hour=…` of the topic's table."""

    schema_version: int
    hour: datetime  # UTC, on the hour: event hour (event_time topics) or Kafka-time hour (kafka_time)


@dataclass
class DecodedBatch:
    rows: dict[Placement, pa.Table]
    dead_letters: dict[datetime, pa.Table]  # by Kafka-time hour
    tombstones: int
    dead_letter_causes: Counter[str]
    records: int  # the input's length: rows + dead letters + tombstones

    @property
    def rows_count(self) -> int:
        return sum(table.num_rows for table in self.rows.values())


class SchemaResolver(Protocol):
    """Which catalog version the schema id in a record's Confluent header stands for."""

    def version_for(self, schema_id: int) -> SchemaVersion | None: ...

    def unknown_reason(self, schema_id: int) -> str:
        """Why `version_for(schema_id)` is None, for the dead letter's error column."""
        ...


class SchemaRegistryUnavailable(RuntimeError):
    """The schema registry did not answer; retry the run rather than dead-letter every record."""

    def __init__(self, url: str, schema_id: int, error: Exception):
        super().__init__(
            f"schema registry at {url} failed to answer for schema id {schema_id}: "
            f"{type(error).__name__}: {error}; check SCHEMA_REGISTRY_URL and that the registry is up"
        )


class CatalogSchemas:
    """Resolves schema ids through the catalog's `registry_id`s (no schema registry configured)."""

    def __init__(self, topic: TopicSpec):
        self._topic = topic

    def version_for(self, schema_id: int) -> SchemaVersion | None:
        return self._topic.version_for_registry_id(schema_id)

    def unknown_reason(self, schema_id: int) -> str:
        known = ", ".join(str(v.registry_id) for v in self._topic.schema_versions)
        return (
            f"schema id {schema_id} is no registry_id of topic {self._topic.topic} in {self._topic.source_file} "
            f"(known: {known}); add its schema there as a new version"
        )


class RegistrySchemas:
    """Resolves schema ids through a Confluent Schema Registry, to the catalog version with the same schema.

    "Same" is Avro's parsing canonical form: same bytes on the wire, whatever the docs, defaults or ids.
    Each id is asked once; an id the registry lacks, or whose schema the catalog lacks, resolves to None.
    """

    def __init__(self, topic: TopicSpec, url: str, client_config: dict | None = None):
        # Imported only with a registry: its HTTP and auth stack costs ~0.4 s that catalog-only runs skip.
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self._topic = topic
        self._url = _without_credentials(url)
        self._client = SchemaRegistryClient({**(client_config or {}), "url": url})
        self._forms = [(to_parsing_canonical_form(v.parsed), v) for v in topic.schema_versions]
        self._resolved: dict[int, tuple[SchemaVersion | None, str]] = {}

    def version_for(self, schema_id: int) -> SchemaVersion | None:
        return self._resolve(schema_id)[0]

    def unknown_reason(self, schema_id: int) -> str:
        return self._resolve(schema_id)[1]

    def _resolve(self, schema_id: int) -> tuple[SchemaVersion | None, str]:
        if schema_id not in self._resolved:
            self._resolved[schema_id] = self._fetch(schema_id)
        return self._resolved[schema_id]

    def _fetch(self, schema_id: int) -> tuple[SchemaVersion | None, str]:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            registered = self._client.get_schema(schema_id)
        except SchemaRegistryError as error:
            if error.error_code == _SCHEMA_NOT_FOUND:
                return None, f"schema id {schema_id} is not known to the schema registry at {self._url}"
            raise SchemaRegistryUnavailable(self._url, schema_id, error) from error
        except Exception as error:  # the HTTP client's connection errors, timeouts, unreadable answers
            raise SchemaRegistryUnavailable(self._url, schema_id, error) from error
        where = f"schema id {schema_id} in the schema registry at {self._url}"
        if registered.schema_type not in (None, "AVRO"):
            return None, f"{where} is a {registered.schema_type} schema, not Avro"
        try:
            form = to_parsing_canonical_form(fastavro.parse_schema(json.loads(registered.schema_str), _write_hint=False))
        except Exception as error:  # json or fastavro: either way not a schema we can decode with
            return None, f"{where} is not a self-contained Avro schema: {error}"
        # Equal canonical forms mean equal bytes on the wire; the catalog's registry_id breaks ties.
        matches = [version for catalog_form, version in self._forms if catalog_form == form]
        if not matches:
            return None, (
                f"{where} is none of the catalog's schema versions of topic {self._topic.topic} "
                f"({self._topic.source_file}); add it there as a new version"
            )
        return next((v for v in matches if v.registry_id == schema_id), matches[-1]), ""


def parse_event_time(value: Any) -> datetime:
    """An event time as an aware UTC datetime: from fastavro's timestamp, epoch milliseconds or RFC 3339."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int) and not isinstance(value, bool):
        if not _FIRST_MS <= value < _END_MS:
            raise ValueError(f"{value} epoch milliseconds is outside the years 1970..9999")
        return datetime.fromtimestamp(value // 1000, tz=timezone.utc) + timedelta(milliseconds=value % 1000)
    elif isinstance(value, str):
        moment = _parse_rfc3339(value)
    else:
        raise ValueError(f"{type(value).__name__} {value!r} is not a timestamp, epoch milliseconds or RFC 3339 text")
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()} has no time zone (a local timestamp cannot be placed in UTC)")
    moment = moment.astimezone(timezone.utc)
    if moment.year < 1970:
        raise ValueError(f"{moment.isoformat()} is before 1970")
    return moment


def _parse_rfc3339(text: str) -> datetime:
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an RFC 3339 time like 2026-11-01T13:05:00Z")
    year, month, day, hour, minute, second, fraction, zulu, sign, offset_h, offset_m = match.groups()
    if zulu is None and sign is None:
        raise ValueError(f"{text!r} has no UTC offset (end it with Z or ±hh:mm)")
    offset = timedelta(0) if zulu else int(sign + "1") * timedelta(hours=int(offset_h), minutes=int(offset_m))
    microsecond = int((fraction or "0")[:6].ljust(6, "0"))  # nanosecond producers: keep microseconds
    try:
        # Leap seconds and impossible dates land here; an offset past the end of year 9999 overflows.
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), microsecond)
        return moment.replace(tzinfo=timezone(offset)).astimezone(timezone.utc)
    except (ValueError, OverflowError) as error:
        raise ValueError(f"{text!r} is not a real time: {error}") from None


class _DeadLetter(Exception):
    def __init__(self, cause: str, detail: str):
        super().__init__(f"{cause}: {detail}")
        self.cause = cause


class _Rejected(NamedTuple):
    """A dead letter waiting for its table; the text, not the exception, so no frames stay pinned."""

    record: KafkaRecord
    cause: str
    error: str


@dataclass(frozen=True)
class _VersionDecoding:
    version: SchemaVersion
    mapping: ArrowMapping
    reader_schema: Any  # fastavro's parsed form, carrying its "already parsed" hint (no re-parse per record)

    def describe(self, schema_id: int) -> str:
        return f"schema id {schema_id} (version {self.version.version}, {self.version.file})"


@dataclass
class _PlacedRows:
    decoding: _VersionDecoding
    records: list[KafkaRecord] = field(default_factory=list)
    values: list[dict] = field(default_factory=list)


class BatchDecoder:
    """Decodes Confluent-framed Avro records of one topic; compile once, then `decode` batch after batch."""

    def __init__(self, topic: TopicSpec, schemas: SchemaResolver, pii_key: bytes | None):
        self._topic = topic
        self._schemas = schemas
        pseudonymizer = pseudonymizer_for(topic, pii_key)
        self._pseudonymize = pseudonymizer.pseudonymize if pseudonymizer else None
        self._by_schema_id: dict[int, _VersionDecoding | str] = {}  # a decoding, or why the id is unknown
        self._by_version: dict[int, _VersionDecoding] = {}

    def decode(self, records: Sequence[KafkaRecord]) -> DecodedBatch:
        placed: dict[Placement, _PlacedRows] = {}
        dead: dict[datetime, list[_Rejected]] = defaultdict(list)
        tombstones = 0
        for record in sorted(records, key=attrgetter("partition", "offset")):
            if record.value is None:
                tombstones += 1
                continue
            try:
                decoding, hour, row = self._decode_value(record)
            except _DeadLetter as dead_letter:
                dead[hour_of_millis(record.timestamp_ms)].append(_Rejected(record, dead_letter.cause, str(dead_letter)))
                continue
            key = Placement(decoding.version.version, hour)
            rows_here = placed.get(key)
            if rows_here is None:
                rows_here = placed[key] = _PlacedRows(decoding)
            rows_here.records.append(record)
            rows_here.values.append(row)

        tables = {}
        for placement, rows_here in placed.items():
            table, rejected = self._rows_table(rows_here)
            if table.num_rows:
                tables[placement] = table
            for letter in rejected:
                dead[hour_of_millis(letter.record.timestamp_ms)].append(letter)
        return DecodedBatch(
            rows=tables,
            dead_letters={hour: self._dead_letter_table(letters) for hour, letters in dead.items()},
            tombstones=tombstones,
            dead_letter_causes=Counter(letter.cause for letters in dead.values() for letter in letters),
            records=len(records),
        )

    def _decode_value(self, record: KafkaRecord) -> tuple[_VersionDecoding, datetime, dict]:
        try:
            schema_id, payload = split_confluent(record.value)
        except FramingError as error:
            raise _DeadLetter(error.cause, str(error)) from None
        decoding = self._decoding_for(schema_id)
        buffer = io.BytesIO(payload)
        try:
            row = fastavro.schemaless_reader(buffer, decoding.reader_schema, None, return_named_type=True)
        except Exception as error:  # corrupt bytes make fastavro raise almost anything
            raise _DeadLetter(
                "undecodable_payload", f"{decoding.describe(schema_id)} does not decode: {type(error).__name__}: {error}"
            ) from None
        left = len(payload) - buffer.tell()
        if left:
            raise _DeadLetter(
                "undecodable_payload",
                f"{left} bytes left after the record of {decoding.describe(schema_id)}; "
                f"written with another schema than its id says, or corrupt",
            )
        return decoding, self._hour_of(record, row, decoding), row

    def _decoding_for(self, schema_id: int) -> _VersionDecoding:
        found = self._by_schema_id.get(schema_id)
        if found is None:
            version = self._schemas.version_for(schema_id)
            found = self._schemas.unknown_reason(schema_id) if version is None else self._version_decoding(version)
            self._by_schema_id[schema_id] = found
        if isinstance(found, str):
            raise _DeadLetter("unknown_schema_id", found)
        return found

    def _version_decoding(self, version: SchemaVersion) -> _VersionDecoding:
        if version.version not in self._by_version:
            mapping = arrow_mapping_for(version, self._topic.pii_fields, self._pseudonymize)
            self._by_version[version.version] = _VersionDecoding(version, mapping, version.parsed)
        return self._by_version[version.version]

    def _hour_of(self, record: KafkaRecord, row: dict, decoding: _VersionDecoding) -> datetime:
        path = self._topic.time_field
        if path is None:
            return hour_of_millis(record.timestamp_ms)
        value: Any = row
        for step in path:
            if type(value) is tuple:  # a nested record under a nullable union comes as (name, record)
                value = value[1]
            value = value.get(step) if isinstance(value, dict) else None
        field_path = ".".join(path)
        if value is None:
            detail = f"event-time field {field_path!r} is absent or null (version {decoding.version.version})"
            raise _DeadLetter("missing_event_time", detail)
        try:
            return floor_hour(parse_event_time(value))
        except ValueError as error:
            raise _DeadLetter("unparseable_event_time", f"event-time field {field_path!r}: {error}") from None

    def _rows_table(self, rows: _PlacedRows) -> tuple[pa.Table, list[_Rejected]]:
        """The rows' table, and the records whose values do not fit their columns (e.g. a decimal over its precision)."""
        mapping = rows.decoding.mapping
        try:
            return self._table(mapping, rows.records, rows.values), []
        except _UNFIT_FOR_ARROW:
            pass  # find the few records at fault, so the rest still land
        fitting = _PlacedRows(rows.decoding)
        rejected = []
        for record, value in zip(rows.records, rows.values):
            try:
                mapping.record_columns([value])
            except _UNFIT_FOR_ARROW as error:
                detail = f"version {rows.decoding.version.version} record does not fit its table columns: {error}"
                rejected.append(_Rejected(record, "undecodable_payload", f"undecodable_payload: {detail}"))
                continue
            fitting.records.append(record)
            fitting.values.append(value)
        return self._table(mapping, fitting.records, fitting.values), rejected

    def _table(self, mapping: ArrowMapping, records: list[KafkaRecord], values: list[dict]) -> pa.Table:
        return pa.Table.from_arrays(mapping.record_columns(values) + self._kafka_columns(records), schema=mapping.schema)

    def _dead_letter_table(self, letters: list[_Rejected]) -> pa.Table:
        letters.sort(key=lambda letter: (letter.record.partition, letter.record.offset))
        records = [letter.record for letter in letters]
        columns = [
            *self._kafka_columns(records),
            pa.array([record.value for record in records], pa.binary()),
            pa.array([letter.error for letter in letters], pa.string()),
        ]
        return pa.Table.from_arrays(columns, schema=DEAD_LETTER_SCHEMA)

    def _kafka_columns(self, records: list[KafkaRecord]) -> list[pa.Array]:
        return [
            pa.array([self._topic.topic] * len(records), pa.string()),
            pa.array([record.partition for record in records], pa.int32()),
            pa.array([record.offset for record in records], pa.int64()),
            pa.array([record.timestamp_ms for record in records], pa.timestamp("ms", tz="UTC")),
            pa.array([record.key for record in records], pa.binary()),
        ]


def _without_credentials(url: str) -> str:
    """The URL as safe to print: `https://user:secret@host` loses its user info."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
