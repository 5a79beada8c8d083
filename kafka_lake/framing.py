"""Confluent wire framing: a zero magic byte, a 4-byte big-endian schema id, then Avro binary.

The one place that knows the 5-byte header, for the decoder and for every producer we ship.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro

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
