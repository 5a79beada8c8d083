"""Confluent wire framing: a zero magic byte, a 4-byte big-endian schema id, then Avro binary (or JSON text, from
Confluent's JSON Schema serializer, where a JSON value may also come plain, without the header).
"""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

# The one place that knows the 5-byte header: of one value, of a batch's values read as columns, and for every
# producer we ship.
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


def schema_id_of(value: bytes) -> int:
    """The schema id in the header of a value known to be framed (a dead letter for its unknown id, say)."""
    return _HEADER.unpack_from(value, 0)[1]


def split_json(value: bytes) -> tuple[int | None, memoryview]:
    """(schema id, JSON payload) of a framed JSON value, or (None, the value) of a plain one: JSON text never starts
    with a zero byte."""
    if value[:1] != b"\x00":
        return None, memoryview(value)
    if len(value) < HEADER_SIZE:
        raise FramingError("undecodable_payload", f"value is {len(value)} bytes, shorter than the 5-byte header")
    return split_confluent(value)


def confluent_header(schema_id: int) -> bytes:
    """The 5 bytes every framed value starts with."""
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def encode_confluent(schema_id: int, parsed_schema: Any, record: dict) -> bytes:
    """Frames one record the way Confluent's Avro serializer does."""
    out = io.BytesIO()
    out.write(_HEADER.pack(MAGIC_BYTE, schema_id))
    fastavro.schemaless_writer(out, parsed_schema, record)
    return out.getvalue()


class FramedValues:
    """The Confluent header of every value of a batch, read as columns: which schema id, or the record path. With
    `plain_json`, a value that does not start with the zero magic byte is plain JSON: schema id None, no header."""

    def __init__(self, values: pa.BinaryArray, plain_json: bool = False):
        self.values = values
        self.offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=len(values) + 1).astype(np.int64)
        data = values.buffers()[2]
        self.data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        present = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        self.present = present  # False: a tombstone
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
        plain = np.zeros(len(values), dtype=bool)
        if plain_json and len(self.data):
            plain = present & (sizes > 0) & (self.data[np.minimum(starts, len(self.data) - 1)] != MAGIC_BYTE)
        self.schema_ids = np.where(framed, ids, np.where(plain, _PLAIN, -1))
        self.payload_starts = np.where(framed, starts + HEADER_SIZE, starts)  # where each payload begins in `data`
        self.needs_record_path = present & ~framed & ~plain  # wrong magic byte or too short: the record path says why

    def by_schema_id(self) -> list[tuple[int | None, np.ndarray]]:
        """The records of each schema id, plain JSON (id None) first."""
        found = np.unique(self.schema_ids[self.schema_ids != -1])
        return [(None if schema_id == _PLAIN else int(schema_id), np.flatnonzero(self.schema_ids == schema_id))
                for schema_id in found]


_PLAIN = -2  # a plain JSON value's schema id among the ids of framed ones
