"""The table formats a topic's table can be kept in, chosen once from its table spec: the registry beside the
`TableFormat` protocol (`table_format`), keyed by the names `table_format:` and `TABLE_FORMAT` take.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka_lake.settings import TABLE_FORMATS as FORMAT_NAMES
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.table_format import TableAccess, TableFormat


# Each format is imported when a table of it is met, as pyiceberg loads its catalogs: a landing task of a Hive-layout
# table never pays for importing pyiceberg.
def _hive_layout() -> type[TableFormat]:
    from kafka_lake.tables.hive_layout import HiveTables

    return HiveTables


def _iceberg() -> type[TableFormat]:
    from kafka_lake.tables.iceberg.tables import IcebergTables

    return IcebergTables


TABLE_FORMATS: dict[str, Callable[[], type[TableFormat]]] = {"hive": _hive_layout, "iceberg": _iceberg}
# The names users write are declared where the environment is read; each has its format here.
assert set(TABLE_FORMATS) == set(FORMAT_NAMES), (sorted(TABLE_FORMATS), FORMAT_NAMES)


def table_format_type(topic: TableSpec) -> type[TableFormat]:
    """The class of the topic's table format, for what is declared before a run (checks, descriptions)."""
    return TABLE_FORMATS[topic.table_format]()


def table_format(topic: TableSpec, access: TableAccess) -> TableFormat:
    """The topic's table format, reaching the lake, catalogs and Spark through `access`."""
    return table_format_type(topic)(access)  # type: ignore[call-arg]
