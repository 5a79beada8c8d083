"""Confluent wire framing: a zero magic byte, a 4-byte big-endian schema id, then Avro binary.

The one place that knows the 5-byte header: of one value, of a batch's values read as columns, and for every
producer we ship.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

MAGIC_BYTE = 0
HEADER_SIZE = 5
_HEADER = struct.Struct(">bI")


class FramingError(ValueError):
    """The value does not carry a Confluent header; `cause` is the dead-letter cause."""

    def __init__(self, cause: str, message: str):
        super().__init__(message)
        self.cause = cause


def split_confluent(value: bytes) -> tuple[int, memoryview]:
    """(schema id, Avro payload) of a framed value."""
    if len(value) < HEADER_SIZE:
        if value[:1] not in (b"", b"\x00"):
            raise FramingError("bad_magic_byte", f"magic byte is 0x{value[0]:02x}, expected 0x00")
        raise FramingError("undecodable_payload", f"value is {len(value)} bytes, shorter than the 5-byte header")
    if value[0] != MAGIC_BYTE:
        raise FramingError("bad_magic_byte", f"magic byte is 0x{value[0]:02x}, expected 0x00")
    _, schema_id = _HEADER.unpack_from(value, 0)
    return schema_id, memoryview(value)[HEADER_SIZE:]


def encode_confluent(schema_id: int, parsed_schema: Any, record: dict) -> bytes:
    """Frames one record the way Confluent's Avro serializer does."""
    out = io.BytesIO()
    out.write(_HEADER.pack(MAGIC_BYTE, schema_id))
    fastavro.schemaless_writer(out, parsed_schema, record)
    return out.getvalue()


class FramedValues:
    """The Confluent header of every value of a batch, read as columns: which schema id, or the record path."""

    def __init__(self, values: pa.BinaryArray):
        self.values = values
        self.offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=len(values) + 1).astype(np.int64)
        data = values.buffers()[2]
        self.data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        present = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
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
