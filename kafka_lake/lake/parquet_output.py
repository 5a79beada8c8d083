"""One Parquet file being written to the lake: visible only once closed, nothing left if aborted.

Landing tasks and compaction both write through it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_lake.lake.storage import LakeStorage


class ParquetOutput:
    def __init__(self, storage: LakeStorage, path: str, schema: pa.Schema, use_dictionary: bool | list[str] = True,
                 write_statistics: bool | list[str] = True):
        self.path = path
        self.rows = 0
        self._context = storage.open_output(path)
        self._stream = self._context.__enter__()
        self._writer = pq.ParquetWriter(self._stream, schema, compression="zstd", use_dictionary=use_dictionary,
                                        write_statistics=write_statistics)

    @property
    def schema(self) -> pa.Schema:
        return self._writer.schema

    @property
    def bytes_written(self) -> int:
        return self._stream.tell()

    def write(self, table: pa.Table, row_group_size: int | None = None) -> None:
        self._writer.write_table(table, row_group_size=row_group_size)
        self.rows += table.num_rows

    def close(self) -> int:
        """Completes the file and returns its size in bytes."""
        self._writer.close()
        size = self._stream.tell()
        self._context.__exit__(None, None, None)
        return size

    def abort(self) -> None:
        # The writer must not finish the file when it is collected: on S3 that would still upload it.
        self._writer.is_open = False
        try:
            self._context.__exit__(RuntimeError, RuntimeError("write aborted"), None)
        except RuntimeError:
            pass


DICTIONARY_SAMPLE_ROWS = 10_000


def dictionary_columns(table: pa.Table) -> list[str]:
    """The Parquet paths of `table`'s columns worth dictionary-encoding: all but the top-level and struct-field
    columns whose first rows are mostly distinct (ids, offsets, timestamps, pseudonyms). On those, Parquet's
    dictionary only costs time and bytes: the writer builds one per row group, then falls back to plain."""
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    chosen: list[str] = []
    for field in sample.schema:
        chosen += _dictionary_paths(field.name, sample.column(field.name).combine_chunks())
    return chosen


def _dictionary_paths(path: str, column: pa.Array) -> list[str]:
    kind = column.type
    if pa.types.is_struct(kind):
        return [name for index in range(kind.num_fields)
                for name in _dictionary_paths(f"{path}.{kind.field(index).name}", column.field(index))]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        return [leaf for leaf, _ in _leaves(path, kind)]  # items keep the writer's default
    present = len(column) - column.null_count
    return [path] if present and pc.count_distinct(column).as_py() <= present // 2 else []


def statistics_columns(schema: pa.Schema) -> list[str]:
    """The Parquet paths of `schema`'s leaves whose min/max can skip row groups: all but strings and bytes.
    Theirs cost a seventh of a landing file's writing and prune nothing in landed data: pseudonyms, ids and
    URLs span their whole range in every row group."""
    return [leaf for field in schema for leaf, kind in _leaves(field.name, field.type)
            if not (pa.types.is_string(kind) or pa.types.is_binary(kind)
                    or pa.types.is_large_string(kind) or pa.types.is_large_binary(kind))]


def _leaves(path: str, kind: pa.DataType) -> list[tuple[str, pa.DataType]]:
    if pa.types.is_struct(kind):
        return [leaf for index in range(kind.num_fields)
                for leaf in _leaves(f"{path}.{kind.field(index).name}", kind.field(index).type)]
    if pa.types.is_map(kind):
        return (_leaves(f"{path}.key_value.key", kind.key_type)
                + _leaves(f"{path}.key_value.value", kind.item_type))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _leaves(f"{path}.list.element", kind.value_type)
    return [(path, kind)]
