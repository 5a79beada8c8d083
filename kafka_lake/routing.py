"""Which table of a routed topic takes each record of a batch: this one, another routed table of the topic, or none
(an unrouted record, kept with why in the topic's unrouted dead letters).

A route reads one value of the record before it is decoded for a table: the Avro record's full name (its schema id
names the version), or a field. A JSON field is read for the whole batch at once by the columnar JSON reader, and
record by record only where that reader refuses a value; an Avro field from the batch's values decoded as the
table's own versions read them, by the decode paths (as columns where they can). A record whose route value cannot be read at all (no JSON, an unknown schema id) is unrouted too:
no table could say it is theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.arrow_mapping import column_at
from kafka_lake.avro_types import json_keys_at
from kafka_lake.catalog import SchemaVersion, TopicSpec, record_full_name
from kafka_lake.decoded_batch import DecodedBatch, Undecodable
from kafka_lake.framing import FramedValues, FramingError, split_confluent, split_json
from kafka_lake.json_columns import read_json_field
from kafka_lake.json_records import parse_json_object, shown_as_json
from kafka_lake.kafka_records import BatchPositions, KafkaBatch
from kafka_lake.topic_yaml import shown

_ABSENT = object()


@dataclass(frozen=True)
class Routing:
    """A batch's records as one routed table sees them (indices into the batch)."""

    mine: np.ndarray  # the records this table decodes, tombstones included (every table counts them)
    routed_away: int  # records another table takes; unrouted ones too, for a table that does not land them
    unrouted: list[tuple[int, str]]  # (record, why no table takes it), for the table that lands them


class TopicRouter:
    """Routes the batches of one routed table (`topic.route`) against its topic's other routed tables."""

    def __init__(self, topic: TopicSpec, version_for: Callable[[int], SchemaVersion | None],
                 decode_values: Callable[[KafkaBatch], DecodedBatch]):
        """`decode_values`: the batch's values decoded by the table's versions, every record a row or a dead letter."""
        if topic.route is None:
            raise ValueError(f"{topic.name} has no route")
        self._topic = topic
        self._route = topic.route
        self._version_for = version_for
        self._decode_values = decode_values
        self._shown = shown_as_json if topic.format == "json" else shown  # values as their producers wrote them

    def route(self, batch: KafkaBatch, framed: FramedValues) -> Routing:
        present = framed.present
        owner = np.full(len(batch), -1, dtype=np.int64)  # 0: this table, 1: another, -1: none
        why: dict[int, str] = {}
        if self._topic.format == "avro" and self._route.field is not None:
            self._route_by_columns(batch, self._route.field, owner, why)
        else:
            self._route_by_values(self._route_values(batch, framed, present, why), present, owner, why)
        mine = np.flatnonzero(~present | (owner == 0))
        unrouted = sorted(why.items())
        lands = self._topic.lands_unrouted
        return Routing(mine, int((owner == 1).sum()) + (0 if lands else len(unrouted)), unrouted if lands else [])

    def _route_by_values(self, values: list, present: np.ndarray, owner: np.ndarray, why: dict[int, str]) -> None:
        """Routes each present record by its route value (`_route_values`), one by one."""
        for position in np.flatnonzero(present):
            index = int(position)
            if index in why:
                continue
            value = values[index]
            if isinstance(value, _Elsewhere):
                owner[index] = 1
            elif value is _ABSENT:
                why[index] = self._absent()
            elif self._route.takes(value):
                owner[index] = 0
            elif any(sibling.route.takes(value) for sibling in self._topic.routed_siblings):
                owner[index] = 1
            else:
                why[index] = self._taken_by_none(value)

    def _absent(self) -> str:
        return f"route field {self._route.field_text!r} is absent or null"

    def _taken_by_none(self, value: Any) -> str:
        return f"no table of topic {self._topic.topic!r} takes {self._route.field_text} = {self._shown(value)}"

    def _route_values(self, batch: KafkaBatch, framed: FramedValues, present: np.ndarray, why: dict[int, str]) -> list:
        """The route value of each present record, `_ABSENT`, or an `_Elsewhere` (a schema id only another table
        knows); a record whose value cannot be read gets its reason in `why`."""
        values: list[Any] = [None] * len(batch)
        field = self._route.field  # None: routed by the Avro record's full name
        if self._topic.format == "json" and field is not None:
            left = set(int(i) for i in np.flatnonzero(present))
            for schema_id, indices in framed.by_schema_id():  # the rest, record by record below
                read, _ = read_json_field(framed, indices, self._json_keys(schema_id), _arrow_type(self._route.values))
                for index, value in read:
                    values[index] = _ABSENT if value is None else value
                    left.discard(index)
            for index in sorted(left):
                values[index] = self._read_json_route(cast(bytes, batch.values[index]), why, index)
            return values
        for position in np.flatnonzero(present):  # present: not a tombstone
            index = int(position)
            values[index] = self._read_record_name(cast(bytes, batch.values[index]), why, index)
        return values

    def _route_by_columns(self, batch: KafkaBatch, field: tuple[str, ...], owner: np.ndarray, why: dict[int, str]) -> None:
        """Routes by an Avro field, read as a column of the batch's values decoded by the table's versions: `owner`
        0 where this table takes the value, 1 where another does; `why` for the rest. A value no version of this
        table reads is another table's where its schema id is theirs."""
        decoded = self._decode_values(batch)
        positions = BatchPositions(batch)
        others = [value for sibling in self._topic.routed_siblings for value in sibling.route.values]
        for table in decoded.rows.values():
            where = positions.of(table)
            column = column_at(table, field)  # every version has the field: the catalog checks at load
            if pa.types.is_integer(column.type):
                column = column.cast(pa.int64())
            takes = _is_in(column, self._route.values)
            elsewhere = _is_in(column, others) & ~takes
            owner[where[takes]] = 0
            owner[where[elsewhere]] = 1
            absent = ~np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            for row in np.flatnonzero(absent):
                why[int(where[row])] = self._absent()
            for row in np.flatnonzero(~(takes | elsewhere | absent)):  # a value no table takes: said with the value
                why[int(where[row])] = self._taken_by_none(column[int(row)].as_py())
        for letters in decoded.dead_letters.values():
            for index, error in zip(positions.of(letters), letters.column("error").to_pylist()):
                index = int(index)
                if not error.startswith("unknown_schema_id"):
                    why[index] = f"its route field cannot be read: {error}"
                elif isinstance(self._read_record_name(cast(bytes, batch.values[index]), why, index), _Elsewhere):
                    owner[index] = 1

    def _json_keys(self, schema_id: int | None) -> tuple[tuple[str, ...], ...]:
        """The JSON keys of the route field's path in the version a schema id names (a plain value's: the newest; an
        unknown id's too, whose record is then no table's to decode)."""
        version = self._version_for(schema_id) if schema_id is not None else None
        schema = (version or self._topic.schema_versions[-1]).schema
        return json_keys_at(schema, self._route.field or ())

    def _read_json_route(self, value: bytes, why: dict[int, str], index: int) -> Any:
        try:
            schema_id, payload = split_json(value)
            document = parse_json_object(payload, "JSON value")
        except (FramingError, Undecodable) as error:
            why[index] = f"its route field cannot be read: {error}"
            return None
        return _at_path(document, self._json_keys(schema_id))

    def _read_record_name(self, value: bytes, why: dict[int, str], index: int) -> Any:
        """The full name of the record the value's schema id names; an `_Elsewhere` for an id only another table
        knows."""
        try:
            schema_id, _ = split_confluent(value)
        except FramingError as error:
            why[index] = f"its route cannot be read: {error}"
            return None
        version = self._version_for(schema_id)
        if version is None:
            if any(schema_id in sibling.registry_ids for sibling in self._topic.routed_siblings):
                return _Elsewhere()
            why[index] = f"schema id {schema_id} is a version of no table of topic {self._topic.topic!r}"
            return None
        return record_full_name(version.schema)


class _Elsewhere:
    """The route value of a record whose schema only another table of the topic knows."""


def _is_in(column: pa.ChunkedArray, values: Sequence[object]) -> np.ndarray:
    """Where the column holds one of `values` (of the kind the catalog checked the field against)."""
    if not values:
        return np.zeros(len(column), dtype=bool)
    found = pc.is_in(column, value_set=pa.array(list(values), column.type))
    return np.asarray(found.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _at_path(document: dict, path: tuple[tuple[str, ...], ...]) -> Any:
    """The value at a field path (each step's JSON keys) of a JSON object, as the record path reads it: under a step's
    first key present and not null (an object or array there is a value no route takes)."""
    found: Any = document
    for keys in path:
        found = next((found[key] for key in keys if found.get(key) is not None), None) if isinstance(found, dict) else None
    return _ABSENT if found is None else found


def _arrow_type(values: tuple) -> pa.DataType:
    kind = type(values[0])
    return {str: pa.string(), bool: pa.bool_(), int: pa.int64()}[kind]
