"""A Spark Python worker's process tuned for landing tasks: glibc keeps the memory a batch frees for the next batch,
and the garbage collector stays off the hot loop with the process's earlier objects frozen out of every sweep.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# glibc's mallopt parameters (malloc.h), and the values the task sets: no block a batch allocates is mapped
# alone, and up to this much freed memory stays with the process.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 * 2**20  # glibc's largest
_TRIM_THRESHOLD = 128 * 2**20


@functools.cache  # once a process: a forked child keeps its parent's setting
def keep_freed_batch_memory() -> None:
    """Tells glibc's allocator to keep the memory a batch frees for the next batch.

    A batch allocates and frees the same few tens of megabytes (values, payloads spliced into blocks, columns): by
    default glibc maps each large block afresh and hands freed memory back to the kernel, which zeroes every page
    again on its first touch: page faults were a sixth of a task's CPU. Peak memory stays what it was; freed memory up to
    `_TRIM_THRESHOLD` stays with the process until it ends. Without glibc (musl, macOS) nothing changes."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


@contextmanager
def collector_held() -> Iterator[None]:
    """Keeps the garbage collector off the task's hot loop, which collects every few batches itself.

    Every consumed message is a tracked object: the automatic collections they trigger would walk each batch's
    messages again and again as they age. Every full collection (the task's own, and the one Spark's Python worker
    makes after each task) would also walk the ~100k objects the process held before its first task (pyarrow's,
    polars', Spark's modules), 40-50 ms each time: the first task of a process freezes those out of every sweep for
    the process's life, after one collection so that no garbage is frozen with them (one of them that later becomes
    cyclic garbage stays: once a process, bounded by what it held then). What a task makes stays collectable. Tasks
    sharing a process (threads) hold the collector together: the last one out restores it."""
    global _holders, _collector_was_enabled, _frozen_in
    with _holders_lock:
        if _holders == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
            if _frozen_in != os.getpid():  # a forked child holds its parent's frozen objects, and its own
                gc.collect()
                gc.freeze()
                _frozen_in = os.getpid()
        _holders += 1
    try:
        yield
    finally:
        with _holders_lock:
            _holders -= 1
            if _holders == 0 and _collector_was_enabled:
                gc.enable()


_holders_lock = threading.Lock()
_holders = 0
_collector_was_enabled = True
_frozen_in = 0  # the process whose objects from before its first task are frozen
