"""The table a topic becomes in a table catalog (Glue or Hive): columns, partition keys, Parquet, location.
"""



from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from kafka_lake.decoding.formats import payload_format
from kafka_lake.decoding.key_columns import trailing_columns
from kafka_lake.kafka.records import KAFKA_COLUMNS
from kafka_lake.lake.layout import PARTITION_COLUMN_TYPES, is_lake_column
from kafka_lake.schemas.arrow_mapping import RAW_MAPPING, column_comment
from kafka_lake.schemas.avro_types import AVRO_NAME
from kafka_lake.schemas.landed_schema import LandedSchema, LandedSchemaError
from kafka_lake.schemas.type_widening import shared_column_type
from kafka_lake.table_spec import TableSpec

PARQUET_INPUT_FORMAT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"

# Avro field names are [A-Za-z_][A-Za-z0-9_]*; anything else never reaches SQL or a type string.
_LONGEST_NAME = 255  # characters of a column or struct field name Glue and the Hive metastore hold
MAX_COMMENT_CHARS = 255  # Glue's limit for a column comment; the Hive metastore's is 256
_PRIMITIVES = ("boolean", "tinyint", "smallint", "int", "bigint", "float", "double", "string", "binary", "date", "timestamp")


class TableSchemaError(ValueError):
    """The versions of a topic (or the table already in the catalog) cannot share one table."""


@dataclass(frozen=True)
class HiveType:
    """A column type in the Hive type language that the Hive metastore, Glue, Athena and Spark share."""

    name: str  # a primitive of _PRIMITIVES, or decimal, struct, array, map
    precision: int = 0
    scale: int = 0
    fields: tuple[Column, ...] = ()  # struct fields
    element: HiveType | None = None  # array item or map value; map keys are always string

    @property
    def item(self) -> HiveType:
        """An array's item type, a map's value type."""
        if self.element is None:
            raise ValueError(f"a {self.name} type has no item type")
        return self.element

    def hive(self) -> str:
        """As Glue and the Hive metastore store it: `struct<a:int,b:array<string>>`."""
        return self._render(lambda name: name)

    def spark_ddl(self) -> str:
        """As Spark SQL DDL takes it, nested names quoted so keywords (`date`, `order`) stay names."""
        return self._render(lambda name: f"`{name}`")

    def _render(self, quote) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.name == "struct":
            return "struct<" + ",".join(f"{quote(f.name)}:{f.type._render(quote)}" for f in self.fields) + ">"
        if self.name == "array":
            return f"array<{self.item._render(quote)}>"
        if self.name == "map":
            return f"map<string,{self.item._render(quote)}>"
        return self.name

    def __str__(self) -> str:
        return self.hive()


@dataclass(frozen=True)
class Column:
    name: str
    type: HiveType
    # What a reader must know beyond the type (a decimal or a recursive value held as text); the catalog's column
    # comment. Not part of a column's identity: a comment alone never evolves a table.
    comment: str = field(default="", compare=False)


PARTITION_KEYS = tuple(Column(name, HiveType(hive_type)) for name, hive_type in PARTITION_COLUMN_TYPES.items())


@dataclass(frozen=True)
class TableDefinition:
    """What the catalog must hold for a topic: data columns, partition keys, Parquet, location."""

    database: str
    table: str
    topic: str
    columns: tuple[Column, ...]
    location: str  # the table root: `s3://bucket/prefix/db/table` or an absolute local path
    schema_versions: tuple[int, ...]
    partition_keys: tuple[Column, ...] = field(default=PARTITION_KEYS)

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def partition_uri(self, relative_location: str) -> str:
        """The URI of a partition location given relative to the lake root (as `table_state` gives it)."""
        prefix = f"{self.database}/{self.table}/"
        if not relative_location.startswith(prefix):
            raise ValueError(f"{relative_location!r} is not a location inside table {self.name} ({prefix}…)")
        return f"{self.location}/{relative_location[len(prefix):]}"

    def sample_queries(self, date: str, hour: str) -> dict[str, str]:
        return {
            "spark_sql": f"SELECT * FROM `{self.database}`.`{self.table}` WHERE `date` = '{date}' AND `hour` = '{hour}' LIMIT 100",
            "athena": f'SELECT * FROM "{self.database}"."{self.table}" WHERE "date" = \'{date}\' AND "hour" = \'{hour}\' LIMIT 100',
        }


def table_definition(topic: TableSpec, location: str) -> TableDefinition:
    """The table of a topic whose root is `location` (the URI of `layout.table_prefix` under LAKE_ROOT)."""
    return TableDefinition(
        database=topic.database,
        table=topic.table,
        topic=topic.topic,
        columns=table_columns(topic),
        location=location.rstrip("/"),
        schema_versions=topic.version_numbers,
    )


def table_columns(topic: TableSpec) -> tuple[Column, ...]:
    """The columns every version lands in (`landed_schema`: new fields appended, struct fields and union members
    unioned, types widened, renamed fields in their first column), then the `_kafka_*` columns, then the key's and
    `_kafka_tombstone` (`key_columns`).

    Column types come from the Arrow schema of each version's Parquet files (`arrow_mapping`), so the catalog
    declares exactly what landing writes; versions merge into one table, widening only where readers can.

    Names are lowercase, struct fields' too (`orderId` → `orderid`): Glue's and Athena's rule, and what the Hive
    metastore keeps of a top-level name. Parquet readers match the files' own names without regard to case, and names
    differing only in case are refused at load, so every column still finds its values."""
    kafka_names = {f.name for f in KAFKA_COLUMNS}
    trailing = tuple(column_of(f, f"{topic.source_file or topic.name}: the key and tombstone columns")
                     for f in trailing_columns(topic))
    if not payload_format(topic).has_schemas:  # no schema: the value's bytes
        return tuple(column_of(f, f"{topic.name}: the raw value" if f.name not in kafka_names else "the Kafka columns")
                     for f in RAW_MAPPING.schema) + tuple(map(lowercase, trailing))
    label = topic.source_file or topic.name
    try:
        landed = LandedSchema(topic)
    except LandedSchemaError as error:
        raise TableSchemaError(f"{label}: {error}") from None
    columns = tuple(column_of(f, label) for f in landed.value_fields)
    _check_names(columns, label, top_level=True)
    return (tuple(lowercase(column) for column in columns) + tuple(column_of(f, "the Kafka columns") for f in KAFKA_COLUMNS)
            + tuple(map(lowercase, trailing)))


def column_of(arrow_field: pa.Field, where: str) -> Column:
    comment = column_comment(arrow_field)
    if len(comment) > MAX_COMMENT_CHARS:
        comment = comment[: MAX_COMMENT_CHARS - 1] + "…"
    return Column(arrow_field.name, hive_type_of(arrow_field.type, f"{where}: column {arrow_field.name!r}"), comment)


def lowercase(column: Column) -> Column:
    """The column as the table catalog names it: lowercase (its struct fields are already)."""
    return Column(column.name.lower(), column.type, column.comment)


def hive_type_of(arrow_type: pa.DataType, where: str) -> HiveType:
    """The catalog type that reads Parquet written with `arrow_type` (the one mapping; docs/QUERYING.md lists it)."""
    t = pa.types
    if t.is_boolean(arrow_type):
        return HiveType("boolean")
    if t.is_int32(arrow_type):
        return HiveType("int")
    if t.is_int64(arrow_type):
        return HiveType("bigint")
    if t.is_float32(arrow_type):
        return HiveType("float")
    if t.is_float64(arrow_type):
        return HiveType("double")
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return HiveType("string")
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_fixed_size_binary(arrow_type):
        return HiveType("binary")
    if t.is_date32(arrow_type):
        return HiveType("date")
    if t.is_timestamp(arrow_type):
        return HiveType("timestamp")
    if t.is_time32(arrow_type):
        # Hive, Glue and Athena have no TIME column (Spark 4.3's `time` is refused by the metastore):
        # a time-millis lands as Parquet TIME(MILLIS) on int32, read as milliseconds since midnight.
        return HiveType("int")
    if t.is_time64(arrow_type):
        return HiveType("bigint")  # time-micros: microseconds since midnight, TIME(MICROS) on int64
    if t.is_decimal(arrow_type):
        if arrow_type.precision > 38:
            raise TableSchemaError(
                f"{where}: decimal({arrow_type.precision},{arrow_type.scale}) exceeds the precision 38 that "
                f"Hive, Glue, Athena and Spark can read; lower the precision in the Avro schema"
            )
        return HiveType("decimal", precision=arrow_type.precision, scale=arrow_type.scale)
    if t.is_null(arrow_type):
        # An Avro "null" field: Parquet's all-null column reads as int in both of Spark's readers (measured),
        # not as string; Hive has no usable void type.
        return HiveType("int")
    if t.is_struct(arrow_type):
        fields = tuple(
            Column(arrow_type.field(i).name, hive_type_of(arrow_type.field(i).type, f"{where}.{arrow_type.field(i).name}"))
            for i in range(arrow_type.num_fields)
        )
        _check_names(fields, where, top_level=False)
        return HiveType("struct", fields=tuple(map(lowercase, fields)))
    if t.is_map(arrow_type):
        if not t.is_string(arrow_type.key_type):
            raise TableSchemaError(f"{where}: map keys must be strings, got {arrow_type.key_type}")
        return HiveType("map", element=hive_type_of(arrow_type.item_type, f"{where}{{}}"))
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        return HiveType("array", element=hive_type_of(arrow_type.value_type, f"{where}[]"))
    raise TableSchemaError(f"{where}: Arrow type {arrow_type} has no table catalog type")


def _check_names(columns: Iterable[Column], where: str, top_level: bool) -> None:
    seen: dict[str, str] = {}
    for column in columns:
        if not AVRO_NAME.match(column.name) or len(column.name) > _LONGEST_NAME:
            raise TableSchemaError(f"{where}: field name {column.name!r} is not a valid column name")
        if column.name.lower() in seen:
            raise TableSchemaError(
                f"{where}: fields {seen[column.name.lower()]!r} and {column.name!r} differ only in case; "
                f"Hive, Glue and Athena column names are case-insensitive"
            )
        seen[column.name.lower()] = column.name
        if top_level and is_lake_column(column.name):
            raise TableSchemaError(
                f"{where}: field {column.name!r} takes the name of one of the lake's own columns; map it to another "
                f"column with `rename` in topic.yaml"
            )


class _Conflict(Exception):
    def __init__(self, path: tuple[str, ...], old: HiveType, new: HiveType):
        super().__init__(path)
        self.path, self.old, self.new = path, old, new

    @property
    def dotted(self) -> str:
        return ".".join(self.path).replace(".[]", "[]").replace(".{}", "{}")


def merge_columns(old: tuple[Column, ...], new: tuple[Column, ...], path: tuple[str, ...] = ()) -> tuple[Column, ...]:
    """`old` with `new`'s columns merged in: same name (case-insensitive) → the wider type, under `new`'s spelling
    (a table registered with names in another case takes the lowercase ones); others appended."""
    merged = list(old)
    position = {column.name.lower(): i for i, column in enumerate(old)}
    for column in new:
        i = position.get(column.name.lower())
        if i is None:
            merged.append(column)
        else:
            merged[i] = Column(column.name, widest(merged[i].type, column.type, path + (column.name,)),
                               column.comment or merged[i].comment)
    return tuple(merged)


def casefolded(hive_type: HiveType) -> HiveType:
    """The type with every struct field name lowercase: what it is to a reader that ignores case."""
    return HiveType(hive_type.name, hive_type.precision, hive_type.scale,
                    tuple(Column(f.name.lower(), casefolded(f.type), f.comment) for f in hive_type.fields),
                    None if hive_type.element is None else casefolded(hive_type.element))


def widest(old: HiveType, new: HiveType, path: tuple[str, ...]) -> HiveType:
    """The type that reads files of both `old` and `new`, or `_Conflict`."""
    if old == new:
        return new
    if old.name == new.name == "struct":
        return HiveType("struct", fields=merge_columns(old.fields, new.fields, path))
    if old.name == new.name and old.name in ("array", "map"):
        return HiveType(old.name, element=widest(old.item, new.item, path + ("[]" if old.name == "array" else "{}",)))
    shared = shared_column_type(old.name, new.name)
    if shared is None:
        raise _Conflict(path, old, new)
    return HiveType(shared)


def incompatible(column: str, old_label: str, old: HiveType, new_label: str, new: HiveType) -> TableSchemaError:
    return TableSchemaError(
        f"column {column!r} is {old} in {old_label} but {new} in {new_label}: one table column cannot read "
        f"both versions' Parquet files. Only int→bigint, int→double and float→double widen a column "
        f"(Spark cannot read int64 Parquet as double); give the new type a new field name instead"
    )


def merge_with_catalog(existing: tuple[Column, ...], definition: TableDefinition) -> tuple[Column, ...]:
    """The columns the catalog table must have: the ones it has (never dropped) evolved by the definition."""
    try:
        # Columns the versions no longer name stay too, lowercase like the rest.
        return merge_columns(tuple(Column(c.name.lower(), casefolded(c.type), c.comment) for c in existing),
                             definition.columns)
    except _Conflict as conflict:
        raise incompatible(
            conflict.dotted, f"the table {definition.name} in the catalog", conflict.old,
            f"the topic catalog's versions {', '.join(map(str, definition.schema_versions))}", conflict.new,
        ) from None


def parse_hive_type(text: str) -> HiveType:
    """Reads a type as Glue or a metastore returns it (`struct<a:int>`, nested names may be backquoted)."""
    parser = _TypeParser(text)
    parsed = parser.type()
    parser.expect_end()
    return parsed


class _TypeParser:
    _TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")

    def __init__(self, text: str):
        self.text, self.tokens, position = text, [], 0
        while position < len(text.rstrip()):
            match = self._TOKEN.match(text, position)
            if not match:
                raise TableSchemaError(f"cannot read the catalog type {text!r} at position {position}")
            self.tokens.append(match.group(1))
            position = match.end()
        self.index = 0

    def next(self) -> str:
        if self.index >= len(self.tokens):
            raise TableSchemaError(f"the catalog type {self.text!r} ends too early")
        self.index += 1
        return self.tokens[self.index - 1]

    def expect(self, token: str) -> None:
        got = self.next()
        if got != token:
            raise TableSchemaError(f"cannot read the catalog type {self.text!r}: expected {token!r}, got {got!r}")

    def expect_end(self) -> None:
        if self.index != len(self.tokens):
            raise TableSchemaError(f"cannot read the catalog type {self.text!r}: unexpected {self.tokens[self.index]!r}")

    def name(self) -> str:
        token = self.next()
        return token[1:-1].replace("``", "`") if token.startswith("`") else token

    def type(self) -> HiveType:
        name = self.next().lower()
        if name == "integer":
            name = "int"
        if name == "decimal":
            precision, scale = 10, 0  # Hive's default for a bare `decimal`
            if self.index < len(self.tokens) and self.tokens[self.index] == "(":
                self.expect("(")
                precision = int(self.next())
                scale = 0
                if self.tokens[self.index] == ",":
                    self.expect(",")
                    scale = int(self.next())
                self.expect(")")
            return HiveType("decimal", precision=precision, scale=scale)
        if name == "struct":
            self.expect("<")
            fields = []
            while True:
                if self.tokens[self.index] == ">":
                    break
                field_name = self.name()
                self.expect(":")
                fields.append(Column(field_name, self.type()))
                if self.tokens[self.index] != ",":
                    break
                self.expect(",")
            self.expect(">")
            return HiveType("struct", fields=tuple(fields))
        if name == "array":
            self.expect("<")
            element = self.type()
            self.expect(">")
            return HiveType("array", element=element)
        if name == "map":
            self.expect("<")
            key = self.type()
            if key != HiveType("string"):
                raise TableSchemaError(f"the catalog type {self.text!r} has map keys of {key}; the lake's maps have string keys")
            self.expect(",")
            value = self.type()
            self.expect(">")
            return HiveType("map", element=value)
        if name in ("varchar", "char"):  # varchar(n)/char(n): kept as written, so a merge reports it
            self.expect("(")
            length = self.next()
            self.expect(")")
            return HiveType(f"{name}({length})")
        return HiveType(name)
