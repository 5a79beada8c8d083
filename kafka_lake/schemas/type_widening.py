"""Type widening: which table column type reads the Parquet files written with another. The one rule behind both
the catalog's evolution check (in Avro types) and the merge of every version's columns into one table (in Hive types).
"""

from __future__ import annotations

# Which column type reads Parquet files written with a narrower one, measured with pyspark 4.3's vectorized and
# row-based Parquet readers: int32 reads as bigint or double, float as double; int64 does NOT read as float or
# double, nor int32 as float. Avro allows those promotions; a table cannot.
READABLE_AS = {
    "int": ("int", "bigint", "double"),
    "bigint": ("bigint",),
    "float": ("float", "double"),
    "double": ("double",),
}
_NARROWEST_FIRST = ("int", "bigint", "float", "double")
# The column type each numeric Avro primitive lands as.
_COLUMN_TYPE_OF_AVRO = {"int": "int", "long": "bigint", "float": "float", "double": "double"}


def shared_column_type(one: str, other: str) -> str | None:
    """The narrowest column type that reads the files of both column types, or None when no column can."""
    for candidate in _NARROWEST_FIRST:
        if candidate in READABLE_AS.get(one, ()) and candidate in READABLE_AS.get(other, ()):
            return candidate
    return None


def avro_type_widens(old: str, new: str) -> bool:
    """Whether a field of Avro primitive `old` may be `new` in a later version: the same type, or a type no narrower
    whose files one column reads together with the older ones (int → long, int → float/double, float → double)."""
    if old == new:
        return True
    old_column, new_column = _COLUMN_TYPE_OF_AVRO.get(old), _COLUMN_TYPE_OF_AVRO.get(new)
    if old_column is None or new_column is None:
        return False
    return (shared_column_type(old_column, new_column) is not None
            and _NARROWEST_FIRST.index(new_column) >= _NARROWEST_FIRST.index(old_column))
