"""Which column of a table each field of each schema version lands in, and which member of a union's struct each of
its types is: decided once from the versions in order, so that every version shares the table's columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kafka_lake.schemas.avro_types import (
    AvroType,
    named_types,
    non_null_members,
    refers_back,
    resolve,
    type_name,
    union_member_key,
)


class LineageError(ValueError):
    """Two fields of one version would land in one column, or a place holds a record in one version and something
    else in another; the message names the field, `version` (an index of the versions given) the version."""

    def __init__(self, message: str, version: int = 0):
        super().__init__(message)
        self.version = version


@dataclass
class Slot:
    """One place of the table's shape where values sit (a field, an array's items, a map's values): the kinds of value
    it holds across versions, one member each; two or more make a union's struct of `member0, member1, …`."""

    members: list[Member] = field(default_factory=list)
    # Per version (its index among the versions): which member each of its non-null types is, in the union's order.
    branches: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def is_union(self) -> bool:
        return len(self.members) > 1


@dataclass
class Member:
    kind: str  # record, array, map, or leaf (any other type, and a field where a record contains itself)
    keys: set[str] = field(default_factory=set)  # the union member keys it has had (int, then long when widened)
    columns: dict[str, Slot] = field(default_factory=dict)  # a record's columns, in the order they appeared
    names: dict[str, str] = field(default_factory=dict)  # a record's field names and columns, lowercase → column
    # Per version: the column of each of the record's fields, in the version's order.
    fields_of: dict[int, tuple[str, ...]] = field(default_factory=dict)
    item: Slot | None = None  # an array's items, a map's values


# A field lands in the column of its name. A field whose name is new and whose Avro `aliases` name a column of its
# record (a field an earlier version had) is that field renamed, Avro's way: it lands in that column, which keeps its
# first name (the Hive layout matches Parquet columns by name; one name keeps one column). A union's members are
# identified by their named type's name, or their kind (`union_member_key`): a member a version adds becomes the next
# member of the union's struct, so `member0, member1, …` keep what they hold in every version. A type that is no union
# is a union of one member, so a field that becomes a union keeps its values in its first member; a lone member may
# widen (int → long) and stay that member.
def lineage(schemas: Sequence[dict]) -> Slot:
    """The table's shape from its versions' schemas, in order: the top-level record is the one member of the root."""
    root = Slot()
    for index, schema in enumerate(schemas):
        try:
            _Walk(index, schema).slot(root, schema, "")
        except LineageError as error:
            raise LineageError(str(error), index) from None
    return root


def column_paths(root: Slot, version: int, schema: dict) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Every field path (through records and nullable unions, as the catalog's keys name fields) of one version, to
    the column path it lands in; only those that differ."""
    found: dict[tuple[str, ...], tuple[str, ...]] = {}
    names = named_types(schema)

    def visit(slot: Slot, node: AvroType, fields: tuple[str, ...], columns: tuple[str, ...], opened: list[int]) -> None:
        node = resolve(node, names)
        members = non_null_members(node) if isinstance(node, list) else [node]
        if len(members) != 1 or version not in slot.branches:
            return
        record = resolve(members[0], names)
        member = slot.members[slot.branches[version][0]]
        if type_name(record) not in ("record", "error") or member.kind != "record" or id(record) in opened:
            return
        for avro_field, column in zip(record.get("fields", []), member.fields_of[version]):
            path, landed = (*fields, avro_field["name"]), (*columns, column)
            if path != landed:
                found[path] = landed
            visit(member.columns[column], avro_field["type"], path, landed, [*opened, id(record)])

    visit(root, schema, (), (), [])
    return found


class _Walk:
    """One version's schema merged into the shape."""

    def __init__(self, index: int, schema: dict):
        self.index = index
        self.names = named_types(schema)
        self.open_records: list[int] = []

    def slot(self, slot: Slot, node: AvroType, path: str) -> None:
        branches = branches_of(node, self.names)
        if len(slot.members) <= 1 and len(branches) == 1:
            chosen = [0]
            if not slot.members:
                slot.members.append(Member(_kind(branches[0])))
        else:
            chosen = [self._member_for(slot, branch) for branch in branches]
        slot.branches[self.index] = tuple(chosen)
        for branch, index in zip(branches, chosen):
            self.member(slot.members[index], branch, path)

    def _member_for(self, slot: Slot, branch: AvroType) -> int:
        key = union_member_key(branch)
        for index, member in enumerate(slot.members):
            if key in member.keys:
                return index
        slot.members.append(Member(_kind(branch)))
        return len(slot.members) - 1

    def member(self, member: Member, node: AvroType, path: str) -> None:
        kind = _kind(node)
        if kind != member.kind:
            raise LineageError(f"field {path or 'the value'!r} holds {_what(kind)} in this version, where an earlier one "
                               f"holds {_what(member.kind)} in the same column")
        member.keys.add(union_member_key(node))
        if kind == "record":
            self.record(member, node, path)
        elif kind in ("array", "map"):
            member.item = member.item or Slot()
            self.slot(member.item, node["items" if kind == "array" else "values"], f"{path}[]" if kind == "array" else f"{path}{{}}")

    def record(self, member: Member, record: dict, path: str) -> None:
        self.open_records.append(id(record))
        landed: list[str] = []
        for avro_field in record.get("fields", []):
            name = avro_field["name"]
            column = member.names.get(name.lower()) or next(
                (member.names[alias.lower()] for alias in avro_field.get("aliases", ()) if alias.lower() in member.names), None)
            where = f"{path}.{name}" if path else name
            if column is None:
                column = name
            elif column in landed:
                other = record["fields"][landed.index(column)]["name"]
                raise LineageError(f"fields {other!r} and {name!r} of {path or 'the record'} would both land in column "
                                   f"{column!r} (a field keeps the column of its name, or of the earlier field its "
                                   f"aliases name)")
            landed.append(column)
            member.names.setdefault(name.lower(), column)
            member.names.setdefault(column.lower(), column)
            slot = member.columns.setdefault(column, Slot())
            if refers_back(avro_field["type"], self.open_records, self.names):
                self.leaf(slot, where)  # where the record recurs: one column of JSON text
            else:
                self.slot(slot, avro_field["type"], where)
        member.fields_of[self.index] = tuple(landed)
        self.open_records.pop()

    def leaf(self, slot: Slot, path: str) -> None:
        if not slot.members:
            slot.members.append(Member("leaf"))
        elif slot.members[0].kind != "leaf" or slot.is_union:
            raise LineageError(f"field {path!r} lands as JSON text in this version, where an earlier one lands it in "
                               f"columns")
        slot.branches[self.index] = (0,)


def branches_of(node: AvroType, names: dict[str, AvroType]) -> list[AvroType]:
    """The types a place's values have, resolved: a union's members but null, or the one type of a place that is no
    union; a place of type null alone holds "null"."""
    node = resolve(node, names)
    branches = [resolve(member, names) for member in non_null_members(node)] if isinstance(node, list) else [node]
    return branches or ["null"]


def _kind(node: AvroType) -> str:
    kind = type_name(node)
    if kind in ("record", "error"):
        return "record"
    return kind if kind in ("array", "map") else "leaf"


def _what(kind: str) -> str:
    return {"record": "a record", "array": "an array", "map": "a map"}.get(kind, "a value of no record, array or map")
