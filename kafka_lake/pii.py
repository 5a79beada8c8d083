"""Pseudonymization of `pii_fields`: the lowercase hex HMAC-SHA256 of a value's UTF-8 text.

The key is the platform's secret: it never appears in a repr, a message or an exception.
"""

from __future__ import annotations

import hmac
from typing import Any

from kafka_lake.catalog import TopicSpec


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
        if value is None:
            return None
        digest = self._keyed.copy()
        digest.update(_text_of(value).encode("utf-8"))
        return digest.hexdigest()

    def __repr__(self) -> str:
        return "Pseudonymizer(key=<hidden>)"


def pseudonymizer_for(topic: TopicSpec, key: bytes | None) -> Pseudonymizer | None:
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
