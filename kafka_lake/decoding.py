"""Decoding a batch of one topic's Kafka records into Arrow tables, one per (schema version, hour): as columns
where a native reader is exactly right, record by record with fastavro where it is not.

Every record lands in exactly one place: a row, a dead letter (with its raw bytes and why), or a tombstone.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from operator import attrgetter
from typing import Any, Callable, Iterator, NamedTuple, Protocol, Sequence

import fastavro
import fastavro._read_py as fastavro_py_reader
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastavro.schema import to_parsing_canonical_form
from polars_avro._avro_rs import AvroSource

from kafka_lake.avro_arrow import (
    DEAD_LETTER_SCHEMA,
    KAFKA_HEADERS_TYPE,
    MAX_JSON_DEPTH,
    ArrowMapping,
    ColumnarMapping,
    NotColumnar,
    arrow_mapping_for,
    columnar_mapping_for,
)
from kafka_lake.catalog import DEFAULT_TIME_UNIT, TIME_UNITS, SchemaVersion, TopicSpec
from kafka_lake.framing import HEADER_SIZE, MAGIC_BYTE, FramingError, split_confluent
from kafka_lake.hours import KafkaHour, floor_hour, hour_of_millis
from kafka_lake.pii import ColumnPseudonymizer, pseudonymizer_for
from kafka_lake.settings import url_without_credentials

_SCHEMA_NOT_FOUND = 40403  # Confluent Schema Registry's error code for an unknown id
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))?"
)
# [0001-01-01, 10000-01-01) in seconds since the epoch: the years Parquet timestamps, Spark and a lake path hold.
_FIRST_S, _END_S = -62_135_596_800, 253_402_300_800
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Where a plain long that is out of range in its unit would be a time of the Unix era in another unit: a hint.
_PLAUSIBLE_S = (0, 4_102_444_800)  # [1970, 2100)
_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
# What Arrow raises for a decoded value its column cannot hold (a decimal beyond its precision, …).
_UNFIT_FOR_ARROW = (pa.ArrowException, ValueError, TypeError, OverflowError)


@dataclass(frozen=True)
class KafkaRecord:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None  # None: a tombstone
    headers: Sequence[tuple[str, bytes | None]] | None = None  # as confluent-kafka hands them: (key, value) pairs


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
        self._url = url_without_credentials(url)
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


def parse_event_time(value: Any, unit: str | None = None) -> datetime:
    """An event time as an aware UTC datetime in the years 0001..9999: from fastavro's timestamp, a plain long
    counting `unit`s since the epoch (milliseconds when None) or RFC 3339 text."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int) and not isinstance(value, bool):
        return _epoch_time(value, unit)
    elif isinstance(value, str):
        moment = _parse_rfc3339(value)
    else:
        raise ValueError(f"{type(value).__name__} {value!r} is not a timestamp, an epoch time or RFC 3339 text")
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()} has no time zone (a local timestamp cannot be placed in UTC)")
    return moment.astimezone(timezone.utc)


def _epoch_time(value: int, unit: str | None) -> datetime:
    per_second = TIME_UNITS[unit or DEFAULT_TIME_UNIT]
    if not _FIRST_S * per_second <= value < _END_S * per_second:
        raise ValueError(f"{value} epoch {_UNIT_NAMES[unit or DEFAULT_TIME_UNIT]} is outside the years 0001..9999"
                         + _unit_hint(value, unit))
    return _EPOCH + timedelta(microseconds=value * 1_000_000 // per_second)


def _unit_hint(value: int, unit: str | None) -> str:
    """What the value would be in another unit, where that is a time of the Unix era: the likely mistake."""
    for other, per_second in TIME_UNITS.items():
        if other != (unit or DEFAULT_TIME_UNIT) and _PLAUSIBLE_S[0] * per_second <= value < _PLAUSIBLE_S[1] * per_second:
            told = "set" if unit is None else f"is {unit}; set"
            return (f"; it looks like epoch {_UNIT_NAMES[other]}: time_partitioning.unit {told} `unit: {other}` in "
                    f"topic.yaml")
    return ""


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


_CLAIMED_LENGTH = re.compile(r"Expected (-?\d+) bytes, read (\d+)")
_ANOTHER_SCHEMA = "written with another schema than its id says, or corrupt"


def why_undecodable(error: Exception, position: int, size: int) -> str:
    """fastavro's exception for a payload as the cause a person reads: what is wrong with the bytes, and where.
    Its own texts are bare (`EOFError` with no message, `IndexError: string index out of range`)."""
    where = f"at byte {position} of the {size}-byte payload"
    text = str(error)
    if isinstance(error, RecursionError):
        return (f"a value nested deeper than the decoder follows, {where}: a recursive record lands at most "
                f"{MAX_JSON_DEPTH} levels deep; {_ANOTHER_SCHEMA}")
    if isinstance(error, IndexError) and text.startswith("list index"):
        return f"a union branch or enum symbol number beyond the schema's, {where}: {_ANOTHER_SCHEMA}"
    if isinstance(error, (EOFError, IndexError)):  # the reader ran out of bytes (mid-number: a string index)
        claimed = _CLAIMED_LENGTH.search(text)
        if claimed and int(claimed[1]) < 0:
            return f"a negative length ({claimed[1]} bytes) {where}: {_ANOTHER_SCHEMA}"
        if claimed:
            return f"a value claims {claimed[1]} bytes {where}, where {claimed[2]} remain: truncated, or {_ANOTHER_SCHEMA}"
        return f"the payload ends {where}, inside a value: truncated, or {_ANOTHER_SCHEMA}"
    if isinstance(error, UnicodeDecodeError):
        return f"a string that is not UTF-8, {where}: {_ANOTHER_SCHEMA}"
    if isinstance(error, MemoryError):
        return f"a length or count too large to hold, {where}: {_ANOTHER_SCHEMA}"
    if isinstance(error, (ValueError, OverflowError)):  # a date, time or uuid out of its logical type's range
        return f"a value its logical type cannot hold ({text or 'out of range'}), {where}: {_ANOTHER_SCHEMA}"
    return f"the bytes do not read as this schema ({text or 'no reason given'}), {where}"


def _reader_for(version: SchemaVersion) -> Callable[..., Any]:
    """fastavro's compiled reader, or for a schema whose record contains itself its pure-Python twin: the compiled one
    recurses in C without a limit, and a few kilobytes of payload nesting a record 5,000 times crash the process.
    The Python reader stops at the interpreter's recursion limit, which makes the record a dead letter."""
    return fastavro_py_reader.schemaless_reader if version.recursions else fastavro.schemaless_reader


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
class KafkaBatch:
    """A batch of one topic's records as columns, the way the log reader hands them over: no object per record."""

    partitions: Sequence[int]
    offsets: Sequence[int]
    timestamps_ms: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]  # None: a tombstone
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None  # None: no record has any

    @classmethod
    def of(cls, records: Sequence[KafkaRecord]) -> "KafkaBatch":
        ordered = sorted(records, key=attrgetter("partition", "offset"))
        return cls(
            [r.partition for r in ordered], [r.offset for r in ordered], [r.timestamp_ms for r in ordered],
            [r.key for r in ordered], [r.value for r in ordered], [r.headers for r in ordered],
        )

    def __len__(self) -> int:
        return len(self.offsets)

    def record(self, index: int) -> KafkaRecord:
        return KafkaRecord(self.partitions[index], self.offsets[index], self.timestamps_ms[index], self.keys[index],
                           self.values[index], self.headers[index] if self.headers is not None else None)

    def in_log_order(self) -> "KafkaBatch":
        partitions, offsets = np.asarray(self.partitions, dtype=np.int64), np.asarray(self.offsets, dtype=np.int64)
        if len(offsets) < 2 or bool(np.all((partitions[1:] > partitions[:-1]) | (
                (partitions[1:] == partitions[:-1]) & (offsets[1:] > offsets[:-1])))):
            return self
        return KafkaBatch.of([self.record(i) for i in range(len(self))])


@dataclass(frozen=True)
class _VersionDecoding:
    version: SchemaVersion
    mapping: ArrowMapping
    reader_schema: Any  # fastavro's parsed form, carrying its "already parsed" hint (no re-parse per record)
    read: Callable[..., Any]  # fastavro's schemaless reader for this version (see `_reader_for`)
    columnar: ColumnarMapping | None  # None: this version is decoded record by record with fastavro
    path: str  # "columnar", or "fastavro: <why>"
    container_header: bytes = b""

    def describe(self, schema_id: int) -> str:
        return f"schema id {schema_id} (version {self.version.version}, {self.version.file})"


@dataclass
class _PlacedRows:
    decoding: _VersionDecoding
    records: list[KafkaRecord] = field(default_factory=list)
    values: list[dict] = field(default_factory=list)


class BatchDecoder:
    """Decodes Confluent-framed Avro records of one topic; compile once, then `decode` batch after batch.

    Each schema version is decoded as columns where that is exactly right (the payloads of a batch spliced
    into one Avro block for a native reader) and record by record with fastavro where it is not; the choice
    is made per version from its schema, before any record (`decoding_paths`). A record the columnar path
    cannot vouch for (a broken payload, a value fastavro reads otherwise) takes the fastavro path alone.
    """

    def __init__(self, topic: TopicSpec, schemas: SchemaResolver, pii_key: bytes | None, columnar: bool = True,
                 kafka_hour: KafkaHour | None = None):
        self._topic = topic
        self._schemas = schemas
        # The Kafka hour being landed: where a dead letter goes whose Kafka timestamp names no hour (-1, year 10000).
        self._kafka_hour = kafka_hour
        pseudonymizer = pseudonymizer_for(topic, pii_key)
        self._pseudonymize = pseudonymizer.pseudonymize if pseudonymizer else None
        self._column_pseudonyms = ColumnPseudonymizer(pii_key) if pseudonymizer else None
        self._columnar = columnar
        self._by_schema_id: dict[int, _VersionDecoding | str] = {}  # a decoding, or why the id is unknown
        self._by_version: dict[int, _VersionDecoding] = {}

    @property
    def decoding_paths(self) -> dict[int, str]:
        """Per schema version met so far: "columnar", or "fastavro: <why not columnar>"."""
        return {number: decoding.path for number, decoding in sorted(self._by_version.items())}

    def decode(self, records: Sequence[KafkaRecord] | KafkaBatch) -> DecodedBatch:
        batch = (records if isinstance(records, KafkaBatch) else KafkaBatch.of(records)).in_log_order()
        values = pa.array(batch.values, pa.binary())
        framing = _Framing(values)
        kafka = _KafkaColumns(self._topic.topic, batch)
        placed: dict[Placement, list[pa.Table]] = defaultdict(list)
        by_record: list[int] = list(np.flatnonzero(framing.needs_record_path))
        for schema_id, indices in framing.by_schema_id():
            try:
                decoding = self._decoding_for(schema_id)
            except _DeadLetter:
                by_record.extend(indices)
                continue
            if decoding.columnar is None:
                by_record.extend(indices)
                continue
            by_record.extend(self._decode_columns(decoding, framing, indices, batch, kafka, placed))

        dead: dict[datetime, list[_Rejected]] = defaultdict(list)
        self._decode_records(batch, sorted(by_record), placed, dead)
        return DecodedBatch(
            rows={placement: _in_log_order(tables) for placement, tables in placed.items()},
            dead_letters={hour: self._dead_letter_table(letters) for hour, letters in dead.items()},
            tombstones=framing.tombstones,
            dead_letter_causes=Counter(letter.cause for letters in dead.values() for letter in letters),
            records=len(batch),
        )

    # --- the columnar path -------------------------------------------------------------------------------

    def _decode_columns(self, decoding: _VersionDecoding, framing: "_Framing", indices: np.ndarray,
                        batch: KafkaBatch, kafka: "_KafkaColumns", placed: dict) -> list[int]:
        """Lands what the columnar path vouches for; returns the records left for the fastavro path."""
        columnar = decoding.columnar
        left: list[int] = []
        block = _SplicedPayloads(framing, indices)
        for part, decoded, starts, lengths in _decode_block_isolating(decoding.container_header, columnar, block, left):
            hours, unplaced = self._hours_of_columns(decoded, part, batch, decoding)
            refused = columnar.misfits(decoded) | unplaced
            misread = columnar.misread_branches(decoded, block.data, starts, lengths)
            keep = ~(refused if misread is None else refused | misread)
            if not keep.all():
                left.extend(part[~keep])
                part, hours = part[keep], hours[keep]
                decoded = decoded.filter(pa.array(keep))
            if not len(part):
                continue
            try:
                columns = columnar.record_columns(decoded) + kafka.take(part)
                table = pa.Table.from_arrays(columns, schema=decoding.mapping.schema)
            except _UNFIT_FOR_ARROW:  # not expected: the fastavro path then decides, record by record
                left.extend(part)
                continue
            for hour, rows in _split_by_hour(table, hours):
                placed[Placement(decoding.version.version, hour)].append(rows)
        return left

    def _hours_of_columns(self, decoded: pa.RecordBatch, part: np.ndarray, batch: KafkaBatch,
                          decoding: _VersionDecoding) -> tuple[np.ndarray, np.ndarray]:
        """(epoch hour per row, rows the fastavro path must place: a missing or unplaceable event time)."""
        path = self._topic.time_field
        if path is None:
            timestamps = np.asarray(batch.timestamps_ms, dtype=np.int64)[part]
            return timestamps // _HOUR_MS, ~_placeable(timestamps)  # the rest: fastavro's path says why
        column = decoded.column(path[0])
        present = _present(column)
        for step in path[1:]:
            column = column.field(step)
            present &= _present(column)
        kind = column.type
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            # Only years 0001..9999 reach here: the columnar nodes leave the rest to fastavro (a misfit).
            ticks = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column) + column.offset)[column.offset:]
            return ticks // (3600 * TIME_UNITS[kind.unit]), ~present
        if pa.types.is_int64(kind):  # a plain long counting the topic's unit since the epoch
            ticks = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column) + column.offset)[column.offset:]
            per_second = TIME_UNITS[self._topic.time_unit or DEFAULT_TIME_UNIT]
            in_years = ticks >= max(_FIRST_S * per_second, _INT64_MIN)
            if _END_S * per_second <= _INT64_MAX:  # nanoseconds reach only 1677..2262: every value is in range
                in_years &= ticks < _END_S * per_second
            return ticks // (3600 * per_second), ~present | ~in_years
        if pa.types.is_string(kind):
            return _hours_of_rfc3339(column, present)
        return np.zeros(len(part), dtype=np.int64), np.ones(len(part), dtype=bool)  # local timestamps: fastavro says why

    # --- the fastavro path, record by record ---------------------------------------------------------------

    def _decode_records(self, batch: KafkaBatch, indices: list[int], placed: dict, dead: dict) -> None:
        rows_by_placement: dict[Placement, _PlacedRows] = {}
        for index in indices:
            record = batch.record(index)
            if record.value is None:
                continue  # a tombstone, counted by the framing
            try:
                decoding, hour, row = self._decode_value(record)
            except _DeadLetter as dead_letter:
                dead[self._dead_letter_hour(record)].append(_Rejected(record, dead_letter.cause, str(dead_letter)))
                continue
            key = Placement(decoding.version.version, hour)
            rows_here = rows_by_placement.get(key)
            if rows_here is None:
                rows_here = rows_by_placement[key] = _PlacedRows(decoding)
            rows_here.records.append(record)
            rows_here.values.append(row)
        for placement, rows_here in rows_by_placement.items():
            table, rejected = self._rows_table(rows_here)
            if table.num_rows:
                placed[placement].append(table)
            for letter in rejected:
                dead[self._dead_letter_hour(letter.record)].append(letter)

    def _decode_value(self, record: KafkaRecord) -> tuple[_VersionDecoding, datetime, dict]:
        try:
            schema_id, payload = split_confluent(record.value)
        except FramingError as error:
            raise _DeadLetter(error.cause, str(error)) from None
        decoding = self._decoding_for(schema_id)
        buffer = io.BytesIO(payload)
        try:
            row = decoding.read(buffer, decoding.reader_schema, None, return_named_type=True)
        except Exception as error:  # corrupt bytes make fastavro raise almost anything
            why = why_undecodable(error, buffer.tell(), len(payload))
            raise _DeadLetter("undecodable_payload", f"{decoding.describe(schema_id)} does not decode: {why}") from None
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
            rename = self._topic.columns_by_field
            mapping = arrow_mapping_for(version, self._topic.pii_fields, self._pseudonymize, rename)
            columnar, path, header = None, "fastavro: columnar decoding is switched off", b""
            if self._columnar:
                try:
                    columnar = columnar_mapping_for(version, self._topic.pii_fields, self._column_pseudonyms, rename)
                    path, header = "columnar", _container_header(columnar.block_schema)
                except NotColumnar as reason:
                    path = f"fastavro: {reason}"
            self._by_version[version.version] = _VersionDecoding(
                version, mapping, version.parsed, _reader_for(version), columnar, path, header
            )
        return self._by_version[version.version]

    def _dead_letter_hour(self, record: KafkaRecord) -> datetime:
        """Dead letters are placed by Kafka time; one whose Kafka timestamp names no hour, in the Kafka hour landed."""
        if _placeable(record.timestamp_ms):
            return hour_of_millis(record.timestamp_ms)
        if self._kafka_hour is None:
            raise ValueError(f"{self._topic.topic} partition {record.partition} offset {record.offset}: a Kafka timestamp "
                             f"that names no hour needs the Kafka hour being landed (BatchDecoder's kafka_hour)")
        return self._kafka_hour.start

    def _hour_of(self, record: KafkaRecord, row: dict, decoding: _VersionDecoding) -> datetime:
        path = self._topic.time_field
        if path is None:
            if not _placeable(record.timestamp_ms):
                raise _DeadLetter("unplaceable_kafka_timestamp", _unplaceable_kafka_timestamp(record.timestamp_ms))
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
            return floor_hour(parse_event_time(value, self._topic.time_unit))
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
            kafka_timestamps([record.timestamp_ms for record in records]),
            pa.array([record.key for record in records], pa.binary()),
            kafka_headers([record.headers for record in records], len(records)),
        ]


# --- columnar building blocks --------------------------------------------------------------------------------

_HOUR_MS = 3_600_000
_SYNC_MARKER = b"kafka-lake-block"  # any 16 bytes: the block is ours and read once
_SMALLEST_SPLIT = 8  # below this many records, isolating a broken one costs more than fastavro does
_LONGEST_VALUE = 2**31 - 1  # a binary array's 32-bit offsets hold no longer one


class _Framing:
    """The Confluent header of every value of a batch, read as columns: which schema id, or the record path."""

    def __init__(self, values: pa.BinaryArray):
        self.values = values
        self.offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=len(values) + 1).astype(np.int64)
        data = values.buffers()[2]
        self.data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        present = _present(values)
        self.tombstones = int(len(values) - present.sum())
        starts, sizes = self.offsets[:-1], np.diff(self.offsets)
        framed = present & (sizes >= HEADER_SIZE)
        header = np.where(framed, starts, 0)
        if len(self.data):
            magic = self.data[np.minimum(header, len(self.data) - 1)]
            framed &= magic == MAGIC_BYTE
            ids = np.zeros(len(values), dtype=np.int64)
            for position in range(1, HEADER_SIZE):
                ids = (ids << 8) | self.data[np.minimum(header + position, len(self.data) - 1)]
        else:
            framed &= False
            ids = np.zeros(len(values), dtype=np.int64)
        self.schema_ids = np.where(framed, ids, -1)
        self.needs_record_path = present & ~framed  # wrong magic byte or too short: the record path says why

    def by_schema_id(self) -> list[tuple[int, np.ndarray]]:
        found = np.unique(self.schema_ids[self.schema_ids >= 0])
        return [(int(schema_id), np.flatnonzero(self.schema_ids == schema_id)) for schema_id in found]


class _SplicedPayloads:
    """The Avro payloads (values less their 5-byte header) of some records, back to back, and where each starts."""

    def __init__(self, framing: _Framing, indices: np.ndarray):
        self.indices = indices
        values = framing.values if len(indices) == len(framing.values) else framing.values.take(pa.array(indices))
        payloads = pc.binary_slice(values, HEADER_SIZE, _LONGEST_VALUE)  # one copy, end to end
        offsets = np.frombuffer(payloads.buffers()[1], dtype=np.int32, count=payloads.offset + len(payloads) + 1)
        offsets = offsets[payloads.offset:].astype(np.int64)
        data = payloads.buffers()[2]
        data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        self.starts = offsets - offsets[0]
        self.data = data[offsets[0]:offsets[-1]]
        self.payload = self.data.tobytes()

    def sizes(self, first: int, stop: int) -> np.ndarray:
        return np.diff(self.starts[first:stop + 1])

    def block(self, first: int, stop: int) -> bytes:
        """An Avro container block holding records [first, stop)."""
        data = memoryview(self.payload)[self.starts[first]:self.starts[stop]]
        return b"".join((_zigzag(stop - first), _zigzag(len(data)), data, _SYNC_MARKER))


def _decode_block_isolating(
    header: bytes, columnar: ColumnarMapping, payloads: _SplicedPayloads, left: list[int]
) -> Iterator[tuple[np.ndarray, pa.RecordBatch, np.ndarray, list[np.ndarray]]]:
    """Decodes the payloads as spliced blocks, yielding (record indices, decoded rows, where each record's bytes
    start, each field's encoded lengths) for the stretches that decode exactly; a broken record is cut out
    (bisecting around it) and left for the fastavro path with its neighbours that cannot be told apart from it."""
    stretches = [(0, len(payloads.indices))]
    while stretches:
        first, stop = stretches.pop()
        if first >= stop:
            continue
        decoded = _read_block(header, payloads.block(first, stop), stop - first)
        suspect = None
        if decoded is not None:
            lengths = columnar.field_lengths(decoded)
            mismatched = np.flatnonzero(sum(lengths, np.zeros(stop - first, dtype=np.int64)) != payloads.sizes(first, stop))
            if not len(mismatched):
                yield payloads.indices[first:stop], decoded, payloads.starts[first:stop], lengths
                continue
            suspect = first + int(mismatched[0])
        if stop - first <= _SMALLEST_SPLIT:
            left.extend(payloads.indices[first:stop])
        elif suspect is not None:
            # The first record whose length disagrees is the likeliest culprit; its neighbours are re-read alone.
            left.append(payloads.indices[suspect])
            stretches += [(suspect + 1, stop), (first, suspect)]
        else:
            middle = (first + stop) // 2
            stretches += [(middle, stop), (first, middle)]


def _read_block(header: bytes, block: bytes, count: int) -> pa.RecordBatch | None:
    """The block's records decoded by the native reader, or None when it refuses them.

    Exactly one batch of exactly `count` rows is asked for: the reader loops forever on bytes left over after
    a block's last record, so it is never asked for a second batch.
    """
    container = header + block
    try:
        source = AvroSource([lambda: contextlib.nullcontext(io.BytesIO(container))], False, False)
        decoded = pa.record_batch(next(source.batch_iter(count, None)))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # the reader's errors, Rust panics (a BaseException), a StopIteration on an empty block
        return None
    return decoded if decoded.num_rows == count else None


def _container_header(block_schema: dict) -> bytes:
    """An Avro object container file header declaring `block_schema`, uncompressed, with our sync marker."""
    metadata = {b"avro.schema": json.dumps(block_schema).encode(), b"avro.codec": b"null"}
    entries = b"".join(_zigzag(len(k)) + k + _zigzag(len(v)) + v for k, v in metadata.items())
    return b"Obj\x01" + _zigzag(len(metadata)) + entries + _zigzag(0) + _SYNC_MARKER


def _zigzag(value: int) -> bytes:
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def kafka_timestamps(timestamps_ms: Sequence[int]) -> pa.Array:
    """The `_kafka_timestamp` column: null where the Kafka timestamp names no time a timestamp column holds (-1 for
    none, another negative, the year 10000 or later)."""
    millis = np.asarray(timestamps_ms, dtype=np.int64)
    placeable = _placeable(millis)
    return pa.array(millis, pa.int64(), mask=None if placeable.all() else ~placeable).view(pa.timestamp("ms", tz="UTC"))


def kafka_headers(headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None, count: int) -> pa.Array:
    """The `_kafka_headers` column: each record's (key, value) pairs in order, null when it has none."""
    if headers is None or not any(headers):
        return pa.nulls(count, KAFKA_HEADERS_TYPE)
    return pa.array([pairs or None for pairs in headers], KAFKA_HEADERS_TYPE)


def _placeable(timestamps_ms):
    """Whether a Kafka timestamp (or each of an array) places a record in an hour: [1970, 10000). Kafka itself
    refuses negative timestamps but -1, its "none"; producers' clocks and clients can still send anything."""
    return (timestamps_ms >= 0) & (timestamps_ms < _END_S * 1000)


def _unplaceable_kafka_timestamp(timestamp_ms: int) -> str:
    what = "-1, Kafka's \"no timestamp\"" if timestamp_ms == -1 else (
        "negative, which Kafka refuses" if timestamp_ms < 0 else "in the year 10000 or later")
    return (f"Kafka timestamp {timestamp_ms} ({what}) places the record in no hour of this Kafka-time topic; it is kept "
            f"in the Kafka hour that was landed, the one whose offsets hold it")


class _KafkaColumns:
    """The Kafka columns of a batch, built once, from which each table takes its rows."""

    def __init__(self, topic: str, batch: KafkaBatch):
        self._topic = topic
        self._columns = [
            pa.array(batch.partitions, pa.int32()),
            pa.array(batch.offsets, pa.int64()),
            kafka_timestamps(batch.timestamps_ms),
            pa.array(batch.keys, pa.binary()),
            kafka_headers(batch.headers, len(batch)),
        ]

    def take(self, indices: np.ndarray) -> list[pa.Array]:
        picks = pa.array(indices, pa.int64())
        return [pa.repeat(pa.scalar(self._topic, pa.string()), len(indices)), *(column.take(picks) for column in self._columns)]


def _present(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    return np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


# The RFC 3339 texts the columns place themselves: ASCII digits, a fixed-width date and time, an optional fraction
# and a zone. Whatever else `_RFC3339` admits (other digits, odd fields) is left to `parse_event_time`, record by record.
_DAY_MINUTES = 24 * 60
_PLAIN_RFC3339 = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"


def _hours_of_rfc3339(column: pa.Array, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(epoch hour per row, rows left to `parse_event_time`): the hour `parse_event_time` gives, computed as columns
    for the texts whose fields are all in range, and for years 0002..9998, where no zone offset can take the UTC
    time out of 0001..9999. The rest (an impossible date, a leap second, an offset of 24 hours or more, any other
    form) is left to the record path, which places it or says why it cannot."""
    plain = pc.fill_null(pc.match_substring_regex(column, _PLAIN_RFC3339), False).to_numpy(zero_copy_only=False)
    plain &= present
    texts = column.filter(pa.array(plain))

    year, month, day = _number_at(texts, 0, 4), _number_at(texts, 5, 7), _number_at(texts, 8, 10)
    hour, minute, second = _number_at(texts, 11, 13), _number_at(texts, 14, 16), _number_at(texts, 17, 19)
    utc = pc.match_substring_regex(texts, "[Zz]$").to_numpy(zero_copy_only=False)
    zone = pc.if_else(pa.array(utc), pa.scalar("+00:00"), pc.utf8_slice_codeunits(texts, -6))
    zone_sign = np.where(pc.starts_with(zone, "-").to_numpy(zero_copy_only=False), -1, 1)
    zone_minutes = _number_at(zone, 1, 3) * 60 + _number_at(zone, 4, 6)

    months = ((year - 1970) * 12 + month - 1).astype("datetime64[M]")
    first_day = months.astype("datetime64[D]")
    month_days = ((months + 1).astype("datetime64[D]") - first_day).astype(np.int64)
    in_range = ((year >= 2) & (year <= 9998) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= month_days)
                & (hour <= 23) & (minute <= 59) & (second <= 59) & (zone_minutes < _DAY_MINUTES))
    local_minutes = (first_day.astype(np.int64) + day - 1) * _DAY_MINUTES + hour * 60 + minute
    utc_hours = (local_minutes - zone_sign * zone_minutes) // 60

    hours = np.zeros(len(column), dtype=np.int64)
    placed = np.flatnonzero(plain)[in_range]
    hours[placed] = utc_hours[in_range]
    unplaced = np.ones(len(column), dtype=bool)
    unplaced[placed] = False
    return hours, unplaced


def _number_at(texts: pa.Array, start: int, stop: int) -> np.ndarray:
    """The digits at [start, stop) of each text, as a number."""
    return pc.cast(pc.utf8_slice_codeunits(texts, start, stop), pa.int64()).to_numpy()


def _split_by_hour(table: pa.Table, hours: np.ndarray) -> Iterator[tuple[datetime, pa.Table]]:
    distinct = np.unique(hours)
    for hour in distinct:
        rows = table if len(distinct) == 1 else table.filter(pa.array(hours == hour))
        yield _EPOCH + timedelta(hours=int(hour)), rows


def _in_log_order(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables).sort_by([("_kafka_partition", "ascending"), ("_kafka_offset", "ascending")])
