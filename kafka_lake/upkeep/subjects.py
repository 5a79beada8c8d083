"""Erasure requests and the subjects they name, as a table stores them: what every landing, compaction, current-state
application and retention run leaves out of a table once a request is accepted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.decoding.pii import Pseudonymizer
from kafka_lake.lake import layout
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.schemas.arrow_mapping import column_at
from kafka_lake.table_spec import TableSpec

ColumnPath = tuple[str, ...]


@dataclass(frozen=True)
class ErasureRequest:
    request_id: str
    subject_ids: tuple[str, ...]
    requested_at: str
    path: str


class ErasureRequestUnreadable(ValueError):
    """An erasure request file that does not read as one: no run that reads requests goes on without it."""


def read_erasure_requests(storage: LakeStorage) -> list[ErasureRequest]:
    """The accepted requests: `{LAKE_ROOT}/_erasure_requests/<id>.json`, {"subject_ids": [...], "requested_at": "…"}.
    A request is accepted once its file is there and reads as one; a file that does not fails the run, naming it."""
    requests = []
    for stored in storage.list_files(layout.ERASURE_REQUESTS_PREFIX):
        request_id = layout.erasure_request_id(stored.path)
        if request_id is None:
            continue
        try:
            document = json.loads(storage.read_listed(stored.path))
            subjects = document["subject_ids"]
            if not isinstance(subjects, list) or not subjects:
                raise ValueError("subject_ids must be a non-empty list")
        except (ValueError, KeyError, TypeError) as error:
            raise ErasureRequestUnreadable(f"erasure request {storage.uri(stored.path)} cannot be read: {error}") from None
        requests.append(ErasureRequest(request_id, tuple(str(s) for s in subjects),
                                       str(document.get("requested_at", "")), stored.path))
    return requests


@dataclass(frozen=True)
class ErasedSubjects:
    """The subjects of accepted requests as one table stores them: per column path a subject field lands in, the
    values that match there (the pseudonyms where the field is pseudonymized). A row is a subject's if any of its
    paths holds one of them; the requests' ids, for audits."""

    by_column: tuple[tuple[ColumnPath, frozenset[str]], ...] = ()
    request_ids: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return any(values for _, values in self.by_column)

    def matching(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        """Whether each row of `table` is a subject's (a path the table lacks, or holding null, matches nothing)."""
        matched = pa.array([False] * table.num_rows)
        for path, values in self.by_column:
            if not values or path[0] not in table.column_names:
                continue
            held = column_at(table, path).cast(pa.string())
            matched = pc.or_(matched, pc.fill_null(pc.is_in(held, value_set=pa.array(sorted(values), pa.string())), False))
        return matched

    def holds_any(self, table: pa.Table) -> bool:
        return bool(self) and table.num_rows > 0 and bool(pc.any(self.matching(table)).as_py())

    def without(self, table: pa.Table) -> tuple[pa.Table, int]:
        """`table` without the subjects' rows, and how many were left out."""
        if not self or table.num_rows == 0:
            return table, 0
        matched = self.matching(table)
        erased = pc.sum(matched).as_py() or 0
        return (table.filter(pc.invert(matched)), erased) if erased else (table, 0)

    def relative_to(self, row: ColumnPath) -> ErasedSubjects:
        """The paths inside the record at `row`, relative to it (a current-state table's row is that record)."""
        inside = tuple((path[len(row):], values) for path, values in self.by_column
                       if len(path) > len(row) and path[:len(row)] == row)
        return ErasedSubjects(inside, self.request_ids)

    @property
    def columns(self) -> tuple[str, ...]:
        """The top-level columns its paths start at: all a file must be read for to tell whether it holds a subject."""
        return tuple(dict.fromkeys(path[0] for path, _ in self.by_column))


class SubjectsPseudonymized(ValueError):
    """A subject field is pseudonymized and no PII key was given to find the subjects' pseudonyms."""


def erased_subjects(topic: TableSpec, requests: list[ErasureRequest], pii_key: bytes | None) -> ErasedSubjects:
    """The requests' subjects as `topic`'s table stores them, per column path of its `subject_field`: pseudonymized
    where the path is a PII field."""
    subjects = frozenset(subject for request in requests for subject in request.subject_ids)
    if not subjects or not topic.subject_fields:
        return ErasedSubjects((), tuple(r.request_id for r in requests))
    by_column = []
    for field_path, column in zip(topic.subject_fields, topic.subject_columns):
        values = subjects
        if field_path in topic.pii_fields:
            if pii_key is None:
                raise SubjectsPseudonymized(
                    f"{topic.topic}: subject_field {'.'.join(field_path)} is pseudonymized; set PII_HMAC_KEY to match "
                    f"erasure requests on it")
            pseudonymizer = Pseudonymizer(pii_key)
            values = frozenset(pseudonymizer.digest(subject) for subject in subjects)
        by_column.append((column, values))
    return ErasedSubjects(tuple(by_column), tuple(r.request_id for r in requests))


def accepted_erasures(storage: LakeStorage, topic: TableSpec, pii_key: bytes | None) -> ErasedSubjects:
    """What every run writing `topic`'s table leaves out: the subjects of every accepted request (none without a
    `subject_field`; the requests are then not read)."""
    if not topic.subject_fields:
        return ErasedSubjects()
    return erased_subjects(topic, read_erasure_requests(storage), pii_key)
