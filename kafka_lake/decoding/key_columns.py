"""The columns a table has after the `_kafka_*` ones: the record's key decoded into a column per field of the topic's
`key_schema`, and `_kafka_tombstone` where the topic keeps its tombstones as rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kafka_lake.kafka.records import KAFKA_COLUMNS, BatchPositions, KafkaBatch
from kafka_lake.schemas.arrow_mapping import arrow_schema_for
from kafka_lake.table_spec import SchemaVersion, TableSpec

# A key field's column is `_kafka_key_<field>`, beside the key's bytes in `_kafka_key`.
KEY_COLUMN_PREFIX = "_kafka_key_"
# Where the topic keeps its tombstones as rows (`keep_tombstones`), so a compacted topic's deletes can be rebuilt
# downstream.
TOMBSTONE_COLUMN = pa.field("_kafka_tombstone", pa.bool_())


def key_column_name(field: str) -> str:
    return f"{KEY_COLUMN_PREFIX}{field}"


def trailing_columns(topic: TableSpec) -> tuple[pa.Field, ...]:
    """The key's columns (a `key_schema`), then `_kafka_tombstone` (`keep_tombstones`); none for other topics."""
    fields: list[pa.Field] = []
    if topic.key_schema is not None:
        key_fields = list(arrow_schema_for(topic.key_schema, ()))[: -len(KAFKA_COLUMNS)]
        fields.extend(field.with_name(key_column_name(field.name)) for field in key_fields)
    if topic.keep_tombstones:
        fields.append(TOMBSTONE_COLUMN)
    return tuple(fields)


class EveryIdIsTheKey:
    """The schema resolver of a key: whatever id a framed key carries, it is read with `key_schema`.

    A key is decoded as the topic's values are (Confluent-framed Avro, or JSON plain or framed), by the same decode
    paths (`BatchDecoder`): as the value of a topic of its own whose one schema version is `key_schema` and which every
    schema id names (the key's subject has ids of its own, which the catalog does not list)."""

    def __init__(self, key_schema: SchemaVersion):
        self._key_schema = key_schema

    def version_for(self, schema_id: int) -> SchemaVersion | None:
        return self._key_schema

    def unknown_reason(self, schema_id: int) -> str:
        return f"schema id {schema_id} is read as {self._key_schema.file}"


class KeyColumns:
    """The trailing columns of every record of a batch, from which each decoded table takes its rows'."""

    def __init__(self, fields: tuple[pa.Field, ...], columns: list[pa.Array], positions: BatchPositions):
        self._fields = fields
        self._columns = columns  # one per field, a value per record of the batch
        self._positions = positions

    @classmethod
    def of(cls, topic: TableSpec, fields: tuple[pa.Field, ...], batch: KafkaBatch, keys: pa.Table | None,
           present: np.ndarray) -> KeyColumns:
        """`fields`: the topic's `trailing_columns`; `keys`: the key decoder's rows (the key's fields, then the
        `_kafka_*` columns) for the records whose key decoded, a record without (a null key) having null key columns;
        `present`: whether each record has a value, the tombstone flag its negation."""
        positions = BatchPositions(batch)
        columns: list[pa.Array] = []
        if topic.key_schema is not None:
            key_fields = fields[: len(fields) - int(topic.keep_tombstones)]
            if keys is None or not keys.num_rows:
                columns.extend(pa.nulls(len(batch), field.type) for field in key_fields)
            else:
                where = np.full(len(batch), -1, dtype=np.int64)
                where[positions.of(keys)] = np.arange(keys.num_rows)
                picks = pa.array(where, mask=where < 0)
                columns.extend(keys.column(index).take(picks) for index in range(len(key_fields)))
        if topic.keep_tombstones:
            columns.append(pa.array(~present))
        return cls(fields, columns, positions)

    def appended_to(self, table: pa.Table) -> pa.Table:
        """The table with the trailing columns of its rows."""
        picks = pa.array(self._positions.of(table))
        for field, column in zip(self._fields, self._columns):
            table = table.append_column(field, column.take(picks))
        return table
