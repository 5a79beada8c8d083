"""The record path: one record at a time with fastavro, for the schema versions and the records the columnar path
cannot vouch for; whatever is wrong with a record's bytes becomes its dead letter's cause.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import fastavro
import fastavro._read_py as fastavro_py_reader
import pyarrow as pa

from kafka_lake.decoding.decoded_batch import Placement, Rejected, Undecodable
from kafka_lake.decoding.placement import TimePlacement
from kafka_lake.kafka.records import KafkaBatch, KafkaRecord, kafka_columns
from kafka_lake.schemas.arrow_mapping import MAX_JSON_DEPTH, UNFIT_FOR_ARROW, ArrowMapping
from kafka_lake.table_spec import SchemaVersion

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
    if isinstance(error, (ValueError, OverflowError)):  # a date, time, decimal or uuid its logical type cannot hold
        # The bytes read as the schema says: the value is the producer's, no sign of another schema or corruption.
        return f"a value its logical type cannot hold ({text or 'out of range'}), {where}"
    return f"the bytes do not read as this schema ({text or 'no reason given'}), {where}"


def _bounded_decimal(read_decimal: Callable[..., Any]) -> Callable[..., Any]:
    """fastavro's decimal reader, refusing before any work an unscaled value of more significant bytes than its
    precision's digits take: turning a number into a decimal takes time growing with the square of its length (a
    decimal(10,2) holding 100 KB of bytes took 4 s, 1 MB would take minutes), and such a value fits no column."""

    def read(data: bytes, writer_schema: dict, reader_schema: Any = None) -> Any:
        precision = writer_schema["precision"]
        significant = len(data.lstrip(b"\xff" if data[:1] >= b"\x80" else b"\x00"))  # without the sign's own bytes
        if significant > (precision * 3322 // 1000 + 8) // 8 + 1:  # log2(10) < 3.322 bits a digit
            raise ValueError(f"a decimal({precision},{writer_schema.get('scale', 0)}) of {len(data)} bytes, more digits "
                             f"than its precision")
        return read_decimal(data, writer_schema, reader_schema)

    return read


# fastavro's documented way to read a logical type otherwise; one table serves its compiled and its Python reader.
for _logical in ("bytes-decimal", "fixed-decimal"):
    fastavro.read.LOGICAL_READERS[_logical] = _bounded_decimal(fastavro.read.LOGICAL_READERS[_logical])


def _reader_for(version: SchemaVersion) -> Callable[..., Any]:
    """fastavro's compiled reader, or for a schema whose record contains itself its pure-Python twin: the compiled one
    recurses in C without a limit, and a few kilobytes of payload nesting a record 5,000 times crash the process.
    The Python reader stops at the interpreter's recursion limit, which makes the record a dead letter."""
    return fastavro_py_reader.schemaless_reader if version.recursions else fastavro.schemaless_reader


class AvroRecords:
    """The record path of one schema version: fastavro's reader of its payloads."""

    def __init__(self, version: SchemaVersion):
        self._version = version
        self._read = _reader_for(version)

    def describe(self, schema_id: int | None) -> str:
        return f"schema id {schema_id} (version {self._version.version}, {self._version.file})"

    def read(self, payload: memoryview, schema_id: int | None) -> dict:
        """The payload's value as fastavro decodes it (named types tagged); raises `Undecodable` saying why not."""
        buffer = io.BytesIO(payload)
        try:
            # The parsed schema carries fastavro's "already parsed" hint: no re-parse per record.
            value = self._read(buffer, self._version.parsed, None, return_named_type=True)
        except Exception as error:  # corrupt bytes make fastavro raise almost anything
            why = why_undecodable(error, buffer.tell(), len(payload))
            raise Undecodable("undecodable_payload", f"{self.describe(schema_id)} does not decode: {why}") from None
        left = len(payload) - buffer.tell()
        if left:
            raise Undecodable(
                "undecodable_payload",
                f"{left} bytes left after the record of {self.describe(schema_id)}; "
                f"written with another schema than its id says, or corrupt",
            )
        return value


class DecodedValue(NamedTuple):
    """One record's value decoded, with the schema version it was written with and that version's mapping."""

    version: int
    mapping: ArrowMapping
    value: dict


# One record's value → its decoded value; raises `Undecodable` saying why not.
ReadValue = Callable[[bytes], DecodedValue]


@dataclass
class _PlacedValues:
    mapping: ArrowMapping
    records: list[KafkaRecord] = field(default_factory=list)
    values: list[dict] = field(default_factory=list)


def decode_records(topic: str, batch: KafkaBatch, indices: list[int], read_value: ReadValue, placement: TimePlacement,
                   placed: dict[Placement, list[pa.Table]], dead: dict[datetime, list[Rejected]]) -> None:
    """Decodes the batch's records at `indices` one by one into `placed` rows and `dead` letters (tombstones skipped)."""
    by_placement: dict[Placement, _PlacedValues] = {}
    for index in indices:
        record = batch.record(index)
        if record.value is None:
            continue  # a tombstone, counted by the framing
        try:
            decoded = read_value(record.value)
            hour = placement.hour_of_value(record, decoded.value, decoded.version)
        except Undecodable as why:
            dead[placement.dead_letter_hour(record)].append(Rejected.of(record, why))
            continue
        key = Placement(decoded.version, hour)
        values_here = by_placement.get(key)
        if values_here is None:
            values_here = by_placement[key] = _PlacedValues(decoded.mapping)
        values_here.records.append(record)
        values_here.values.append(decoded.value)
    for key, values_here in by_placement.items():
        table, rejected = _rows_table(topic, key.schema_version, values_here)
        if table.num_rows:
            placed[key].append(table)
        for letter in rejected:
            dead[placement.dead_letter_hour(letter.record)].append(letter)


def _rows_table(topic: str, version: int, rows: _PlacedValues) -> tuple[pa.Table, list[Rejected]]:
    """The rows' table, and the records whose values do not fit their columns (e.g. a decimal over its precision)."""
    mapping = rows.mapping
    try:
        return _table(topic, mapping, rows.records, rows.values), []
    except UNFIT_FOR_ARROW:
        pass  # find the few records at fault, so the rest still land
    fitting = _PlacedValues(mapping)
    rejected = []
    for record, value in zip(rows.records, rows.values):
        try:
            mapping.record_columns([value])
        except UNFIT_FOR_ARROW as error:
            detail = f"version {version} record does not fit its table columns: {error}"
            rejected.append(Rejected(record, "undecodable_payload", f"undecodable_payload: {detail}"))
            continue
        fitting.records.append(record)
        fitting.values.append(value)
    return _table(topic, mapping, fitting.records, fitting.values), rejected


def _table(topic: str, mapping: ArrowMapping, records: list[KafkaRecord], values: list[dict]) -> pa.Table:
    return pa.Table.from_arrays(mapping.record_columns(values) + kafka_columns(topic, records), schema=mapping.schema)
