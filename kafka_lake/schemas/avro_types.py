"""Questions about Avro schemas (as JSON) that the catalog and the table mapping ask.

Field lookup by dotted path, time-field types, and what counts as a compatible evolution.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kafka_lake.schemas.type_widening import avro_type_widens

AvroType = Any  # a str, dict or list, as in the .avsc JSON

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
# The most digits a decimal lands with (as text past the 38 readers hold as decimals): more than any database declares
# (PostgreSQL's NUMERIC(p) stops at 1000), and where turning a number into digits starts to cost time growing with the
# square of its length (Python refuses longer int texts by default for that reason).
MAX_DECIMAL_DIGITS = 4300
NAMED_KINDS = ("record", "error", "enum", "fixed")  # the types a schema defines by name


def named_types(schema: AvroType) -> dict[str, AvroType]:
    """Every named type (record, enum, fixed) defined in `schema`, by short and full name."""
    found: dict[str, AvroType] = {}

    def visit(node: AvroType, namespace: str | None) -> None:
        if isinstance(node, list):
            for member in node:
                visit(member, namespace)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in NAMED_KINDS:
                name = node["name"]
                space = node.get("namespace", namespace)
                full = name if "." in name or not space else f"{space}.{name}"
                found[name.rsplit(".", 1)[-1]] = node
                found[full] = node
                if kind in ("record", "error"):
                    for child in node.get("fields", []):
                        visit(child["type"], full.rsplit(".", 1)[0] if "." in full else None)
            elif kind == "array":
                visit(node["items"], namespace)
            elif kind == "map":
                visit(node["values"], namespace)
            elif isinstance(kind, (dict, list)):
                visit(kind, namespace)

    visit(schema, None)
    return found


def resolve(node: AvroType, names: dict[str, AvroType]) -> AvroType:
    """Follows a reference to a named type; `{"type": "long"}` style wrappers become their type."""
    if isinstance(node, str) and node not in _PRIMITIVES:
        return names.get(node, names.get(node.rsplit(".", 1)[-1], node))
    if isinstance(node, dict) and isinstance(node.get("type"), (dict, list)) and "logicalType" not in node:
        return resolve(node["type"], names)
    return node


def rewritten(node: Any, change: Callable[[dict], dict]) -> Any:
    """A copy of a schema in which every type node (a mapping with `type`, a field's type, an item or value type,
    a union member) has been given to `change` after its own children were rewritten; the input is left as it was."""
    if isinstance(node, list):
        return [rewritten(member, change) for member in node]
    if not isinstance(node, dict):
        return node
    copy = dict(node)
    if isinstance(copy.get("type"), (dict, list)):
        copy["type"] = rewritten(copy["type"], change)
    if isinstance(copy.get("fields"), list):
        copy["fields"] = [dict(f, type=rewritten(f.get("type"), change)) if isinstance(f, dict) else f
                          for f in copy["fields"]]
    for key in ("items", "values"):
        if key in copy:
            copy[key] = rewritten(copy[key], change)
    return change(copy)


def non_null_members(union: list) -> list[AvroType]:
    return [member for member in union if member != "null"]


def json_keys(field: dict) -> tuple[str, ...]:
    """The keys a JSON object may hold a record field's value under: its name, then its Avro `aliases` in order (the
    key a producer writes that is no Avro name: `$schema`, `@timestamp`, `+1`)."""
    aliases = field.get("aliases")
    if not aliases:
        return (field["name"],)
    return (field["name"], *(alias for alias in dict.fromkeys(aliases) if alias != field["name"]))


def unwrap_nullable(node: AvroType) -> AvroType:
    """`["null", T]` (in either order) → T; anything else unchanged."""
    if isinstance(node, list):
        members = non_null_members(node)
        if len(members) == 1 and len(node) == 2:
            return members[0]
    return node


def field_type_at(schema: AvroType, path: tuple[str, ...]) -> AvroType | None:
    """The Avro type of the field at a dotted path through nested records, or None."""
    names = named_types(schema)
    node: AvroType = schema
    for step in path:
        node = resolve(unwrap_nullable(resolve(node, names)), names)
        if not isinstance(node, dict) or node.get("type") not in ("record", "error"):
            return None
        match = next((f for f in node.get("fields", []) if f["name"] == step), None)
        if match is None:
            return None
        node = match["type"]
    return resolve(node, names)


def json_keys_at(schema: AvroType, path: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The JSON keys (`json_keys`) of each step of a dotted field path through nested records; a step no record has
    keeps its name alone."""
    names = named_types(schema)
    node: AvroType = schema
    keys = []
    for step in path:
        node = resolve(unwrap_nullable(resolve(node, names)), names)
        fields = node.get("fields", []) if isinstance(node, dict) and node.get("type") in ("record", "error") else []
        match = next((f for f in fields if f["name"] == step), None)
        keys.append(json_keys(match) if match is not None else (step,))
        node = match["type"] if match is not None else None
    return tuple(keys)


def refers_back(node: AvroType, open_records: Collection[int], names: dict[str, AvroType]) -> bool:
    """Whether a field's type reaches, through unions, arrays and maps, one of the records that contain the field
    (`open_records`, by id of their schema node): such a field is where a recursive record recurs, and it lands
    as JSON text. A record met on the way is not followed: its own fields answer for themselves."""
    node = resolve(node, names)
    if isinstance(node, list):
        return any(refers_back(member, open_records, names) for member in node)
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if kind in ("record", "error"):
        return id(node) in open_records
    if kind == "array":
        return refers_back(node.get("items"), open_records, names)
    if kind == "map":
        return refers_back(node.get("values"), open_records, names)
    return False


def json_field_at(schema: AvroType, path: tuple[str, ...]) -> int | None:
    """The index of the step of a dotted field path that names a field landed as JSON text (see `refers_back`),
    or None when the path stays in columns."""
    names = named_types(schema)
    node: AvroType = schema
    open_records: list[int] = []
    for index, step in enumerate(path):
        node = resolve(unwrap_nullable(resolve(node, names)), names)
        if not isinstance(node, dict) or node.get("type") not in ("record", "error"):
            return None
        open_records.append(id(node))
        match = next((f for f in node.get("fields", []) if f["name"] == step), None)
        if match is None:
            return None
        if refers_back(match["type"], open_records, names):
            return index
        node = match["type"]
    return None


def type_name(node: AvroType) -> str:
    """The primitive or complex kind of a type, ignoring logical types."""
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return "union"
    kind = node.get("type")
    return type_name(kind) if isinstance(kind, (dict, list)) else kind


def logical_type(node: AvroType) -> str | None:
    return node.get("logicalType") if isinstance(node, dict) else None


def is_time_type(node: AvroType) -> bool:
    """Whether a field can place a record by event time: a long (logical timestamp or epoch ms) or a string."""
    node = unwrap_nullable(node)
    return type_name(node) in ("long", "string")


def evolution_problem(older: dict, newer: dict) -> str | None:
    """Why `newer` cannot follow `older` in one table (a field's type narrowed or changed), or None. A field of `newer`
    that an `aliases` entry names after a field `older` has and `newer` lacks is that field renamed (Avro's way)."""
    return _record_problem(older, newer, named_types(older), named_types(newer), prefix="", open_records=[])


def renamed_field(new_record: dict, old_name: str, old_names: set[str]) -> dict | None:
    """The field of `new_record` that Avro's rename gives `old_name` (a field no longer there by that name): the one
    naming it among its aliases, whose own name is new."""
    if any(f["name"] == old_name for f in new_record.get("fields", [])):
        return None
    return next((f for f in new_record.get("fields", []) if f["name"] not in old_names and old_name in f.get("aliases", ())),
                None)


def _record_problem(old: dict, new: dict, old_names, new_names, prefix: str, open_records: list[int]) -> str | None:
    if id(old) in open_records:  # a record that contains itself: its fields were compared where it opened
        return None
    open_records = [*open_records, id(old)]
    new_fields = {f["name"]: f for f in new.get("fields", [])}
    old_field_names = {f["name"] for f in old.get("fields", [])}
    for old_field in old.get("fields", []):
        new_field = new_fields.get(old_field["name"]) or renamed_field(new, old_field["name"], old_field_names)
        if new_field is None:
            continue  # a removed field stays in the table as a column the new rows leave null
        path = f"{prefix}{old_field['name']}"
        problem = _type_problem(old_field["type"], new_field["type"], old_names, new_names, path, open_records)
        if problem:
            return problem
    return None


def _type_problem(old: AvroType, new: AvroType, old_names, new_names, path: str, open_records: list[int]) -> str | None:
    old, new = resolve(old, old_names), resolve(new, new_names)
    old_kind, new_kind = type_name(old), type_name(new)
    if old_kind == "union" or new_kind == "union":
        old_members = [resolve(m, old_names) for m in non_null_members(old if isinstance(old, list) else [old])]
        new_members = [resolve(m, new_names) for m in non_null_members(new if isinstance(new, list) else [new])]
        if len(old_members) == 1 and len(new_members) == 1:
            # Nullability may change; the value type must stay compatible.
            return _type_problem(old_members[0], new_members[0], old_names, new_names, path, open_records)
        # A union may gain members (Avro's resolution and the registry's BACKWARD mode accept it: its struct gains a
        # field); each member it had keeps its type.
        new_by_key = {union_member_key(m): m for m in new_members}
        dropped = [union_member_key(m) for m in old_members if union_member_key(m) not in new_by_key]
        if dropped:
            return (f"field {path!r} changed its union from {_describe(old)} to {_describe(new)}: a union may gain "
                    f"members, not lose {', '.join(dropped)}")
        for member in old_members:
            problem = _type_problem(member, new_by_key[union_member_key(member)], old_names, new_names, path, open_records)
            if problem:
                return problem
        return None
    if logical_type(old) != logical_type(new):
        return f"field {path!r} changed logical type from {logical_type(old)} to {logical_type(new)}"
    if old_kind in ("record", "error"):
        if new_kind not in ("record", "error"):
            return f"field {path!r} changed from a record to {new_kind}"
        return _record_problem(old, new, old_names, new_names, f"{path}.", open_records)
    if old_kind in ("array", "map"):
        if new_kind != old_kind:
            return f"field {path!r} changed from {old_kind} to {new_kind}"
        key = "items" if old_kind == "array" else "values"
        return _type_problem(old[key], new[key], old_names, new_names, f"{path}[]", open_records)
    if old_kind == "enum":
        if new_kind != "enum":
            return f"field {path!r} changed from enum to {new_kind}"
        return None  # enums land as strings; new symbols are fine
    if old_kind == "fixed":
        return None if new_kind in ("fixed", "bytes") else f"field {path!r} changed from fixed to {new_kind}"
    if old_kind == "decimal" or logical_type(old) == "decimal":
        if (old.get("precision"), old.get("scale")) != (new.get("precision"), new.get("scale")):
            return f"field {path!r} changed decimal precision/scale"
        return None
    if not avro_type_widens(old_kind, new_kind):
        return f"field {path!r} changed type from {old_kind} to {new_kind} (only int → long, int → float/double and float → double can share a table column)"
    return None


def union_member_key(node: AvroType) -> str:
    """What makes a union's member the same one in every version: its named type's name, else its kind (Avro allows
    one member of each unnamed kind in a union)."""
    if isinstance(node, dict) and node.get("type") in NAMED_KINDS:
        return str(node.get("name"))
    return type_name(node)


def _describe(node: AvroType) -> str:
    if isinstance(node, list):
        return "[" + ", ".join(_describe(member) for member in node) + "]"
    if isinstance(node, dict) and node.get("type") in ("record", "enum", "fixed"):
        return str(node.get("name", node["type"]))
    return type_name(node)


# Avro's own rule for names, and the only names that may become column names in DDL.
AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_FULL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class _ShapeProblem(Exception):
    pass


@dataclass(frozen=True)
class SchemaShape:
    """What the one bounded walk of a schema found: why it cannot land (or None), and where it recurs."""

    problem: str | None
    recursions: tuple[str, ...] = ()  # "record 'Node' at field 'children'": where a record contains itself


def schema_shape(schema: dict, max_depth: int) -> SchemaShape:
    """The shape of a schema, checked before anything else walks it.

    Refused: a field name that is no Avro name (it would reach paths and DDL), two fields whose names differ
    only in case (catalogs fold case), nesting deeper than `max_depth` records, arrays and maps, a record that
    contains itself with no way to end (no union, array or map on the way: no value of it can be written), an
    empty or repeated union, a fixed without a size, a decimal of precision 0 (no column holds one), and an array
    whose items take no bytes on the wire: a few corrupt bytes could claim 2^62 such items, which a decoder would
    then count out one by one. A record that
    contains itself otherwise is allowed and listed in `recursions`: the field where it recurs lands as JSON text.
    """
    shape = _Shape(max_depth)
    try:
        shape.walk(schema, None, 1, "")
    except _ShapeProblem as problem:
        return SchemaShape(str(problem))
    except RecursionError:  # not expected, as every step down counts; a last guard for the loader's promise
        return SchemaShape(f"the schema is nested too deeply to walk (the limit is {max_depth} levels)")
    return SchemaShape(None, tuple(shape.recursions))


class _Shape:
    """One bounded walk: it never descends deeper than `max_depth`, so no schema can exhaust the stack."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.full_names: dict[str, str] = {}  # short name → full name of the named types met so far
        self.measured: dict[str, tuple[int, bool]] = {}  # full name → (levels, takes no bytes)
        self.open: list[str] = []  # the records being walked, outermost first
        self.ends: list[int] = []  # per union, array or map being walked: how many records were open on entering it
        self.recursions: list[str] = []

    def walk(self, node: AvroType, namespace: str | None, depth: int, path: str) -> tuple[int, bool]:
        """(levels of nesting from `node` down, whether its encoding can take no bytes)."""
        where = f"field {path!r}" if path else "the top-level record"
        if isinstance(node, str):
            return self._reference(node, namespace, depth, path) if node not in _PRIMITIVES else (0, node == "null")
        if isinstance(node, list):
            if not node:
                raise _ShapeProblem(f"{where} is an empty union")
            if any(isinstance(member, list) for member in node):
                raise _ShapeProblem(f"{where} is a union directly inside a union")
            kinds = [str(_describe(member) if isinstance(member, (str, dict)) else repr(member))[:80] for member in node]
            if len(set(kinds)) != len(kinds):
                raise _ShapeProblem(f"{where} is a union that repeats a member: {', '.join(kinds)}")
            with self._able_to_end(len(node) > 1):
                levels = [self.walk(member, namespace, depth, path)[0] for member in node]
            return max(levels), False  # the branch index takes a byte
        if not isinstance(node, dict):
            return 0, False  # not a type at all: fastavro's parse says so
        kind = node.get("type")
        if node.get("logicalType") == "decimal" and node.get("precision") == 0:  # fastavro refuses only negatives
            raise _ShapeProblem(f"{where} is a decimal of precision 0; a decimal holds at least one digit")
        precision = node.get("precision")
        if node.get("logicalType") == "decimal" and isinstance(precision, int) and precision > MAX_DECIMAL_DIGITS:
            raise _ShapeProblem(f"{where} is a decimal of precision {precision}; the lake holds decimals of at most "
                                f"{MAX_DECIMAL_DIGITS} digits")
        if isinstance(kind, (dict, list)):  # `{"type": {...}}`: a wrapper, counted as a level like any nesting
            self._check_depth(depth, path)
            return self.walk(kind, namespace, depth + 1, path)
        if kind in NAMED_KINDS:
            return self._named(node, namespace, depth, path)
        if kind in ("array", "map"):
            self._check_depth(depth, path)
            child = node.get("items" if kind == "array" else "values")
            with self._able_to_end(True):
                depth_below, empty = self.walk(child, namespace, depth + 1, f"{path}[]" if kind == "array" else f"{path}{{}}")
            if kind == "array" and empty:
                raise _ShapeProblem(
                    f"{where} is an array of items that take no bytes on the wire (null, an empty record or a "
                    f"zero-size fixed); its length could not be checked against the record's bytes"
                )
            return depth_below + 1, False
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return 0, kind == "null"
        if isinstance(kind, str):
            return self._reference(kind, namespace, depth, path)
        return 0, False  # no valid type: fastavro's parse says so

    def _named(self, node: dict, namespace: str | None, depth: int, path: str) -> tuple[int, bool]:
        name = node.get("name")
        if not isinstance(name, str) or not _FULL_NAME.match(name):
            raise _ShapeProblem(f"{node.get('type')} name {name!r:.80} at {path or 'the top'} is not an Avro name")
        space = node.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
        full = name if "." in name or not space else f"{space}.{name}"
        self.full_names[name.rsplit(".", 1)[-1]] = full
        kind = node["type"]
        if kind == "enum":
            shape = (0, False)
        elif kind == "fixed":
            size = node.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise _ShapeProblem(f"fixed {full!r} has size {size!r:.80}; it must be a whole number of bytes")
            shape = (0, size == 0)
        else:
            shape = self._record(node, full, depth, path)
        self.measured[full] = shape
        return shape

    def _record(self, node: dict, full: str, depth: int, path: str) -> tuple[int, bool]:
        self._check_depth(depth, path)
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise _ShapeProblem(f"record {full!r} has no list of fields")
        self.open.append(full)
        seen: dict[str, str] = {}
        levels, empty = 0, True
        space = full.rsplit(".", 1)[0] if "." in full else None
        names = {child.get("name") for child in fields if isinstance(child, dict) and isinstance(child.get("name"), str)}
        keys: dict[str, str] = {}  # a JSON key (an alias) → the field it belongs to
        for child in fields:
            name = child.get("name") if isinstance(child, dict) else None
            if not isinstance(name, str) or not AVRO_NAME.match(name):
                raise _ShapeProblem(
                    f"record {full!r} has a field named {name!r:.80}: field names must be letters, digits and "
                    f"underscores, not starting with a digit"
                )
            self._check_aliases(full, name, child.get("aliases", []), names, keys)
            if name.lower() in seen:
                raise _ShapeProblem(
                    f"record {full!r} has fields {seen[name.lower()]!r} and {name!r}, which differ only in case; "
                    f"table catalogs fold column names to lowercase"
                )
            seen[name.lower()] = name
            child_levels, child_empty = self.walk(child.get("type"), space, depth + 1, f"{path}.{name}" if path else name)
            levels, empty = max(levels, child_levels), empty and child_empty
        self.open.pop()
        return levels + 1, empty

    @staticmethod
    def _check_aliases(record: str, name: str, aliases: Any, names: set, keys: dict[str, str]) -> None:
        """A field's aliases are other keys of its value in JSON: texts that no other field of the record is named or
        aliased, so each key of an object names one field."""
        if not isinstance(aliases, list) or not all(isinstance(alias, str) and alias for alias in aliases):
            raise _ShapeProblem(f"field {name!r} of record {record!r} has aliases {aliases!r:.80}; aliases are a list of "
                                f"non-empty texts")
        for alias in aliases:
            if alias == name:
                continue
            if alias in names or keys.get(alias, name) != name:
                other = alias if alias in names else keys[alias]
                raise _ShapeProblem(f"field {name!r} of record {record!r} has alias {alias!r:.80}, which is already field "
                                    f"{other!r}'s {'name' if alias in names else 'alias'}; a JSON key names one field")
            keys[alias] = name

    def _reference(self, name: str, namespace: str | None, depth: int, path: str) -> tuple[int, bool]:
        full = name if "." in name else f"{namespace}.{name}" if namespace else name
        if full not in self.measured and full not in self.open:
            full = self.full_names.get(name, full)
        if full in self.open:
            opened_at = self.open.index(full)
            if not any(open_then > opened_at for open_then in self.ends):
                raise _ShapeProblem(
                    f"record {full!r} contains itself at field {path!r} with no way to end (no null, array or map on "
                    f"the way); no value of it can be written"
                )
            self.recursions.append(f"record {full!r} at field {path!r}")
            return 0, False  # the field lands as JSON text: a leaf
        if full not in self.measured:
            return 0, False  # an unknown name: fastavro's parse says so
        levels, empty = self.measured[full]
        self._check_depth(depth + levels - 1, path)
        return levels, empty

    @contextmanager
    def _able_to_end(self, can_end: bool) -> Iterator[None]:
        """Marks a union of several members, an array or a map: a record recurring inside it can stop recurring."""
        if can_end:
            self.ends.append(len(self.open))
        try:
            yield
        finally:
            if can_end:
                self.ends.pop()

    def _check_depth(self, depth: int, path: str) -> None:
        if depth > self.max_depth:
            raise _ShapeProblem(
                f"field {path!r} is nested more than {self.max_depth} levels deep (records, arrays and maps); "
                f"flatten the schema"
            )


def record_full_name(schema: dict) -> str:
    """The full name of a top-level record schema (its namespace and name), as record-name strategies use it."""
    name, namespace = schema["name"], schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"
