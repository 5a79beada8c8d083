"""Protobuf versions evolve by field number: a later version may add fields and drop some, but a number it keeps
must keep its name and its type, or the bytes older producers wrote would land in another column.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kafka_lake.decoding.protobuf.avro_shape import is_map, is_repeated

_TYPE_NAMES = {number: name[len("TYPE_"):].lower() for name, number in vars(FieldDescriptor).items()
               if name.startswith("TYPE_") and isinstance(number, int)}


def field_number_problem(older: Descriptor, newer: Descriptor) -> str | None:
    """Why `newer` (a message of a later version) reads `older`'s fields otherwise, by number, or None."""
    return _message_problem(older, newer, set())


def _message_problem(older: Descriptor, newer: Descriptor, compared: set[tuple[str, str]]) -> str | None:
    if (older.full_name, newer.full_name) in compared:
        return None  # a message that contains itself, already being compared
    compared.add((older.full_name, newer.full_name))
    for old in older.fields:
        new = newer.fields_by_number.get(old.number)
        if new is None:
            continue  # a dropped field stays a column the new rows leave null
        where = f"field number {old.number} of {older.full_name}"
        if new.name != old.name:
            return f"{where} was {old.name!r} and is now {new.name!r}; give the new field a new number"
        if _described(old) != _described(new):
            return (f"{where} ({old.name}) was {_described(old)} and is now {_described(new)}; give a field of "
                    f"another type a new number")
        if old.message_type is not None and new.message_type is not None:
            problem = _message_problem(old.message_type, new.message_type, compared)
            if problem:
                return problem
    return None


def _described(proto_field: FieldDescriptor) -> str:
    if is_map(proto_field):
        entry = proto_field.message_type
        return f"map<{_described(entry.fields_by_name['key'])}, {_described(entry.fields_by_name['value'])}>"
    kind = (proto_field.message_type.full_name if proto_field.message_type is not None else
            proto_field.enum_type.full_name if proto_field.enum_type is not None else _TYPE_NAMES[proto_field.type])
    return f"repeated {kind}" if is_repeated(proto_field) else kind
