"""The JSON documents the platform writes into the lake (hour manifests, compaction manifests, audit entries): one
codec, versioned, so a lake written by an earlier release stays readable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Generic, TypeVar

from pydantic import TypeAdapter, ValidationError

Document = TypeVar("Document")
Upgrade = Callable[[dict], dict]


class DocumentError(ValueError):
    """A lake document that cannot be read; the message names it."""


class DocumentCodec(Generic[Document]):
    """`kind` (a frozen dataclass) as JSON with its format number `version`; a document of an older format is upgraded
    step by step as it is read: `upgrades[n]` turns a format-n document into format n+1. A document written before
    formats were numbered reads as `unnumbered`."""

    def __init__(self, kind: type[Document], name: str, version: int, upgrades: dict[int, Upgrade] | None = None,
                 unnumbered: int | None = None):
        self._adapter = TypeAdapter(kind)
        self._name = name
        self.version = version
        self._upgrades = upgrades or {}
        self._unnumbered = unnumbered

    def to_json(self, document: Document) -> bytes:
        fields = self._adapter.dump_python(document, mode="json")
        return json.dumps({**fields, "format": self.version}, indent=1, sort_keys=True).encode()

    def from_json(self, data: bytes, where: str = "") -> Document:
        try:
            fields = json.loads(data)
            if not isinstance(fields, dict):
                raise ValueError("not a JSON object")
            version = fields.pop("format", self._unnumbered)
            while version in self._upgrades:
                fields, version = self._upgrades[version](fields), version + 1
            if version != self.version:
                raise ValueError(f"unsupported format {version!r} (this release reads format {self.version})")
            return self._adapter.validate_python(fields)
        except (ValueError, ValidationError) as error:
            raise DocumentError(f"{self._name} {where} cannot be read: {error}") from None
