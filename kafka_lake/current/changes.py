"""Changes: a landed Kafka hour's rows of a change topic as what they do to its current-state table (the key, the row
it sets or that it deletes, its Kafka partition, offset and time), and the newest change per key among any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.current.state_table import current_state_of, key_names
from kafka_lake.decoding.key_columns import KEY_COLUMN_PREFIX, TOMBSTONE_COLUMN
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.layout import KAFKA_COLUMN_PREFIX
from kafka_lake.schemas.arrow_mapping import column_at
from kafka_lake.table_spec import TableSpec

# What a candidate for a key's row is, and whether it deletes the key: columns of the merge, never written. On a tie of
# partition and offset the higher source wins: the same change, found in the table and read again.
SOURCE, DELETES = "_change_source", "_change_deletes"
LATER_DELETION, CHANGE, TABLE_ROW = 0, 1, 2
PARTITION, OFFSET, TIMESTAMP = "_kafka_partition", "_kafka_offset", "_kafka_timestamp"


# The newest change of a key is the one with the highest offset in its Kafka partition (Kafka orders a key's records
# there); a key met in several partitions (partitions added, keys rehashed) takes the latest Kafka timestamp among
# each partition's newest. Applying changes in any order, any number of times, so ends in the same rows.
@dataclass(frozen=True)
class HourChanges:
    """The newest change per key among a landed hour's rows, in the current-state table's columns with `SOURCE` and
    `DELETES`; and how many rows were read, and how many had no key (no row of the table to set)."""

    kafka_hour: KafkaHour
    changes: pa.Table
    rows_read: int
    keyless: int

    @property
    def deletions(self) -> pa.Table:
        """The hour's changes that delete their key: its key, partition, offset and time."""
        return self.changes.filter(self.changes.column(DELETES)).select([*self.key_columns, PARTITION, OFFSET, TIMESTAMP])

    @property
    def key_columns(self) -> list[str]:
        return [name for name in self.changes.column_names if name.startswith(KEY_COLUMN_PREFIX)]


def hour_changes(topic: TableSpec, kafka_hour: KafkaHour, landed: list[pa.Table], schema: pa.Schema) -> HourChanges:
    """`landed`: the hour's rows as the raw table holds them (`TableFormat.landed_hour_rows`), of any schema versions;
    `schema`: the current-state table's columns (`files.rows_schema`)."""
    parts, read, keyless = [], 0, 0
    for rows in landed:
        read += rows.num_rows
        keyed = rows.filter(_has_key(rows, key_names(topic))) if rows.num_rows else rows
        keyless += rows.num_rows - keyed.num_rows
        if keyed.num_rows:
            parts.append(_as_changes(topic, keyed, schema))
    changes = pa.concat_tables(parts) if parts else with_source(schema.empty_table(), CHANGE, pa.array([], pa.bool_()))
    newest, _ = newest_per_key(changes, key_names(topic))
    return HourChanges(kafka_hour, newest, read, keyless)


def _has_key(rows: pa.Table, keys: list[str]) -> pa.ChunkedArray:
    present = pc.is_valid(rows.column(keys[0]))
    for name in keys[1:]:
        present = pc.and_(present, pc.is_valid(rows.column(name)))
    return present


def _as_changes(topic: TableSpec, rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Raw rows (each with a key) as changes: a tombstone, a change matching `delete_when` and one without its row
    (Debezium's delete, whose `after` is null) delete their key; the others set the row."""
    state = current_state_of(topic)
    deletes = pc.fill_null(rows.column(TOMBSTONE_COLUMN.name), False) if TOMBSTONE_COLUMN.name in rows.column_names \
        else pa.chunked_array([pa.array([False] * rows.num_rows)])
    if state.delete_when is not None and state.delete_when.field is not None:
        matched = column_at(rows, topic.column_path(state.delete_when.field))
        wanted = pa.array(list(state.delete_when.values), matched.type)
        deletes = pc.or_(deletes, pc.fill_null(pc.is_in(matched, value_set=wanted), False))
    if state.row is not None:
        row_path = topic.column_path(state.row)
        row = column_at(rows, row_path)
        deletes = pc.or_(deletes, pc.is_null(row))
        fields = {f.name: column_at(rows, (*row_path, f.name)) for f in row.type}
    else:
        fields = {name: rows.column(name) for name in rows.column_names}
    columns = []
    for field in schema:
        found = rows.column(field.name) if field.name.startswith(KAFKA_COLUMN_PREFIX) else fields.get(field.name)
        columns.append(pa.nulls(rows.num_rows, field.type) if found is None else found.cast(field.type))
    return with_source(pa.Table.from_arrays(columns, schema=schema), CHANGE, deletes)


def with_source(rows: pa.Table, source: int, deletes: pa.Array | pa.ChunkedArray | bool) -> pa.Table:
    """Candidates for their keys' rows: `rows` with `SOURCE` and `DELETES`."""
    if isinstance(deletes, bool):
        deletes = pa.array([deletes] * rows.num_rows, pa.bool_())
    return rows.append_column(SOURCE, pa.array([source] * rows.num_rows, pa.int8())).append_column(DELETES, deletes)


def newest_per_key(candidates: pa.Table, keys: list[str]) -> tuple[pa.Table, dict[int, np.ndarray]]:
    """Per key, the newest candidate (the module's rule; a tie goes to the higher `SOURCE`), ordered by key; and, per
    source, whether each key had a candidate of it."""
    by_offset = _sorted(candidates, [*keys, PARTITION, OFFSET, SOURCE])
    per_partition = by_offset.filter(_last_of_runs(by_offset, [*keys, PARTITION]))
    by_time = _sorted(per_partition, [*keys, TIMESTAMP, PARTITION, OFFSET, SOURCE])
    newest = by_time.filter(_last_of_runs(by_time, keys))
    # Which key (its place in `newest`) each candidate is of: a key's candidates are one run of `by_offset`.
    run_ends = _last_of_runs(by_offset, keys)
    key_of_candidate = np.cumsum(np.concatenate([[True], run_ends[:-1]])) - 1 if len(run_ends) else run_ends.astype(int)
    sources = by_offset.column(SOURCE).to_numpy()
    present = {}
    for source in (LATER_DELETION, CHANGE, TABLE_ROW):
        has = np.zeros(newest.num_rows, dtype=bool)
        has[key_of_candidate[sources == source]] = True
        present[source] = has
    return newest, present


def _sorted(table: pa.Table, columns: list[str]) -> pa.Table:
    if table.num_rows < 2:
        return table
    order = pc.sort_indices(table, sort_keys=[(name, "ascending", "at_start") for name in columns])
    return table.take(order)


def _last_of_runs(table: pa.Table, columns: list[str]) -> np.ndarray:
    """Whether each row of a sorted table is the last of its run of equal `columns`."""
    count = table.num_rows
    if count == 0:
        return np.zeros(0, dtype=bool)
    differs = np.zeros(count - 1, dtype=bool)
    for name in columns:
        column = table.column(name)
        unequal = pc.not_equal(column.slice(0, count - 1), column.slice(1))
        differs |= pc.fill_null(unequal, True).to_numpy()
    return np.append(differs, True)
