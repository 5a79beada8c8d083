"""A JSON Schema (of a registry's JSON subject) as the Avro record a JSON table's values are decoded against: each
declared property a field, nullable unless required; what has no Avro counterpart is refused naming where it is.
"""

from __future__ import annotations

import re
from typing import Any

from kafka_lake.schemas.avro_types import AVRO_NAME

# JSON Schema keywords that choose between shapes or compute one: no one Avro type holds what they allow.
_UNSUPPORTED = ("oneOf", "anyOf", "allOf", "not", "if", "then", "else", "patternProperties", "dependentSchemas",
                "prefixItems", "contains", "unevaluatedProperties")
_SCALARS = {"string": "string", "integer": "long", "number": "double", "boolean": "boolean"}


class NotTranslatable(ValueError):
    """A JSON Schema with no Avro record to stand for it; the message names the place in the schema."""


def avro_record_of(json_schema: Any, record_name: str) -> dict:
    """The Avro record for a JSON Schema describing objects. Properties become fields in the order written; `integer`
    becomes long, `number` double, `string` (any `format`, `enum`) string; an object with properties a record, one with
    only `additionalProperties` a map; a property not in `required`, or whose type allows null, is nullable with a null
    default. Local `$ref`s (`#/definitions/…`, `#/$defs/…`) are followed unless they recur."""
    if not isinstance(json_schema, dict):
        raise NotTranslatable("the schema is no JSON object")
    translation = _Translation(json_schema)
    avro = translation.type_of(json_schema, "(the schema)", record_name, ())
    if not isinstance(avro, dict) or avro.get("type") != "record":
        raise NotTranslatable("the schema does not describe objects with properties (type object); a table's rows "
                              "are records")
    return avro


class _Translation:
    def __init__(self, root: dict):
        self._root = root
        self._names: set[str] = set()

    def type_of(self, node: Any, where: str, name: str, refs: tuple[str, ...]) -> Any:
        """The Avro type of `node`, found at `where`; `name` for a record it makes; `refs` followed on the way here."""
        if node is True or node == {}:
            raise NotTranslatable(f"{where} allows any value; give it a type")
        if not isinstance(node, dict):
            raise NotTranslatable(f"{where} is no schema: {str(node)[:80]}")
        if "$ref" in node:
            return self.type_of(*self._followed(node["$ref"], where, refs), name, (*refs, node["$ref"]))
        for keyword in _UNSUPPORTED:
            if keyword in node:
                raise NotTranslatable(f"{where} uses {keyword}, which no one Avro type can hold")
        kinds = node.get("type")
        if kinds is None:
            if "properties" in node:
                kinds = "object"
            elif "enum" in node and all(isinstance(value, str) for value in node["enum"]):
                kinds = "string"
            else:
                raise NotTranslatable(f"{where} has no type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        non_null = [kind for kind in kinds if kind != "null"]
        if len(non_null) != 1:
            listed = " or ".join(map(str, non_null)) or "null alone"
            raise NotTranslatable(f"{where} is {listed}; a column holds one type")
        avro = self._type_of_kind(non_null[0], node, where, name, refs)
        return ["null", avro] if "null" in kinds else avro

    def _type_of_kind(self, kind: str, node: dict, where: str, name: str, refs: tuple[str, ...]) -> Any:
        if kind in _SCALARS:
            return _SCALARS[kind]
        if kind == "array":
            items = node.get("items")
            if not isinstance(items, dict):
                raise NotTranslatable(f"{where} is an array without one schema for its items")
            return {"type": "array", "items": self.type_of(items, f"{where}.items", f"{name}Item", refs)}
        if kind == "object":
            properties = node.get("properties")
            if properties:
                return self._record(node, properties, where, name, refs)
            values = node.get("additionalProperties")
            if isinstance(values, dict) and values:
                return {"type": "map", "values": self.type_of(values, f"{where}.additionalProperties", f"{name}Value", refs)}
            raise NotTranslatable(f"{where} is an object declaring no properties: it has no columns")
        raise NotTranslatable(f"{where} is of type {kind!r}, which JSON Schema does not define")

    def _record(self, node: dict, properties: Any, where: str, name: str, refs: tuple[str, ...]) -> dict:
        if not isinstance(properties, dict):
            raise NotTranslatable(f"{where}.properties is no mapping of property names to schemas")
        required = set(node.get("required") or ())
        fields = []
        for field_name, schema in properties.items():
            place = f"{where}.properties.{field_name}" if where != "(the schema)" else f"properties.{field_name}"
            if not AVRO_NAME.match(field_name):
                raise NotTranslatable(f"property {field_name!r} at {place} is no Avro field name (letters, digits and "
                                      f"underscores, not starting with a digit), which every column must be")
            avro = self.type_of(schema, place, f"{name}{_camel(field_name)}", refs)
            if field_name in required and not (isinstance(avro, list) and "null" in avro):
                fields.append({"name": field_name, "type": avro})
            else:
                nullable = avro if isinstance(avro, list) else ["null", avro]
                fields.append({"name": field_name, "type": nullable, "default": None})
        record = {"type": "record", "name": self._unique(_record_name(node.get("title"), name)), "fields": fields}
        if isinstance(node.get("description"), str):
            record["doc"] = node["description"]
        return record

    def _followed(self, ref: Any, where: str, refs: tuple[str, ...]) -> tuple[Any, str]:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise NotTranslatable(f"{where} refers to {ref!r}; only references inside the schema (#/…) are followed")
        if ref in refs:
            raise NotTranslatable(f"{where} refers to {ref} inside itself: a record that contains itself")
        target: Any = self._root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise NotTranslatable(f"{where} refers to {ref}, which the schema does not hold")
            target = target[part]
        return target, f"{where} ({ref})"

    def _unique(self, name: str) -> str:
        candidate, n = name, 2
        while candidate in self._names:
            candidate, n = f"{name}{n}", n + 1
        self._names.add(candidate)
        return candidate


def _record_name(title: Any, fallback: str) -> str:
    if isinstance(title, str):
        name = re.sub(r"[^A-Za-z0-9_]", "", _camel(title))
        if AVRO_NAME.match(name):
            return name
    return fallback


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", text) if part)
