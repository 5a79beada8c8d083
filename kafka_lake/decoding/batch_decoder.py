"""Decoding a batch of one topic's Kafka records into Arrow tables, one per (schema version, hour): `BatchDecoder`,
the one entry point, sends each schema version's records down its decode paths and gathers what they give.
"""


from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa

from kafka_lake.decoding.avro.columnar_mapping import NotColumnar
from kafka_lake.decoding.avro.records import DecodedValue, decode_records
from kafka_lake.decoding.decoded_batch import DecodedBatch, Placement, Rejected, Undecodable, dead_letter_table
from kafka_lake.decoding.formats import payload_format
from kafka_lake.decoding.key_columns import EveryIdIsTheKey, KeyColumns, trailing_columns
from kafka_lake.decoding.payload_format import ColumnarInputs, ColumnarPath, RecordPath
from kafka_lake.decoding.pii import ColumnPseudonymizer, pseudonymizer_for
from kafka_lake.decoding.placement import HOUR_MS, TimePlacement, place_by_hour
from kafka_lake.decoding.routing import TopicRouter
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.framing import FramedValues, FramingError, schema_id_of
from kafka_lake.kafka.records import BatchPositions, KafkaBatch, KafkaColumns, KafkaRecord, names_an_hour
from kafka_lake.kafka.schema_resolution import SchemaResolver
from kafka_lake.schemas.arrow_mapping import RAW_MAPPING, RAW_SCHEMA_VERSION, ArrowMapping, arrow_mapping_for
from kafka_lake.schemas.landed_schema import LandedSchema
from kafka_lake.table_spec import SchemaVersion, TableSpec


@dataclass(frozen=True)
class VersionDecoding:
    """One schema version's decode paths, chosen from its schema before any record.

    A decode path is anything with the shape of `RecordPath` or `ColumnarPath`: each payload format brings its own
    paths for the same `ArrowMapping` (`payload_format.PayloadFormat`, chosen from the table's `format:` in `formats`).
    """

    version: SchemaVersion
    mapping: ArrowMapping  # the version's table, and the converters of the record path's values
    records: RecordPath
    columns: ColumnarPath | None  # None: this version is decoded record by record only
    path: str  # "columnar", or "fastavro: <why not columnar>"


class BatchDecoder:
    """Decodes the records of one table of a topic, in its format; compile once, then `decode` batch after batch.

    Each schema version is decoded as columns where that is exactly right (Avro: the payloads of a batch spliced
    into one Avro block for a native reader; JSON: the batch's objects read by pyarrow's JSON reader) and record
    by record where it is not (fastavro; Python's JSON parser); the choice is made per version from its schema,
    before any record (`decoding_paths`). A record the columnar path cannot vouch for (a broken payload, a value
    the record path reads otherwise) takes the record path alone. A plain JSON value (no Confluent header) is
    read with the newest schema version.
    """

    def __init__(self, topic: TableSpec, schemas: SchemaResolver, pii_key: bytes | None, columnar: bool = True,
                 kafka_hour: KafkaHour | None = None):
        self._topic = topic
        self._format = payload_format(topic)
        self._schemas = schemas
        self._placement = TimePlacement(topic, kafka_hour)
        pseudonymizer = pseudonymizer_for(topic, pii_key)
        self._pseudonymize = pseudonymizer.pseudonymize if pseudonymizer else None
        self._column_pseudonyms = ColumnPseudonymizer(pii_key) if pseudonymizer and pii_key else None
        self._columnar = columnar
        self._by_schema_id: dict[int | None, VersionDecoding | str] = {}  # a decoding, or why the id is unknown
        self._by_version: dict[int, VersionDecoding] = {}
        self._landed_schema: LandedSchema | None = None  # made when rows first land
        self._router = None
        if topic.route is not None:
            # An Avro field's route values are read from the values decoded as columns, before any table's own
            # decoding: by a decoder of the values alone, whose placement cannot fail.
            routing = BatchDecoder(values_alone(topic, topic.schema_versions), schemas, None, columnar)
            self._router = TopicRouter(topic, schemas.version_for,
                                       lambda batch: routing.decode(_untimed(batch, batch.values)))
        self._trailing = trailing_columns(topic)
        self._keys = None
        if topic.key_schema is not None:
            self._keys = BatchDecoder(values_alone(topic, (topic.key_schema,)), EveryIdIsTheKey(topic.key_schema), None,
                                      columnar)

    @property
    def decoding_paths(self) -> dict[int, str]:
        """Per schema version met so far: "columnar", or "fastavro: <why not columnar>"."""
        return {number: decoding.path for number, decoding in sorted(self._by_version.items())}

    def decode(self, records: Sequence[KafkaRecord] | KafkaBatch) -> DecodedBatch:
        """Every record lands in exactly one place: a row, a dead letter (with its raw bytes and why), or a
        tombstone."""
        batch = (records if isinstance(records, KafkaBatch) else KafkaBatch.of(records)).in_log_order()
        if not self._format.has_schemas:
            return self._decode_raw(batch)
        framed = self._format.framed(pa.array(batch.values, pa.binary()))
        if self._router is None:
            return self._decode_framed(batch, framed)
        routing = self._router.route(batch, framed)
        if len(routing.mine) == len(batch):
            decoded = self._decode_framed(batch, framed)
        else:
            mine = batch.take(routing.mine.tolist())
            decoded = self._decode_framed(mine, self._format.framed(pa.array(mine.values, pa.binary())))
        unrouted: dict[datetime, list[Rejected]] = defaultdict(list)
        for index, why in routing.unrouted:
            record = batch.record(index)
            unrouted[self._placement.dead_letter_hour(record)].append(Rejected(record, "unrouted", f"unrouted: {why}"))
        decoded.records = len(batch)
        decoded.routed_away = routing.routed_away
        decoded.unrouted = {hour: dead_letter_table(self._topic.topic, letters) for hour, letters in unrouted.items()}
        return decoded

    def _decode_framed(self, batch: KafkaBatch, framed: FramedValues) -> DecodedBatch:
        records = len(batch)
        dead: dict[datetime, list[Rejected]] = defaultdict(list)
        keys = None
        if self._keys is not None:
            keys, bad_keys = self._decoded_keys(batch)
            for index, error in bad_keys:
                record = batch.record(index)
                dead[self._placement.dead_letter_hour(record)].append(Rejected(record, "undecodable_key", error))
            if bad_keys:
                batch = batch.take(sorted(set(range(len(batch))) - {index for index, _ in bad_keys}))
                framed = self._format.framed(pa.array(batch.values, pa.binary()))
        kafka = KafkaColumns(self._topic.topic, batch)
        placed: dict[Placement, list[pa.Table]] = defaultdict(list)
        by_record: list[int] = list(np.flatnonzero(framed.needs_record_path))
        for schema_id, indices in framed.by_schema_id():
            try:
                decoding = self._decoding_for(schema_id)
            except Undecodable:
                by_record.extend(indices)
                continue
            if decoding.columns is None:
                by_record.extend(indices)
                continue
            by_record.extend(decoding.columns.decode(framed, indices, batch, kafka, placed))

        self._decode_records(batch, sorted(by_record), placed, dead)
        tombstones = framed.tombstones
        if self._topic.keep_tombstones:
            self._place_tombstones(batch, framed.present, kafka, placed, dead)
            tombstones = 0
        return self._gathered(batch, framed.present, placed, dead, tombstones, keys, records)

    def _decoded_keys(self, batch: KafkaBatch) -> tuple[pa.Table | None, list[tuple[int, str]]]:
        """(the key decoder's rows, (position, error) of each record whose key does not decode). The keys go through
        the topic's own decode paths as the values of a topic of their own; their time plays no part."""
        assert self._keys is not None
        decoded = self._keys.decode(_untimed(batch, batch.keys))
        keys = pa.concat_tables(decoded.rows.values()) if decoded.rows else None
        bad: list[tuple[int, str]] = []
        file = self._topic.key_schema.file if self._topic.key_schema is not None else ""
        positions = BatchPositions(batch)
        for letters in decoded.dead_letters.values():
            for position, error in zip(positions.of(letters), letters.column("error").to_pylist()):
                bad.append((int(position), f"undecodable_key: the key does not read as {file}: {error}"))
        return keys, bad

    def _place_tombstones(self, batch: KafkaBatch, present: np.ndarray, kafka: KafkaColumns,
                          placed: dict[Placement, list[pa.Table]], dead: dict[datetime, list[Rejected]]) -> None:
        """A topic that keeps its tombstones (the records not `present`) lands each as a row by its Kafka time, in the
        newest schema version's partition, every value column null (`_kafka_tombstone` says which rows they are); one
        whose Kafka timestamp names no hour is a dead letter."""
        timestamps = np.asarray(batch.timestamps_ms, dtype=np.int64)
        tombstone = ~present
        placeable = names_an_hour(timestamps)
        for index in np.flatnonzero(tombstone & ~placeable):
            record = batch.record(int(index))
            why = (f"unplaceable_kafka_timestamp: a tombstone stamped {record.timestamp_ms}, which names no hour; kept "
                   f"in the Kafka hour that was landed, the one whose offsets hold it")
            dead[self._placement.dead_letter_hour(record)].append(Rejected(record, "unplaceable_kafka_timestamp", why))
        rows = np.flatnonzero(tombstone & placeable)
        if not len(rows):
            return
        if not self._format.has_schemas:
            mapping, version = RAW_MAPPING, RAW_SCHEMA_VERSION
        else:
            version = self._topic.schema_versions[-1].version
            mapping = self._version_decoding(self._topic.schema_versions[-1]).mapping
        nulls = [pa.nulls(len(rows), column.type) for column in list(mapping.schema)[: len(mapping.field_names)]]
        table = pa.Table.from_arrays([*nulls, *kafka.take(rows)], schema=mapping.schema)
        place_by_hour(placed, version, table, timestamps[rows] // HOUR_MS)

    def _gathered(self, batch: KafkaBatch, present: np.ndarray, placed: dict[Placement, list[pa.Table]],
                  dead: dict[datetime, list[Rejected]], tombstones: int, keys: pa.Table | None = None,
                  records: int | None = None) -> DecodedBatch:
        """`present`: whether each record of the batch has a value (False: a tombstone). Rows of every schema version
        land in the table's columns (`landed_schema`)."""
        rows = {placement: self._landed(placement, _in_log_order(tables)) for placement, tables in placed.items()}
        if self._trailing and rows:
            trailing = KeyColumns.of(self._topic, self._trailing, batch, keys, present)
            rows = {placement: trailing.appended_to(table) for placement, table in rows.items()}
        return DecodedBatch(
            rows=rows,
            dead_letters={hour: dead_letter_table(self._topic.topic, letters) for hour, letters in dead.items()},
            tombstones=tombstones,
            dead_letter_causes=Counter(letter.cause for letters in dead.values() for letter in letters),
            records=len(batch) if records is None else records,
            unknown_schema_ids=Counter(schema_id_of(letter.record.value) for letters in dead.values() for letter in letters
                                       if letter.cause == "unknown_schema_id" and letter.record.value is not None),
        )

    def _landed(self, placement: Placement, rows: pa.Table) -> pa.Table:
        if not self._format.has_schemas:
            return rows
        if self._landed_schema is None:
            self._landed_schema = LandedSchema(self._topic)
        return self._landed_schema.conform(placement.schema_version, rows)

    def _decode_records(self, batch: KafkaBatch, indices: list[int], placed: dict[Placement, list[pa.Table]],
                        dead: dict[datetime, list[Rejected]]) -> None:
        decode_records(self._topic.topic, batch, indices, self._read_value, self._placement, placed, dead)

    def _read_value(self, value: bytes) -> DecodedValue:
        if not self._format.has_schemas:
            return DecodedValue(RAW_SCHEMA_VERSION, RAW_MAPPING, {"value": value})
        try:
            schema_id, payload = self._format.split(value)
        except FramingError as error:
            raise Undecodable(error.cause, str(error)) from None
        decoding = self._decoding_for(schema_id)
        return DecodedValue(decoding.version.version, decoding.mapping, decoding.records.read(payload, schema_id))

    def _decoding_for(self, schema_id: int | None) -> VersionDecoding:
        """The decoding of a schema id; of the newest version for a plain JSON value (None)."""
        found = self._by_schema_id.get(schema_id)
        if found is None:
            if schema_id is None:
                found = self._version_decoding(self._topic.schema_versions[-1])
            else:
                version = self._schemas.version_for(schema_id)
                found = self._schemas.unknown_reason(schema_id) if version is None else self._version_decoding(version)
            self._by_schema_id[schema_id] = found
        if isinstance(found, str):
            raise Undecodable("unknown_schema_id", found)
        return found

    def _version_decoding(self, version: SchemaVersion) -> VersionDecoding:
        if version.version not in self._by_version:
            topic, pii_fields = self._topic, self._topic.pii_fields
            mapping = arrow_mapping_for(version, pii_fields, self._pseudonymize, topic.columns_of(version))
            record_path = self._format.record_path_name
            columns: ColumnarPath | None = None
            path = f"{record_path}: columnar decoding is switched off"
            if self._columnar:
                try:
                    columns = self._format.columnar_path(ColumnarInputs(
                        version, mapping, pii_fields, self._column_pseudonyms, self._placement, topic.time_field))
                    path = "columnar"
                except NotColumnar as reason:
                    path = f"{record_path}: {reason}"
            records = self._format.record_path(version)
            self._by_version[version.version] = VersionDecoding(version, mapping, records, columns, path)
        return self._by_version[version.version]

    def _decode_raw(self, batch: KafkaBatch) -> DecodedBatch:
        """A raw table's rows: every value as it is, placed by Kafka time in `schema_version=0`; a value whose Kafka
        timestamp names no hour is a dead letter kept in the Kafka hour landed."""
        values = pa.array(batch.values, pa.binary())
        present = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        timestamps = np.asarray(batch.timestamps_ms, dtype=np.int64)
        placeable = present & names_an_hour(timestamps)
        placed: dict[Placement, list[pa.Table]] = defaultdict(list)
        rows = np.flatnonzero(placeable)
        if len(rows):
            table = pa.Table.from_arrays([values.take(pa.array(rows)), *KafkaColumns(self._topic.topic, batch).take(rows)],
                                         schema=RAW_MAPPING.schema)
            place_by_hour(placed, RAW_SCHEMA_VERSION, table, timestamps[rows] // HOUR_MS)
        dead: dict[datetime, list[Rejected]] = defaultdict(list)
        self._decode_records(batch, list(np.flatnonzero(present & ~placeable)), placed, dead)
        if self._topic.keep_tombstones:
            self._place_tombstones(batch, present, KafkaColumns(self._topic.topic, batch), placed, dead)
            return self._gathered(batch, present, placed, dead, tombstones=0)
        return self._gathered(batch, present, placed, dead, tombstones=int(len(values) - present.sum()))


def values_alone(topic: TableSpec, versions: tuple[SchemaVersion, ...]) -> TableSpec:
    """The topic's values as `versions` read them and nothing more: no route, key, tombstone rows, PII or renames,
    placed by Kafka time; what reading a route's field or a key needs (their columns, not a table's rows)."""
    return topic.model_copy(update=dict(schema_versions=versions, time_source="kafka_time", time_field=None, time_unit=None, route=None,
                   routed_siblings=(), rename=(), pii_fields=(), subject_field=None, key_schema=None,
                   keep_tombstones=False))


def _untimed(batch: KafkaBatch, values) -> KafkaBatch:
    """The batch's records with `values` (theirs, or their keys) as values, stamped at the epoch: a decoder of
    `values_alone` then places every record, whatever its time."""
    return KafkaBatch(batch.partitions, batch.offsets, [0] * len(batch), batch.keys, values)


def _in_log_order(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables).sort_by([("_kafka_partition", "ascending"), ("_kafka_offset", "ascending")])
