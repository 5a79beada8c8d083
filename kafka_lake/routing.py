"""Which table of a routed topic takes each record of a batch: this one, another routed table of the topic, or none
(an unrouted record, kept with why in the topic's unrouted dead letters).

A route reads one value of the record before it is decoded for a table: the Avro record's full name (its schema id
names the version), or a field. A JSON field is read for the whole batch at once by the columnar JSON reader, and
record by record only where that reader refuses a value; an Avro field is read from the value the table's own
version decodes. A record whose route value cannot be read at all (no JSON, an unknown schema id) is unrouted too:
no table could say it is theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa

from kafka_lake.catalog import SchemaVersion, TopicSpec, record_full_name
from kafka_lake.decoded_batch import Undecodable
from kafka_lake.framing import FramedValues, FramingError, split_confluent, split_json
from kafka_lake.json_columns import read_json_field
from kafka_lake.json_records import parse_json_object
from kafka_lake.kafka_records import KafkaBatch
from kafka_lake.record_decoding import AvroRecords
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

    def __init__(self, topic: TopicSpec, version_for: Callable[[int], SchemaVersion | None]):
        if topic.route is None:
            raise ValueError(f"{topic.name} has no route")
        self._topic = topic
        self._route = topic.route
        self._version_for = version_for
        self._avro_records: dict[int, AvroRecords] = {}

    def route(self, batch: KafkaBatch, framed: FramedValues) -> Routing:
        present = np.asarray(framed.values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        owner = np.full(len(batch), -1, dtype=np.int64)  # 0: this table, 1: another, -1: none
        why: dict[int, str] = {}
        values = self._route_values(batch, framed, present, why)
        for position in np.flatnonzero(present):
            index = int(position)
            if index in why:
                continue
            value = values[index]
            if isinstance(value, _Elsewhere):
                owner[index] = 1
            elif value is _ABSENT:
                why[index] = f"route field {self._route.field_text!r} is absent or null"
            elif self._route.takes(value):
                owner[index] = 0
            elif any(sibling.route.takes(value) for sibling in self._topic.routed_siblings):
                owner[index] = 1
            else:
                why[index] = f"no table of topic {self._topic.topic!r} takes {self._route.field_text} = {shown(value)}"
        mine = np.flatnonzero(~present | (owner == 0))
        unrouted = sorted(why.items())
        lands = self._topic.lands_unrouted
        return Routing(mine, int((owner == 1).sum()) + (0 if lands else len(unrouted)), unrouted if lands else [])

    def _route_values(self, batch: KafkaBatch, framed: FramedValues, present: np.ndarray, why: dict[int, str]) -> list:
        """The route value of each present record, `_ABSENT`, or an `_Elsewhere` (a schema id only another table
        knows); a record whose value cannot be read gets its reason in `why`."""
        values: list[Any] = [None] * len(batch)
        field = self._route.field  # None: routed by the Avro record's full name
        if self._topic.format == "json" and field is not None:
            left = set(int(i) for i in np.flatnonzero(present))
            for _, indices in framed.by_schema_id():  # the rest, record by record below
                read, _ = read_json_field(framed, indices, field, _arrow_type(self._route.values))
                for index, value in read:
                    values[index] = _ABSENT if value is None else value
                    left.discard(index)
            for index in sorted(left):
                values[index] = self._read_json_route(cast(bytes, batch.values[index]), why, index)
            return values
        for position in np.flatnonzero(present):  # present: not a tombstone
            index = int(position)
            values[index] = self._read_avro_route(cast(bytes, batch.values[index]), why, index)
        return values

    def _read_json_route(self, value: bytes, why: dict[int, str], index: int) -> Any:
        try:
            _, payload = split_json(value)
            document = parse_json_object(payload, "JSON value")
        except (FramingError, Undecodable) as error:
            why[index] = f"its route field cannot be read: {error}"
            return None
        return _at_path(document, self._route.field)

    def _read_avro_route(self, value: bytes, why: dict[int, str], index: int) -> Any:
        try:
            schema_id, payload = split_confluent(value)
        except FramingError as error:
            why[index] = f"its route cannot be read: {error}"
            return None
        version = self._version_for(schema_id)
        if version is None:
            if any(schema_id in sibling.registry_ids for sibling in self._topic.routed_siblings):
                return _Elsewhere()
            why[index] = f"schema id {schema_id} is a version of no table of topic {self._topic.topic!r}"
            return None
        if self._route.by_record_name:
            return record_full_name(version.schema)
        records = self._avro_records.setdefault(version.version, AvroRecords(version))
        try:
            decoded = records.read(memoryview(payload), schema_id)
        except Undecodable as error:
            why[index] = f"its route field cannot be read: {error}"
            return None
        return _at_path(decoded, self._route.field)


class _Elsewhere:
    """The route value of a record whose schema only another table of the topic knows."""


def _at_path(document: Any, path: tuple[str, ...] | None) -> Any:
    found = document
    for step in path or ():
        if type(found) is tuple:  # a nested record under a nullable union comes as (name, record)
            found = found[1]
        found = found.get(step) if isinstance(found, dict) else None
    return _ABSENT if found is None or isinstance(found, (dict, list, tuple)) else found


def _arrow_type(values: tuple) -> pa.DataType:
    kind = type(values[0])
    return {str: pa.string(), bool: pa.bool_(), int: pa.int64()}[kind]
