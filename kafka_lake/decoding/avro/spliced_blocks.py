"""The payloads of a batch spliced into Avro object container blocks for a native reader: the container header,
one block per stretch of records, and bisecting a block to corner a record the reader refuses or misreads.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from polars_avro._avro_rs import AvroSource

from kafka_lake.decoding.avro.columnar_mapping import ColumnarMapping
from kafka_lake.kafka.framing import HEADER_SIZE, FramedValues

_SYNC_MARKER = b"kafka-lake-block"  # any 16 bytes: the block is ours and read once
SMALLEST_SPLIT = 8  # below this many records, isolating a broken one costs more than fastavro does
_LONGEST_VALUE = 2**31 - 1  # a binary array's 32-bit offsets hold no longer one


class SplicedPayloads:
    """The Avro payloads (values less their 5-byte header) of some records, back to back, and where each starts."""

    def __init__(self, framed: FramedValues, indices: np.ndarray):
        self.indices = indices
        values = framed.values if len(indices) == len(framed.values) else framed.values.take(pa.array(indices))
        payloads = pc.binary_slice(values, HEADER_SIZE, _LONGEST_VALUE)  # one copy, end to end
        offsets = np.frombuffer(payloads.buffers()[1], dtype=np.int32, count=payloads.offset + len(payloads) + 1)
        offsets = offsets[payloads.offset:].astype(np.int64)
        data = payloads.buffers()[2]
        data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        self.starts = offsets - offsets[0]
        self.data = data[offsets[0]:offsets[-1]]

    def sizes(self, first: int, stop: int) -> np.ndarray:
        return np.diff(self.starts[first:stop + 1])

    def container(self, header: bytes, first: int, stop: int) -> bytes:
        """An Avro container of `header` and one block holding records [first, stop): the payloads' one copy
        (a batch's payloads are megabytes, and each copy of them costs fresh pages as much as the copying)."""
        data = self.data[self.starts[first]:self.starts[stop]].data  # a view, not a copy
        return b"".join((header, _zigzag(stop - first), _zigzag(len(data)), data, _SYNC_MARKER))


def decode_block_isolating(
    header: bytes, columnar: ColumnarMapping, payloads: SplicedPayloads, left: list[int]
) -> Iterator[tuple[np.ndarray, pa.RecordBatch, np.ndarray, list[np.ndarray]]]:
    """Decodes the payloads as spliced blocks, yielding (record indices, decoded rows, where each record's bytes
    start, each field's encoded lengths) for the stretches that decode exactly; a broken record is cut out
    (bisecting around it) and left for the fastavro path with its neighbours that cannot be told apart from it."""
    stretches = [(0, len(payloads.indices))]
    while stretches:
        first, stop = stretches.pop()
        if first >= stop:
            continue
        decoded = _read_block(payloads.container(header, first, stop), stop - first)
        suspect = None
        if decoded is not None:
            lengths = columnar.field_lengths(decoded)
            mismatched = np.flatnonzero(sum(lengths, np.zeros(stop - first, dtype=np.int64)) != payloads.sizes(first, stop))
            if not len(mismatched):
                yield payloads.indices[first:stop], decoded, payloads.starts[first:stop], lengths
                continue
            suspect = first + int(mismatched[0])
        if stop - first <= SMALLEST_SPLIT:
            left.extend(payloads.indices[first:stop])
        elif suspect is not None:
            # The first record whose length disagrees is the likeliest culprit; its neighbours are re-read alone.
            left.append(payloads.indices[suspect])
            stretches += [(suspect + 1, stop), (first, suspect)]
        else:
            middle = (first + stop) // 2
            stretches += [(middle, stop), (first, middle)]


def _read_block(container: bytes, count: int) -> pa.RecordBatch | None:
    """The records of a container's one block decoded by the native reader, or None when it refuses them.

    Exactly one batch of exactly `count` rows is asked for: the reader loops forever on bytes left over after
    a block's last record, so it is never asked for a second batch.
    """
    try:
        source = AvroSource([lambda: contextlib.nullcontext(io.BytesIO(container))], False, False)
        decoded = pa.record_batch(next(source.batch_iter(count, None)))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # the reader's errors, Rust panics (a BaseException), a StopIteration on an empty block
        return None
    return decoded if decoded.num_rows == count else None


def container_header(block_schema: dict) -> bytes:
    """An Avro object container file header declaring `block_schema`, uncompressed, with our sync marker."""
    metadata = {b"avro.schema": json.dumps(block_schema).encode(), b"avro.codec": b"null"}
    entries = b"".join(_zigzag(len(k)) + k + _zigzag(len(v)) + v for k, v in metadata.items())
    return b"Obj\x01" + _zigzag(len(metadata)) + entries + _zigzag(0) + _SYNC_MARKER


def _zigzag(value: int) -> bytes:
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)
