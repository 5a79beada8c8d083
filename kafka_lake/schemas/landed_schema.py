"""The one schema every schema version of a table lands in, and each version's decoded rows brought to it: every file of
a table then has the same columns, so any Parquet reader reads a folder of many versions as one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from kafka_lake.kafka.records import KAFKA_COLUMNS
from kafka_lake.schemas.arrow_mapping import SCHEMA_VERSION_METADATA, arrow_schema_for
from kafka_lake.schemas.avro_types import AvroType, named_types, resolve
from kafka_lake.schemas.column_lineage import Member, Slot, branches_of, lineage
from kafka_lake.schemas.type_widening import shared_column_type
from kafka_lake.table_spec import TableSpec

# None: the values are already as the table holds them.
Conform = Callable[[pa.Array], pa.Array] | None


class LandedSchemaError(ValueError):
    """A column no single type holds for every version; the message names the field and both versions."""


_COLUMN_TYPES = {pa.int32(): "int", pa.int64(): "bigint", pa.float32(): "float", pa.float64(): "double"}
_ARROW_TYPES = {name: arrow for arrow, name in _COLUMN_TYPES.items()}


# The columns come from the versions' own Arrow schemas (`arrow_mapping`) placed by their lineage (`column_lineage`):
# a field in the column of its name or of the field its alias renamed, a numeric column in the widest type any version
# gives it (int → long, int or float → double: the widenings the catalog allows), a record's struct with the fields of
# every version, a union's struct with every member any version has. A version's rows take the table's types; what the
# version lacks is null.
class LandedSchema:
    """The columns a topic's table lands in, whatever schema version a record was written with."""

    def __init__(self, topic: TableSpec):
        self._topic = topic
        self._versions = {version.version: index for index, version in enumerate(topic.schema_versions)}
        self._root = lineage([version.schema for version in topic.schema_versions])
        self._own = {version.version: arrow_schema_for(version, topic.pii_fields, topic.columns_of(version))
                     for version in topic.schema_versions}
        self._types = _Types()
        for version in topic.schema_versions:
            label = f"version {version.version} ({version.file})"
            own = self._own[version.version]
            values = pa.struct(list(own)[: len(own) - len(KAFKA_COLUMNS)])
            _Merge(self._types, self._versions[version.version], version.schema, label).slot(self._root, version.schema,
                                                                                              values, "")
        renamed = dict(topic.rename)
        values = self._types.slot_type(self._root)
        comments = {f.name: f.metadata for own in self._own.values() for f in own if f.metadata}
        fields = [pa.field(renamed.get(f.name, f.name), f.type) for f in values]
        self._values = [f.with_metadata(comments[f.name]) if f.name in comments else f for f in fields]
        self._conformers: dict[int, list[tuple[int | None, Conform]]] = {}

    @property
    def value_fields(self) -> list[pa.Field]:
        """The table's columns before the Kafka columns: every version's fields, in the order they first appeared."""
        return list(self._values)

    def schema_for(self, version: int) -> pa.Schema:
        """The schema a version's rows land with: the table's columns, the Kafka columns, the version in the metadata."""
        return pa.schema([*self._values, *KAFKA_COLUMNS], metadata={SCHEMA_VERSION_METADATA: str(version)})

    def own_schema(self, version: int) -> pa.Schema:
        """The schema of a version's rows as its own fields give it (how landings before the table's schema wrote)."""
        return self._own[version]

    def conform(self, version: int, rows: pa.Table) -> pa.Table:
        """A version's decoded rows (its own columns, then the Kafka columns) in the table's columns."""
        target = self.schema_for(version)
        if rows.schema.equals(target):
            return rows
        if version not in self._conformers:
            self._conformers[version] = self._columns_of(version)
        columns = []
        for (source, conform), column in zip(self._conformers[version], self._values):
            if source is None:
                columns.append(pa.nulls(rows.num_rows, column.type))
            else:
                values = rows.column(source)
                columns.append(values if conform is None else
                               pa.chunked_array([conform(chunk) for chunk in values.chunks], type=column.type))
        return pa.Table.from_arrays(columns + [rows.column(f.name) for f in KAFKA_COLUMNS], schema=target)

    def _columns_of(self, version: int) -> list[tuple[int | None, Conform]]:
        """Per table column: the version's column it comes from (None: the version has none) and how it converts."""
        index = self._versions[version]
        schema = self._topic.version(version).schema
        own = self._own[version]
        values = pa.struct(list(own)[: len(own) - len(KAFKA_COLUMNS)])
        return _Conformers(self._types, index, schema).fields(self._root.members[0], schema, values,
                                                               self._types.slot_type(self._root))


class _Types:
    """The Arrow type of each place of the table's shape, widened over the versions merged so far."""

    def __init__(self) -> None:
        self.leaves: dict[int, tuple[pa.DataType, str]] = {}  # id(member) → (type, the version that gave it)
        # id(slot) → (type, version): a place that holds one value whatever its Avro type (a pseudonym, JSON text of a
        # record that contains itself, a VariableScaleDecimal's text).
        self.whole: dict[int, tuple[pa.DataType, str]] = {}
        self.structured: dict[int, str] = {}  # id(slot) → a version that holds its values in their columns

    def slot_type(self, slot: Slot) -> pa.DataType:
        if id(slot) in self.whole:
            return self.whole[id(slot)][0]
        if slot.is_union:
            return pa.struct([pa.field(f"member{index}", self.member_type(member))
                              for index, member in enumerate(slot.members)])
        return self.member_type(slot.members[0])

    def member_type(self, member: Member) -> pa.DataType:
        if member.kind == "record":
            return pa.struct([pa.field(column, self.slot_type(slot)) for column, slot in member.columns.items()])
        if member.kind == "array":
            assert member.item is not None
            return pa.list_(pa.field("element", self.slot_type(member.item)))
        if member.kind == "map":
            assert member.item is not None
            return pa.map_(pa.string(), pa.field("value", self.slot_type(member.item)))
        return self.leaves[id(member)][0]


def _nested(kind: pa.DataType) -> bool:
    return pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_map(kind)


class _Merge:
    """One version's Arrow types merged into the table's, place by place."""

    def __init__(self, types: _Types, index: int, schema: dict, label: str):
        self.types, self.index, self.names, self.label = types, index, named_types(schema), label

    def slot(self, slot: Slot, node: AvroType, kind: pa.DataType, path: str) -> None:
        chosen = slot.branches[self.index]
        if _nested(kind):
            self.types.structured.setdefault(id(slot), self.label)
        # One value where the schema has several types or fields: what the version's mapping made of them (a pseudonym,
        # JSON text). Versions whose one type there is a value land in that column alike.
        if not _nested(kind) and (len(chosen) > 1 or slot.members[chosen[0]].kind != "leaf" or id(slot) in self.types.whole):
            if id(slot) in self.types.structured:
                raise LandedSchemaError(f"column {path!r} holds one value in {self.label} and its fields in "
                                        f"{self.types.structured[id(slot)]}; a field stays pseudonymized, or a record, in "
                                        f"every version")
            self.widen(self.types.whole, id(slot), kind, path)
            for earlier in slot.members:  # versions before that landed a value of one type here
                if earlier.kind == "leaf" and id(earlier) in self.types.leaves:
                    self.widen(self.types.whole, id(slot), self.types.leaves[id(earlier)][0], path)
            return
        if id(slot) in self.types.whole and _nested(kind):
            raise LandedSchemaError(f"column {path!r} holds its fields in {self.label} and one value in "
                                    f"{self.types.whole[id(slot)][1]}; a field stays pseudonymized, or a record, in every "
                                    f"version")
        branches = branches_of(node, self.names)
        if len(chosen) == 1:
            self.member(slot.members[chosen[0]], branches[0], kind, path)
            return
        for position, (branch, member) in enumerate(zip(branches, chosen)):
            self.member(slot.members[member], branch, kind.field(position).type, path)

    def member(self, member: Member, node: AvroType, kind: pa.DataType, path: str) -> None:
        node = resolve(node, self.names)
        if member.kind == "leaf":
            self.widen(self.types.leaves, id(member), kind, path)
        elif member.kind == "record":
            for position, (avro_field, column) in enumerate(zip(node["fields"], member.fields_of[self.index])):
                self.slot(member.columns[column], avro_field["type"], kind.field(position).type,
                          f"{path}.{column}" if path else column)
        else:
            assert member.item is not None
            item = kind.value_type if member.kind == "array" else kind.item_type
            self.slot(member.item, node["items" if member.kind == "array" else "values"], item,
                      f"{path}[]" if member.kind == "array" else f"{path}{{}}")

    def widen(self, types: dict[int, tuple[pa.DataType, str]], key: int, kind: pa.DataType, path: str) -> None:
        if key not in types:
            types[key] = (kind, self.label)
            return
        known, label = types[key]
        if known.equals(kind) or pa.types.is_null(kind):
            return
        if pa.types.is_null(known):  # a field of Avro type null: any column holds its nulls
            types[key] = (kind, self.label)
            return
        shared = shared_column_type(_COLUMN_TYPES.get(known, ""), _COLUMN_TYPES.get(kind, ""))
        if shared is None:
            self.conflict(path, types[key], kind)
        types[key] = (_ARROW_TYPES[shared], label if _ARROW_TYPES[shared].equals(known) else self.label)

    def conflict(self, path: str, known: tuple[pa.DataType, str], kind: pa.DataType) -> NoReturn:
        raise LandedSchemaError(
            f"column {path!r} is {known[0]} in {known[1]} but {kind} in {self.label}: no one column holds both versions' "
            f"values; only int → long, int → double and float → double widen a column"
        )


class _Conformers:
    """How one version's values become the table's, place by place; None where they already are."""

    def __init__(self, types: _Types, index: int, schema: dict):
        self.types, self.index, self.names = types, index, named_types(schema)

    def slot(self, slot: Slot, node: AvroType, kind: pa.DataType, target: pa.DataType) -> Conform:
        if kind.equals(target):
            return None
        if id(slot) in self.types.whole or (not _nested(kind) and not slot.is_union and slot.members[0].kind == "leaf"):
            return _cast(target)
        branches = branches_of(node, self.names)
        chosen = slot.branches[self.index]
        if not slot.is_union:
            return self.member(slot.members[0], branches[0], kind, target)
        if len(chosen) == 1:  # a version whose one type is one member of the table's union
            member = chosen[0]
            inner = self.member(slot.members[member], branches[0], kind, target.field(member).type)
            return _in_member(member, inner, target)
        sources: list[tuple[int | None, Conform]] = []
        for member in range(len(slot.members)):
            if member not in chosen:
                sources.append((None, None))
                continue
            position = chosen.index(member)
            sources.append((position, self.member(slot.members[member], branches[position], kind.field(position).type,
                                                  target.field(member).type)))
        return _struct_of(sources, target)

    def member(self, member: Member, node: AvroType, kind: pa.DataType, target: pa.DataType) -> Conform:
        if kind.equals(target):
            return None
        node = resolve(node, self.names)
        if member.kind == "leaf":
            return _cast(target)
        if member.kind == "record":
            return _struct_of(self.fields(member, node, kind, target), target)
        assert member.item is not None
        if member.kind == "array":
            return _list_of(self.slot(member.item, node["items"], kind.value_type, target.value_type), target)
        return _map_of(self.slot(member.item, node["values"], kind.item_type, target.item_type), target)


    def fields(self, member: Member, record: dict, kind: pa.DataType, target: pa.DataType) -> list[tuple[int | None, Conform]]:
        """Per field of the table's record (`target`): the version's field it comes from (None: the version has none)
        and how its values convert."""
        landed = member.fields_of[self.index]
        sources: list[tuple[int | None, Conform]] = []
        for column, field in zip(member.columns, target):
            if column not in landed:
                sources.append((None, None))
                continue
            position = landed.index(column)
            sources.append((position, self.slot(member.columns[column], record["fields"][position]["type"],
                                                kind.field(position).type, field.type)))
        return sources


def _null_mask(array: pa.Array) -> pa.Array | None:
    return None if array.null_count == 0 else pc.is_null(array)


def _cast(target: pa.DataType) -> Conform:
    return lambda array: array.cast(target)


def _struct_of(sources: list[tuple[int | None, Conform]], target: pa.DataType) -> Conform:
    fields = list(target)

    def conform(array: pa.Array) -> pa.Array:
        columns = []
        for (position, convert), field in zip(sources, fields):
            if position is None:
                columns.append(pa.nulls(len(array), field.type))
            else:
                child = array.field(position)
                columns.append(child if convert is None else convert(child))
        return pa.StructArray.from_arrays(columns, fields=fields, mask=_null_mask(array))

    return conform


def _in_member(member: int, inner: Conform, target: pa.DataType) -> Conform:
    """Values of one type as the `member`-th field of the table's union struct."""
    fields = list(target)

    def conform(array: pa.Array) -> pa.Array:
        value = array if inner is None else inner(array)
        columns = [value if index == member else pa.nulls(len(array), field.type) for index, field in enumerate(fields)]
        return pa.StructArray.from_arrays(columns, fields=fields, mask=_null_mask(array))

    return conform


def _rebased(array: pa.Array) -> tuple[pa.Array, int, int]:
    """A list or map array's offsets from 0, and the stretch of its child they span."""
    offsets = array.offsets
    first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
    return pc.subtract(offsets, pa.scalar(first, offsets.type)), first, last - first


def _list_of(item: Conform, target: pa.DataType) -> Conform:
    def conform(array: pa.Array) -> pa.Array:
        offsets, first, length = _rebased(array)
        values = array.values.slice(first, length)
        return pa.ListArray.from_arrays(offsets, values if item is None else item(values), type=target,
                                        mask=_null_mask(array))

    return conform


def _map_of(item: Conform, target: pa.DataType) -> Conform:
    def conform(array: pa.Array) -> pa.Array:
        offsets, first, length = _rebased(array)
        items = array.items.slice(first, length)
        return pa.MapArray.from_arrays(offsets, array.keys.slice(first, length), items if item is None else item(items),
                                       type=target, mask=_null_mask(array))

    return conform
