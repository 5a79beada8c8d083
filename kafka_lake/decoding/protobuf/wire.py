"""Confluent's Protobuf framing after the 5-byte header: the message indexes (a zigzag varint count, then that many
zigzag varints naming a message of the schema's file; a single 0 byte is [0], its first message), then the message.
"""

from __future__ import annotations

from typing import Any

from kafka_lake.kafka.framing import confluent_header

MAX_INDEXES = 32  # message nesting deeper than this names no message a schema file holds


class MessageIndexError(ValueError):
    """Message indexes that cannot be read; the text says why."""


def read_message_indexes(payload: memoryview | bytes) -> tuple[list[int], int]:
    """(the message indexes, where the message starts) of a payload after Confluent's 5-byte header."""
    count, position = _zigzag(payload, 0)
    if count == 0:
        return [0], position
    if count < 0 or count > MAX_INDEXES:
        raise MessageIndexError(f"the message index count is {count}, where a schema file nests at most {MAX_INDEXES} deep")
    indexes = []
    for _ in range(count):
        index, position = _zigzag(payload, position)
        indexes.append(index)
    return indexes, position


def encode_protobuf(schema_id: int, indexes: list[int], message: Any) -> bytes:
    """A message framed as Confluent's Protobuf serializer frames it: header, message indexes, message."""
    return confluent_header(schema_id) + message_indexes_bytes(indexes) + message.SerializeToString()


def message_indexes_bytes(indexes: list[int]) -> bytes:
    """The message indexes as a producer writes them: [0] as the single byte 0."""
    if indexes == [0]:
        return b"\x00"
    return b"".join(_zigzag_bytes(number) for number in (len(indexes), *indexes))


def _zigzag(data: memoryview | bytes, position: int) -> tuple[int, int]:
    """(the zigzag varint at `position`, where the next begins)."""
    value = shift = 0
    while True:
        if position >= len(data):
            raise MessageIndexError("the payload ends inside its message indexes")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift >= 64:
            raise MessageIndexError("a message index longer than a 64-bit varint")
    return (value >> 1) ^ -(value & 1), position


def _zigzag_bytes(number: int) -> bytes:
    value = (number << 1) ^ (number >> 63)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
