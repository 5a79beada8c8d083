"""The fields of many Protobuf messages at once, read from the wire format with numpy: each message's tags walked in
step with every other's, so a batch costs a few array operations a field, never a Python object a value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VARINT, I64, LEN, I32 = 0, 1, 2, 5
MAX_FIELD_NUMBER = 2**29 - 1
PADDING = 16  # zero bytes after the data: a varint or fixed value read at its end reads no further than the array
_SHIFTS = (7 * np.arange(10)).astype(np.uint64)
_TEN = np.arange(10)


def padded(data: np.ndarray) -> np.ndarray:
    """The data with `PADDING` zero bytes after it, which every read below needs."""
    out = np.zeros(len(data) + PADDING, dtype=np.uint8)
    out[: len(data)] = data
    return out


def varints(data: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the varint at each position, its length in bytes; 0 where it is no varint a parser takes: longer than ten
    bytes, or a tenth byte beyond the 64 bits)."""
    first = data[at]
    values = (first & 0x7F).astype(np.uint64)
    lengths = np.ones(len(at), dtype=np.int64)
    longer = np.flatnonzero(first >= 0x80)
    if len(longer):
        window = data[at[longer, None] + _TEN]
        going = window >= 0x80
        ends = np.argmin(going, axis=1)  # the first byte that ends it; 0 when none of the ten does
        ok = ~going.all(axis=1) & ~((ends == 9) & (window[:, 9] > 1))
        parts = (window & 0x7F).astype(np.uint64) << _SHIFTS
        parts[_TEN[None, :] > ends[:, None]] = 0
        values[longer] = np.bitwise_or.reduce(parts, axis=1)
        lengths[longer] = np.where(ok, ends + 1, 0)
    return values, lengths


def fixed(data: np.ndarray, at: np.ndarray, size: int) -> np.ndarray:
    """The little-endian `size`-byte values at each position, as unsigned integers of that size."""
    window = np.ascontiguousarray(data[at[:, None] + np.arange(size)])
    return window.view(np.uint64 if size == 8 else np.uint32).ravel()


@dataclass(frozen=True)
class Fields:
    """Every field occurrence of `count` messages, grouped by field number, each group in message order and, within a
    message, in the order written. `value`: a varint's or fixed field's bits, a length-delimited field's length;
    `start`: where a length-delimited field's bytes begin."""

    count: int
    owner: np.ndarray
    number: np.ndarray
    wire: np.ndarray
    value: np.ndarray
    start: np.ndarray

    def group(self, number: int) -> slice:
        low, high = np.searchsorted(self.number, [number, number + 1])
        return slice(int(low), int(high))


def scan(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, misfit: np.ndarray) -> Fields:
    """The fields of the messages at [starts, ends) of `data` (`padded`). A message that does not read as the wire
    format (a tag or length running past its end, field number 0, a group, an unknown wire type) sets `misfit`: the
    protobuf runtime judges it."""
    count = len(starts)
    position = starts.astype(np.int64, copy=True)
    active = np.flatnonzero(position < ends)
    found: list[tuple[np.ndarray, ...]] = []
    step = 0
    while len(active):
        at, end = position[active], ends[active]
        tag, tag_length = varints(data, at)
        wire = (tag & np.uint64(7)).astype(np.int64)
        number = (tag >> np.uint64(3)).astype(np.int64)
        after = at + tag_length
        value = np.zeros(len(active), dtype=np.uint64)
        start = after.copy()
        following = after.copy()
        bad = (tag_length == 0) | (number == 0) | (number > MAX_FIELD_NUMBER)
        for kind in (VARINT, LEN):
            chosen = np.flatnonzero(wire == kind)
            if len(chosen):
                read, length = varints(data, after[chosen])
                value[chosen] = read
                bad[chosen] |= length == 0
                if kind == VARINT:
                    following[chosen] = after[chosen] + length
                else:
                    start[chosen] = after[chosen] + length
                    following[chosen] = np.where(read > np.uint64(2**40), end[chosen] + 1,
                                                 start[chosen] + np.minimum(read, np.uint64(2**40)).astype(np.int64))
        for kind, size in ((I64, 8), (I32, 4)):
            chosen = np.flatnonzero(wire == kind)
            if len(chosen):
                value[chosen] = fixed(data, after[chosen], size)
                following[chosen] = after[chosen] + size
        bad |= ~np.isin(wire, (VARINT, I64, LEN, I32)) | (following > end)
        if bad.any():
            misfit[active[bad]] = True
            keep = ~bad
            active, number, wire, value, start, following = (
                active[keep], number[keep], wire[keep], value[keep], start[keep], following[keep])
        found.append((active, number, wire, value, start, np.full(len(active), step)))
        position[active] = following
        active = active[following < ends[active]]
        step += 1
    if not found:
        empty = np.zeros(0, dtype=np.int64)
        return Fields(count, empty, empty, empty, np.zeros(0, dtype=np.uint64), empty)
    owner, number, wire, value, start, steps = (np.concatenate(parts) for parts in zip(*found))
    order = np.lexsort((steps, owner, number))
    return Fields(count, owner[order], number[order], wire[order], value[order], start[order])


def packed_varints(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, misfit: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(the run each value belongs to, the values) of packed varint runs at [starts, ends), in run order then in the
    order written; a run that does not end on a varint's end sets `misfit`."""
    position = starts.astype(np.int64, copy=True)
    active = np.flatnonzero(position < ends)
    runs, values, steps = [], [], []
    step = 0
    while len(active):
        read, length = varints(data, position[active])
        following = position[active] + length
        bad = (length == 0) | (following > ends[active])
        if bad.any():
            misfit[active[bad]] = True
            active, read, following = active[~bad], read[~bad], following[~bad]
        runs.append(active)
        values.append(read)
        steps.append(np.full(len(active), step))
        position[active] = following
        active = active[following < ends[active]]
        step += 1
    if not runs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
    run, value, order_step = np.concatenate(runs), np.concatenate(values), np.concatenate(steps)
    order = np.lexsort((order_step, run))
    return run[order], value[order]
