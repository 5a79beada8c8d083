"""The record path of JSON values: one JSON object at a time, read against a schema version's Avro schema into the
value fastavro would have decoded from the same record in Avro, so the `ArrowMapping` makes the same columns.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import json
import math
import re
import sys
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from kafka_lake.decoding.decoded_batch import Undecodable
from kafka_lake.schemas.arrow_mapping import MAX_JSON_DEPTH
from kafka_lake.schemas.avro_types import NAMED_KINDS, AvroType, json_keys, logical_type, named_types, type_name
from kafka_lake.table_spec import SchemaVersion

# A value in the JSON read as it is; `path` names where it sits, for the error.
ReadJson = Callable[[Any, str], Any]

_INT32, _INT64 = (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_LOCAL_EPOCH = datetime.datetime(1970, 1, 1)
_DAY_MS = 86_400_000
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# A decimal written as text: a JSON number, also with a sign, without digits on one side of the point or with
# leading zeros (as columnar reading takes them); never with spaces, underscores, NaN or infinities.
DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


class _Misfit(ValueError):
    def __init__(self, path: str, why: str):
        super().__init__(f"{path or 'the value'}: {why}")


def _refuse(path: str, value: Any, what: str) -> _Misfit:
    return _Misfit(path, f"{shown_as_json(value)} is not {what}")


# Shown values are cut short, as `topic_yaml.shown` cuts a catalog's: a huge value must not become a huge message.
_SHOWN_TEXT, _SHOWN_ITEMS, _SHOWN_LEVELS = 80, 6, 3


def shown_as_json(value: Any, level: int = 0) -> str:
    """A value of a JSON record as an error message shows it to the people who wrote it: as JSON (`null`, `true`,
    `3.5`, `"text"`, `{"userid": 4711}`), cut short."""
    if value is None or type(value) is bool:
        return json.dumps(value)
    if type(value) in (int, decimal.Decimal):
        digits = str(value)
        return digits if len(digits) <= _SHOWN_TEXT else f"{digits[:_SHOWN_TEXT // 2]}…({len(digits)} characters)"
    if type(value) is str:
        cut = value[:_SHOWN_TEXT]
        try:
            cut.encode("utf-8")
            quoted = json.dumps(cut, ensure_ascii=False)
        except UnicodeEncodeError:  # a lone surrogate, which no UTF-8 text (and no Parquet string) holds
            quoted = json.dumps(cut)
        return quoted if len(cut) == len(value) else f"{quoted[:-1]}…\""
    if type(value) in (list, dict):
        if level >= _SHOWN_LEVELS:
            return "[…]" if type(value) is list else "{…}"
        items = list(value.items() if type(value) is dict else enumerate(value))
        parts = [shown_as_json(item, level + 1) if type(value) is list else
                 f"{shown_as_json(key, level + 1)}: {shown_as_json(item, level + 1)}" for key, item in items[:_SHOWN_ITEMS]]
        if len(items) > _SHOWN_ITEMS:
            parts.append("…")
        return ("[{}]" if type(value) is list else "{{{}}}").format(", ".join(parts))
    return str(value)


class JsonRecords:
    """The record path of one schema version for JSON values."""

    def __init__(self, version: SchemaVersion):
        self._version = version
        self._read = _Readers(version.schema).reader(version.schema)

    def describe(self, schema_id: int | None) -> str:
        framed = f"schema id {schema_id}, " if schema_id is not None else ""
        return f"JSON value ({framed}version {self._version.version}, {self._version.file})"

    def read(self, payload: memoryview, schema_id: int | None) -> dict:
        """The value fastavro would give for the same record in Avro; raises `Undecodable` saying why not."""
        document = parse_json_object(payload, self.describe(schema_id))
        try:
            return self._read(document, "")
        except _Misfit as misfit:
            raise Undecodable("undecodable_payload", f"{self.describe(schema_id)} does not fit its schema: {misfit}") from None


def parse_json_object(payload: memoryview | bytes, described: str) -> dict:
    """A JSON object from UTF-8 text, or `Undecodable` saying what is wrong where."""
    data = bytes(payload)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Undecodable("undecodable_payload", f"{described} is not UTF-8 text: byte {error.start} of "
                                                 f"{len(data)} (0x{data[error.start]:02x})") from None
    try:
        document = _loads(text)
    except RecursionError:
        document = None  # nested too deeply for the parser: said below
        depth = MAX_JSON_DEPTH + 1
    except ValueError as error:  # JSONDecodeError
        raise Undecodable("undecodable_payload", f"{described} is not JSON: {error}") from None
    else:
        depth = _depth(document) if text.count("[") + text.count("{") > MAX_JSON_DEPTH else 0
    if depth > MAX_JSON_DEPTH:
        raise Undecodable("undecodable_payload", f"{described} is nested more than {MAX_JSON_DEPTH} arrays and "
                                                 f"objects deep")
    if not isinstance(document, dict):
        raise Undecodable("undecodable_payload", f"{described} is JSON {_json_kind(document)}, not an object")
    return document


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _loads(text: str) -> Any:
    """The JSON value of `text`, numbers with a fraction or exponent as exact decimals. Python refuses to turn a whole
    number of more than 4,300 digits into an int (it would take time growing with the square of its digits): such a
    text is read again holding those numbers as decimals, exactly, which every column refuses as out of its range (as
    the columnar reader does) and a field no schema names ignores. Only that text pays for reading numbers in Python."""
    try:
        return json.loads(text, parse_float=_json_number, parse_constant=_no_constant)
    except json.JSONDecodeError:
        raise
    except ValueError:  # the int conversion's limit; `_no_constant`'s refusal is raised again below
        return json.loads(text, parse_float=_json_number, parse_int=_json_whole_number, parse_constant=_no_constant)


def _json_whole_number(text: str) -> int | decimal.Decimal:
    limit = sys.get_int_max_str_digits()  # 0: no limit
    return int(text) if not limit or len(text) <= limit else decimal.Decimal(text)


def _json_number(text: str) -> decimal.Decimal:
    """A JSON number with a fraction or an exponent, exactly. JSON sets no limit on exponents and a decimal does
    (±999,999,999,999,999,999): one past it becomes the decimal of the same sign nearest it, which no decimal column
    holds either, and which a double reads as what a parser of doubles gives (0, or beyond its range)."""
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        sign = int(text.startswith("-"))
        if _ZERO.match(text):
            return decimal.Decimal((sign, (0,), 0))
        return decimal.Decimal((sign, (1,), decimal.MIN_ETINY if _NEGATIVE_EXPONENT.search(text) else decimal.MAX_EMAX))


_ZERO = re.compile(r"-?0+(\.0*)?[eE]")
_NEGATIVE_EXPONENT = re.compile(r"[eE]-")


def _depth(document: Any) -> int:
    """How many arrays and objects deep the value nests, counted without recursion."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "true/false", int: "a number", decimal.Decimal: "a number", str: "text", list: "an array"}.get(
        type(value), type(value).__name__)


class _Readers:
    """The readers of one schema's types; a named type's reader is made once, so a record may contain itself.

    What a JSON value must be, per Avro type (the JSON a person or a serializer writes, not Avro's own JSON encoding):
    null, true/false, whole numbers for int and long within their range, any number for float and double (finite, and
    within a float's range), text for string and enum (one of its symbols), base64 text for bytes and fixed, a number
    or its text for a decimal (no more fractional digits than its scale, no more digits than its precision), days for
    a date, milli- or microseconds for times and timestamps, an object for a record (a field absent or null only where
    the schema allows null; keys the schema does not know are ignored; a repeated key's last value counts), an array,
    an object for a map, the value of the first member that takes it for a union. A record field's value is under its
    name, or under one of its Avro `aliases` (keys that are no Avro names, like `$schema`): the first of them present
    and not null. Anything else is a dead letter whose error names the field and what it holds. A value nested more than `MAX_JSON_DEPTH` arrays and objects deep is one
    too (`parse_json_object`)."""

    def __init__(self, schema: dict):
        self.names = named_types(schema)
        self.full_names: dict[int, str] = {}
        for name, node in self.names.items():
            if len(name) > len(self.full_names.get(id(node), "")):
                self.full_names[id(node)] = name
        self.by_node: dict[int, ReadJson] = {}

    def reader(self, node: AvroType) -> ReadJson:
        if isinstance(node, str) and node in self.names:
            node = self.names[node]
        if isinstance(node, dict) and isinstance(node.get("type"), (dict, list)) and "logicalType" not in node:
            return self.reader(node["type"])
        if isinstance(node, dict) and node.get("type") in NAMED_KINDS:
            key = id(node)
            if key not in self.by_node:
                made: list[ReadJson] = []
                self.by_node[key] = lambda value, path: made[0](value, path)  # a record that contains itself
                made.append(self._made(node))
                self.by_node[key] = made[0]
            return self.by_node[key]
        return self._made(node)

    def is_named(self, node: AvroType) -> bool:
        if isinstance(node, str) and node in self.names:
            node = self.names[node]
        return isinstance(node, dict) and node.get("type") in NAMED_KINDS

    def full_name(self, node: AvroType) -> str:
        if isinstance(node, str):
            node = self.names[node]
        return self.full_names[id(node)]

    def _made(self, node: AvroType) -> ReadJson:
        kind, logical = type_name(node), logical_type(node)
        if kind == "union":
            return self._union(node)
        if kind in ("record", "error"):
            return self._record(node)
        if kind == "array":
            items = self.reader(node["items"])

            def read_array(value, path):
                if type(value) is not list:
                    raise _refuse(path, value, "an array")
                return [items(item, f"{path}[{index}]") for index, item in enumerate(value)]
            return read_array
        if kind == "map":
            values = self.reader(node["values"])

            def read_map(value, path):
                if type(value) is not dict:
                    raise _refuse(path, value, "an object (a map)")
                return {key: values(item, f"{path}{{{key}}}") for key, item in value.items()}
            return read_map
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = node["precision"], node.get("scale", 0)
            return lambda value, path: decimal_value(value, path, precision, scale)
        if kind == "enum":
            symbols = frozenset(node["symbols"])
            return lambda value, path: value if type(value) is str and value in symbols else _fail(
                path, value, f"one of the symbols {shown_as_json(node['symbols'])}")
        if kind in ("bytes", "fixed"):
            size = node.get("size") if kind == "fixed" else None
            return lambda value, path: _base64(value, path, size)
        if kind in _SCALARS:
            return _SCALARS[kind].get(logical, _SCALARS[kind][None])
        raise ValueError(f"Avro type {node!r} has no JSON reading")

    def _record(self, node: dict) -> ReadJson:
        fields = [(f["name"], json_keys(f), self.reader(f["type"])) for f in node.get("fields", [])]

        if all(len(keys) == 1 for _, keys, _ in fields):
            def read_record(value, path):
                if type(value) is not dict:
                    raise _refuse(path, value, "an object (a record)")
                prefix = f"{path}." if path else ""
                return {name: read(value.get(name), prefix + name) for name, _, read in fields}
            return read_record

        def read_aliased_record(value, path):  # a field's value is under its first key present and not null
            if type(value) is not dict:
                raise _refuse(path, value, "an object (a record)")
            prefix = f"{path}." if path else ""
            return {name: read(next((value[key] for key in keys if value.get(key) is not None), None), prefix + name)
                    for name, keys, read in fields}
        return read_aliased_record

    def _union(self, union: list) -> ReadJson:
        takes_null = "null" in union
        members = [(self.reader(m), self.full_name(m) if self.is_named(m) else None) for m in union if m != "null"]
        if takes_null and len(union) == 2:
            [(read, name)] = members

            def read_nullable(value, path):
                if value is None:
                    return None
                return read(value, path) if name is None else (name, read(value, path))
            return read_nullable

        def read_union(value, path):
            if value is None:
                if takes_null:
                    return None
                raise _Misfit(path, "absent or null, and its union has no null")
            for read, name in members:
                try:
                    found = read(value, path)
                except _Misfit:
                    continue
                return found if name is None else (name, found)
            raise _Misfit(path, f"{shown_as_json(value)} is none of the members of its union")
        return read_union


def _fail(path: str, value: Any, what: str) -> Any:
    if value is None:
        raise _Misfit(path, "absent or null, and its type has no null")
    raise _refuse(path, value, what)


def _whole(bounds: tuple[int, int]) -> Callable[[Any, str], int]:
    low, high = bounds

    def read(value, path):
        if type(value) is int and low <= value <= high:
            return value
        return _fail(path, value, f"a whole number in {low}..{high}")
    return read


def _number(float32: bool) -> ReadJson:
    def read(value, path):
        if type(value) not in (int, decimal.Decimal):
            return _fail(path, value, "a number")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number) or (float32 and abs(number) > _FLOAT32_MAX and np.isinf(_as_float32(number))):
            raise _Misfit(path, f"{shown_as_json(value)} is beyond the range of a {'float' if float32 else 'double'}")
        return number
    return read


def _as_float32(number: float) -> np.float32:
    with np.errstate(over="ignore"):
        return np.float32(number)


def _from_epoch(int_bounds: tuple[int, int], convert: Callable[[int], Any], what: str) -> ReadJson:
    """A whole number counting from the epoch (or midnight), as the date, time or timestamp fastavro gives."""
    whole = _whole(int_bounds)

    def read(value, path):
        count = whole(value, path)
        try:
            return convert(count)
        except (OverflowError, ValueError):
            raise _Misfit(path, f"{count} is no {what}") from None
    return read


def _time_of_day(per_ms: int) -> Callable[[int], datetime.time]:
    def convert(count: int) -> datetime.time:
        if not 0 <= count < _DAY_MS * per_ms:
            raise ValueError(count)
        micros = count * (1000 // per_ms)
        return (datetime.datetime.min + datetime.timedelta(microseconds=micros)).time()
    return convert


def _text(value, path):
    if type(value) is not str:
        return _fail(path, value, "text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Misfit(path, f"{shown_as_json(value)} holds a lone surrogate escape (\\ud800…\\udfff), which is no UTF-8 text") from None
    return value


def _uuid(value, path):
    try:
        return uuid.UUID(_text(value, path))
    except ValueError:
        raise _refuse(path, value, "a UUID") from None


def _base64(value: Any, path: str, size: int | None) -> bytes:
    if type(value) is not str:
        return _fail(path, value, "base64 text")
    try:
        data = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _refuse(path, value, "base64 text") from None
    if size is not None and len(data) != size:
        raise _Misfit(path, f"{len(data)} bytes in base64, where the fixed type holds {size}")
    return data


def decimal_value(value: Any, path: str, precision: int, scale: int) -> decimal.Decimal:
    """A JSON number, or its text, as a decimal of `scale` fractional digits, exactly; at most `precision` digits."""
    if type(value) is int or type(value) is decimal.Decimal:
        number = decimal.Decimal(value)
    elif type(value) is str and DECIMAL_TEXT.match(value):
        number = decimal.Decimal(value)
    else:
        return _fail(path, value, "a decimal number or its text")
    if number.is_zero():
        return decimal.Decimal((0, (0,), -scale))
    if number.adjusted() >= precision - scale:
        raise _Misfit(path, f"{shown_as_json(value)} has more than {precision - scale} digits before the point "
                            f"(decimal({precision},{scale}))")
    exact = number.quantize(decimal.Decimal((0, (1,), -scale)), context=_EXACT)
    if exact != number:
        raise _Misfit(path, f"{shown_as_json(value)} has more than {scale} digits after the point (decimal({precision},{scale}))")
    return exact


def _null(value, path):
    if value is not None:
        raise _refuse(path, value, "null")


_DATE, _TIMESTAMP = "date of the years 0001..9999 (days since 1970-01-01)", "timestamp of the years 0001..9999"
_SCALARS: dict[str, dict[str | None, ReadJson]] = {
    "null": {None: _null},
    "boolean": {None: lambda value, path: value if type(value) is bool else _fail(path, value, "true or false")},
    "int": {
        None: _whole(_INT32),
        "date": _from_epoch(_INT32, lambda days: (_EPOCH + datetime.timedelta(days=days)).date(), _DATE),
        "time-millis": _from_epoch(_INT32, _time_of_day(1), "time of day (0 to a day, in milliseconds)"),
    },
    "long": {
        None: _whole(_INT64),
        "time-micros": _from_epoch(_INT64, _time_of_day(1000), "time of day (0 to a day, in microseconds)"),
        "timestamp-millis": _from_epoch(_INT64, lambda ms: _EPOCH + datetime.timedelta(milliseconds=ms), _TIMESTAMP),
        "timestamp-micros": _from_epoch(_INT64, lambda us: _EPOCH + datetime.timedelta(microseconds=us), _TIMESTAMP),
        "local-timestamp-millis": _from_epoch(_INT64, lambda ms: _LOCAL_EPOCH + datetime.timedelta(milliseconds=ms),
                                              _TIMESTAMP),
        "local-timestamp-micros": _from_epoch(_INT64, lambda us: _LOCAL_EPOCH + datetime.timedelta(microseconds=us),
                                              _TIMESTAMP),
    },
    "float": {None: _number(float32=True)},
    "double": {None: _number(float32=False)},
    "string": {None: _text, "uuid": _uuid},
}
