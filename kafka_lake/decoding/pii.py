"""Pseudonymization of `pii_fields`: the lowercase hex HMAC-SHA256 of a value's UTF-8 text.

The key is the platform's secret: it never appears in a repr, a message or an exception.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import deque
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.table_spec import TableSpec


class MissingPiiKey(RuntimeError):
    """A topic declares pii_fields but no key was given to pseudonymize them."""

    def __init__(self, topic: str):
        super().__init__(
            f"topic {topic} declares pii_fields but PII_HMAC_KEY is not set; "
            f"set it to the platform's pseudonymization secret (never land PII in clear)"
        )
        self.topic = topic


class Pseudonymizer:
    """Replaces a value by a stable pseudonym that only the key's holder can recompute."""

    __slots__ = ("_keyed",)

    def __init__(self, key: bytes):
        if not key:
            raise ValueError("the PII key is empty; pseudonyms under an empty key are guessable")
        # Keyed once; each value hashes a copy, so the key is not rehashed per value.
        self._keyed = hmac.new(key, digestmod="sha256")

    def pseudonymize(self, value: Any) -> str | None:
        return None if value is None else self.digest(value)

    def digest(self, value: Any) -> str:
        keyed = self._keyed.copy()
        keyed.update(_text_of(value).encode("utf-8"))
        return keyed.hexdigest()

    def __repr__(self) -> str:
        return "Pseudonymizer(key=<hidden>)"


def pseudonymizer_for(topic: TableSpec, key: bytes | None) -> Pseudonymizer | None:
    """The topic's pseudonymizer, or None when it declares no pii_fields."""
    if not topic.pii_fields:
        return None
    if not key:
        raise MissingPiiKey(topic.topic)
    return Pseudonymizer(key)


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # before int: bool is an int in Python
        return "true" if value else "false"
    return str(value)  # an int's decimal text, a UUID's canonical form, …


class ColumnPseudonymizer:
    """The pseudonyms of a column's values: HMAC-SHA256 (RFC 2104) resumed from the key's two pad states, with
    no Python bytecode per value. It is what `Pseudonymizer.pseudonymize` gives for the value's text (their
    equality is a test); it holds hash states, never the key.

    With `repeats`, each distinct value of the column is hashed once (user ids, countries); without, every
    value is hashed as it comes, which spares the dictionary for values that are all different (IP addresses).
    The result is the same either way."""

    def __init__(self, key: bytes):
        block = (hashlib.sha256(key).digest() if len(key) > 64 else key).ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in block))
        self._outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in block))

    def __call__(self, values: pa.Array, repeats: bool = True) -> pa.Array:
        if repeats:
            encoded = values.dictionary_encode()
            return self._hexdigests(encoded.dictionary).take(encoded.indices)
        digests = self._hexdigests(values.fill_null(""))
        return digests if not values.null_count else pc.if_else(values.is_valid(), digests, pa.scalar(None, pa.string()))

    def _hexdigests(self, texts: pa.Array) -> pa.Array:
        state = type(self._inner)
        inners = list(map(state.copy, repeat(self._inner, len(texts))))
        deque(map(state.update, inners, texts.cast(pa.binary()).to_pylist()), maxlen=0)
        outers = list(map(state.copy, repeat(self._outer, len(texts))))
        deque(map(state.update, outers, map(state.digest, inners)), maxlen=0)
        return _hex_strings(b"".join(map(state.digest, outers)), len(texts))

    def __repr__(self) -> str:
        return "ColumnPseudonymizer(key=<hidden>)"


_HEX_PAIRS = np.frombuffer(b"".join(b"%02x" % byte for byte in range(256)), dtype=np.uint16)  # byte → its 2 hex digits
_DIGEST_SIZE = 32


def _hex_strings(digests: bytes, count: int) -> pa.Array:
    """`count` digests laid end to end, as a string array of their lowercase hex."""
    text = _HEX_PAIRS[np.frombuffer(digests, dtype=np.uint8)].view(np.uint8)
    offsets = np.arange(0, (count + 1) * 2 * _DIGEST_SIZE, 2 * _DIGEST_SIZE, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(text)])
