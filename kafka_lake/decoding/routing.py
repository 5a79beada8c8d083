"""Which table of a routed topic takes each record of a batch: this one, another routed table of the topic, or none
(an unrouted record, kept with why in the topic's unrouted dead letters).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.decoding.decoded_batch import DecodedBatch, Undecodable
from kafka_lake.decoding.formats import payload_format
from kafka_lake.kafka.framing import FramedValues, FramingError
from kafka_lake.kafka.records import BatchPositions, KafkaBatch
from kafka_lake.schemas.arrow_mapping import column_at
from kafka_lake.table_spec import SchemaVersion, TableSpec

_ABSENT = object()


@dataclass(frozen=True)
class Routing:
    """A batch's records as one routed table sees them (indices into the batch)."""

    mine: np.ndarray  # the records this table decodes, tombstones included (every table counts them)
    routed_away: int  # records another table takes; unrouted ones too, for a table that does not land them
    unrouted: list[tuple[int, str]]  # (record, why no table takes it), for the table that lands them


class TopicRouter:
    """Routes the batches of one routed table (`topic.route`) against its topic's other routed tables."""

    def __init__(self, topic: TableSpec, version_for: Callable[[int], SchemaVersion | None],
                 decode_values: Callable[[KafkaBatch], DecodedBatch]):
        """`decode_values`: the batch's values decoded by the table's versions, every record a row or a dead letter."""
        if topic.route is None:
            raise ValueError(f"{topic.name} has no route")
        self._topic = topic
        self._format = payload_format(topic)
        self._route = topic.route
        self._version_for = version_for
        self._decode_values = decode_values

    def route(self, batch: KafkaBatch, framed: FramedValues) -> Routing:
        """A route reads one value of the record before it is decoded for a table: the record's full name (its schema
        id names the version), or a field: read by the payload format from the values where it can read one field
        cheaply (JSON), else from the batch's values decoded as the table's own versions read them, by the decode
        paths (as columns where they can). A record whose route value cannot be read at all (no JSON object; a schema
        id no table knows, for a route read through the schema) is unrouted too: no table could say it is theirs. A
        JSON field is read whatever schema id frames it: a record with an unknown id goes to the table its route
        names, where decoding makes it a dead letter naming the id (that table's owner must add the version)."""
        present = framed.present
        owner = np.full(len(batch), -1, dtype=np.int64)  # 0: this table, 1: another, -1: none
        why: dict[int, str] = {}
        field = self._route.field  # None: routed by the record's full name
        read = None if field is None else self._format.route_values(batch, framed, field, _arrow_type(self._route.values),
                                                                         self._version_of)
        if field is not None and read is None:
            self._route_by_columns(batch, field, owner, why)
        elif read is not None:
            why.update(read.unreadable)
            self._route_by_values([_ABSENT if (value := read.values.get(index)) is None else value
                                   for index in range(len(batch))], present, owner, why)
        else:
            self._route_by_values(self._record_names(batch, present, why), present, owner, why)
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
        return f"no table of topic {self._topic.topic!r} takes {self._route.field_text} = {self._format.shown(value)}"

    def _version_of(self, schema_id: int | None) -> SchemaVersion:
        """The version whose names a value of `schema_id` is read in: its own, else (a plain JSON value, an unknown id,
        whose record is then no table's to decode) the newest."""
        version = self._version_for(schema_id) if schema_id is not None else None
        return version or self._topic.schema_versions[-1]

    def _record_names(self, batch: KafkaBatch, present: np.ndarray, why: dict[int, str]) -> list:
        """The record full name of each present record, or an `_Elsewhere` (a schema id only another table knows);
        a record whose name cannot be read gets its reason in `why`."""
        values: list[Any] = [None] * len(batch)
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

    def _read_record_name(self, value: bytes, why: dict[int, str], index: int) -> Any:
        """The full name of the record the value's schema id names; an `_Elsewhere` for an id only another table
        knows."""
        try:
            schema_id, payload = self._format.split(value)
        except FramingError as error:
            why[index] = f"its route cannot be read: {error}"
            return None
        version = None if schema_id is None else self._version_for(schema_id)
        if version is None:
            if any(schema_id in sibling.registry_ids for sibling in self._topic.routed_siblings):
                return _Elsewhere()
            why[index] = f"schema id {schema_id} is a version of no table of topic {self._topic.topic!r}"
            return None
        try:
            return self._format.record_name(version, payload)
        except Undecodable as error:
            why[index] = f"its route cannot be read: {error}"
            return None


class _Elsewhere:
    """The route value of a record whose schema only another table of the topic knows."""


def _is_in(column: pa.ChunkedArray, values: Sequence[object]) -> np.ndarray:
    """Where the column holds one of `values` (of the kind the catalog checked the field against)."""
    if not values:
        return np.zeros(len(column), dtype=bool)
    found = pc.is_in(column, value_set=pa.array(list(values), column.type))
    return np.asarray(found.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _arrow_type(values: tuple) -> pa.DataType:
    kind = type(values[0])
    return {str: pa.string(), bool: pa.bool_(), int: pa.int64()}[kind]
