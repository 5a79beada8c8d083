"""One Parquet file being written to the lake: visible only once closed, nothing left if aborted.

Landing tasks and compaction both write through it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_lake.storage import LakeStorage


class ParquetOutput:
    def __init__(self, storage: LakeStorage, path: str, schema: pa.Schema):
        self.path = path
        self.rows = 0
        self._context = storage.open_output(path)
        self._stream = self._context.__enter__()
        self._writer = pq.ParquetWriter(self._stream, schema, compression="zstd")

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
        try:
            self._context.__exit__(RuntimeError, RuntimeError("write aborted"), None)
        except RuntimeError:
            pass
