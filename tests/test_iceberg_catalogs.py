"""The Iceberg table of a topic in each catalog, and its schema through the topic catalog's versions.

The SQL catalog is real (SQLite); Glue is moto's server standing in for Glue, as for the Hive layout's Glue back
end (no Glue runs here); the REST catalog is a stand-in server speaking the REST protocol over a SQL catalog
(`tests/rest_catalog_server.py`: no REST catalog server installs from PyPI here), reached by pyiceberg's real client.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from dataclasses import replace

import pytest

from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, IcebergCatalogError, open_catalog, table_location
from kafka_lake.tables.iceberg.commits import landed_hour_matches_table
from kafka_lake.tables.iceberg.schema import IcebergSchemaError, ensure_table, table_schema
from kafka_lake.tables.iceberg.tables import IcebergCommitFailed, IcebergTables
from kafka_lake.tables.table_format import TableAccess
from tests.exactly_once import assert_exactly_once
from tests.landing_fixtures import RAW_HOURS, in_this_process, land
from tests.rest_catalog_server import RestCatalogServer
from tests.test_iceberg_tables import NOW, Lake, _keys, duckdb_rows, pyiceberg_rows, topic_deleted_after
from tests.test_table_catalog import record, write_topic

V1 = record("Reading", [
    ("sensor", "string"), ("count", "int"), ("ratio", "float"),
    ("place", record("Place", [("x", "int")])),
])
V2 = record("Reading", [
    ("sensor", "string"), ("count", "long"), ("ratio", "double"),
    ("place", record("Place", [("x", "int"), ("label", ["null", "string"])])),
    ("unit", ["null", "string"]),
])


def columns(schema) -> list[tuple[str, str]]:
    return [(name, type(schema.find_type(name)).__name__) for name in schema.column_names]


def ids(schema) -> dict[str, int]:
    return {name: schema.find_field(name).field_id for name in schema.column_names}


def mapped_names(fields, prefix: str = "") -> dict[str, int]:
    """The name mapping's names (dotted) and the field ids readers give columns of files without ids."""
    found = {}
    for field in fields:
        for name in field.names:
            found[prefix + name] = field.field_id
            found.update(mapped_names(field.fields, f"{prefix}{name}."))
    return found


def test_given_a_new_version_then_the_table_evolves_by_schema_updates_keeping_every_field_id(tmp_path):
    lake = str(tmp_path / "lake")
    storage = LakeStorage(lake)
    catalog = open_catalog(IcebergCatalogConfig(lake))
    first = write_topic(tmp_path / "v1", "sensors", "readings", [V1])
    created = ensure_table(catalog, first, table_location(storage, "sensors", "readings"))
    both = write_topic(tmp_path / "v2", "sensors", "readings", [V1, V2])

    evolved = ensure_table(catalog, both, table_location(storage, "sensors", "readings"))

    before, after = ids(created.schema()), ids(evolved.schema())
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == {"unit", "place.label"}
    schema = evolved.schema()
    assert (str(schema.find_type("count")), str(schema.find_type("ratio"))) == ("long", "double")
    top = [f.name for f in schema.fields]
    assert top.index("unit") == top.index("_kafka_topic") - 1 and top[-3:] == ["schema_version", "date", "hour"]
    mapped = mapped_names(evolved.name_mapping().root)
    assert mapped["unit"] == after["unit"] and mapped["place.label"] == after["place.label"]
    # What the catalog loader validates is what the table becomes: the same columns, in order, of the same types.
    assert columns(table_schema(both)) == columns(schema)
    assert ensure_table(catalog, both, table_location(storage, "sensors", "readings")).metadata.current_schema_id \
        == evolved.metadata.current_schema_id  # nothing to change the second time


def test_a_widening_iceberg_has_no_promotion_for_is_the_new_tables_type_and_fails_on_a_table_that_exists(tmp_path):
    """int → double is a widening the topic catalog takes; Iceberg has no such promotion. Every version lands in the
    table's widest type (`landed_schema`), so a table made with both versions declares double; a table that exists
    with an int column cannot become double, and its evolution fails naming the file and the field."""
    count_as_double = record("Reading", [("sensor", "string"), ("count", "double"), ("ratio", "float"),
                                         ("place", record("Place", [("x", "int")]))])
    lake = str(tmp_path / "lake")
    storage, catalog = LakeStorage(lake), open_catalog(IcebergCatalogConfig(lake))
    topic = write_topic(tmp_path / "both", "sensors", "readings", [V1, count_as_double])
    assert str(table_schema(topic).find_type("count")) == "double"
    ensure_table(catalog, write_topic(tmp_path / "v1", "sensors", "readings", [V1]),
                 table_location(storage, "sensors", "readings"))

    with pytest.raises(IcebergSchemaError) as refused:
        ensure_table(catalog, topic, table_location(storage, "sensors", "readings"))

    assert "count" in str(refused.value) and "topic.yaml" in str(refused.value), str(refused.value)


def test_a_type_no_iceberg_table_holds_fails_naming_the_field(tmp_path):
    topic = write_topic(tmp_path, "sensors", "readings", [record("Reading", [("sensor", "string"), ("odd", "null")])])
    with pytest.raises(IcebergSchemaError) as refused:
        table_schema(topic)
    assert "'odd'" in str(refused.value) and "always null" in str(refused.value) and "v1.avsc" in str(refused.value)


def test_a_time_millis_field_is_an_iceberg_time_column_of_microseconds(tmp_path):
    """Iceberg's only time is in microseconds: an Iceberg topic lands time-millis as TIME(MICROS) (`iceberg_rows`),
    nested ones included, and the table declares a time column."""
    import pyarrow as pa

    from kafka_lake.tables.iceberg.schema import iceberg_rows

    millis = {"type": "int", "logicalType": "time-millis"}
    topic = write_topic(tmp_path, "sensors", "readings", [record("Reading", [
        ("at", millis), ("spans", {"type": "array", "items": record("Span", [("start", millis)])})])])
    assert str(table_schema(topic).find_type("at")) == "time" == str(table_schema(topic).find_type("spans.element.start"))
    landed = pa.table({"at": pa.array([1_500, None], pa.time32("ms")),
                       "spans": pa.array([[{"start": 2}], None], pa.list_(pa.struct([("start", pa.time32("ms"))])))})

    held = iceberg_rows(landed)

    assert held.schema.field("at").type == pa.time64("us")
    assert held.column("at").cast(pa.int64()).to_pylist() == [1_500_000, None]
    assert held.column("spans").to_pylist() == [[{"start": __import__("datetime").time(0, 0, 0, 2000)}], None]


def test_a_table_of_that_name_that_is_not_the_topics_is_refused_not_changed(tmp_path):
    lake = str(tmp_path / "lake")
    storage = LakeStorage(lake)
    catalog = open_catalog(IcebergCatalogConfig(lake))
    topic = write_topic(tmp_path, "sensors", "readings", [V1])
    ensure_table(catalog, topic, table_location(storage, "sensors", "readings"))

    with pytest.raises(IcebergSchemaError, match="lies at .* not .*elsewhere"):
        ensure_table(catalog, topic, table_location(storage, "sensors", "elsewhere"))


def test_two_runs_creating_the_tables_namespace_at_once_both_get_the_table(tmp_path):
    """Two landings starting at once on a new namespace, each through its own connection to the embedded catalog:
    both see the namespace missing, the second insert fails in SQLite. Before, that failed its landing with an
    `IntegrityError`. The interleaving is forced: the other run creates the namespace right after this one looked."""
    lake = str(tmp_path / "lake")
    storage = LakeStorage(lake)
    topic = write_topic(tmp_path, "sensors", "readings", [V1])
    this_run, other_run = open_catalog(IcebergCatalogConfig(lake)), open_catalog(IcebergCatalogConfig(lake))
    looked = this_run.namespace_exists

    def missing_then_created_by_the_other_run(namespace):
        seen = looked(namespace)
        if not seen:
            other_run.create_namespace_if_not_exists(namespace)
        return seen

    this_run.namespace_exists = missing_then_created_by_the_other_run  # type: ignore[method-assign]
    table = ensure_table(this_run, topic, table_location(storage, "sensors", "readings"))

    assert table.name() == ("sensors", "readings")
    assert ensure_table(other_run, topic, table_location(storage, "sensors", "readings")).metadata.table_uuid \
        == table.metadata.table_uuid


def test_the_tables_are_registered_under_the_catalog_name_iceberg_catalog_name_sets(tmp_path):
    """An SQL catalog stores its name with each table, and a reader of it (Spark's JdbcCatalog) lists only the tables
    under its own name: `ICEBERG_CATALOG_NAME` sets it (default `kafka_lake`); a name no engine takes is refused."""
    lake = str(tmp_path / "lake")
    settings = replace(PlatformSettings.from_env({"ICEBERG_CATALOG_NAME": "lake"}), lake_root=lake)
    catalog = open_catalog(IcebergCatalogConfig.from_settings(settings))
    ensure_table(catalog, write_topic(tmp_path, "sensors", "readings", [V1]), table_location(LakeStorage(lake), "sensors", "readings"))

    with sqlite3.connect(f"{lake}/_iceberg/catalog.db") as database:
        assert database.execute("SELECT catalog_name, table_namespace, table_name FROM iceberg_tables").fetchall() \
            == [("lake", "sensors", "readings")]
    assert PlatformSettings.from_env({}).iceberg_catalog_name == "kafka_lake"
    with pytest.raises(ValueError, match="ICEBERG_CATALOG_NAME is 'my-lake'"):
        PlatformSettings.from_env({"ICEBERG_CATALOG_NAME": "my-lake"})


def test_the_embedded_catalog_is_refused_on_an_s3_lake_unless_a_database_is_named():
    with pytest.raises(IcebergCatalogError, match="ICEBERG_CATALOG_URI"):
        open_catalog(IcebergCatalogConfig("s3://lake/prefix"))
    config = IcebergCatalogConfig("s3://lake/prefix", sql_uri="postgresql+psycopg2://u:secret@db/iceberg")
    assert config.kind == "sql" and "secret" not in config.describe()


def test_two_iceberg_catalogs_named_at_once_are_refused_naming_both():
    with pytest.raises(IcebergCatalogError, match="ICEBERG_REST_URI and TABLE_CATALOG=glue"):
        open_catalog(IcebergCatalogConfig("s3://lake/prefix", table_catalog="glue", rest_uri="http://127.0.0.1:1"))


def land_and_read(lake: Lake) -> None:
    manifests = lake.land(RAW_HOURS)
    reloaded = lake.catalog.load_table((lake.topic.database, lake.topic.table))
    expected = lake.landed_rows()
    assert _keys(pyiceberg_rows(reloaded)) == _keys(expected) == _keys(duckdb_rows(reloaded))
    assert all(landed_hour_matches_table(reloaded, lake.storage, m).passed for m in manifests)


def test_in_glue_the_landed_hours_commit_and_read_back(broker, tmp_path, glue_endpoint):
    lake_root = f"s3://lake/{uuid.uuid4().hex[:12]}"
    lake = Lake(broker, tmp_path, lake_root, IcebergCatalogConfig(lake_root, table_catalog="glue"))
    # moto keeps one Glue per process, which the Hive layout's Glue tests share: the table goes after the test.
    with topic_deleted_after(broker, lake), contextlib.closing(_Dropped(lake)):
        assert type(lake.catalog).__name__ == "GlueCatalog"
        land_and_read(lake)


def test_in_a_rest_catalog_the_landed_hours_commit_and_read_back(broker, tmp_path):
    with RestCatalogServer(str(tmp_path / "rest_backend.db")) as server:
        lake_root = str(tmp_path / "lake")
        lake = Lake(broker, tmp_path, lake_root, IcebergCatalogConfig(lake_root, rest_uri=server.uri))
        with topic_deleted_after(broker, lake):
            assert type(lake.catalog).__name__ == "RestCatalog"
            land_and_read(lake)


class _Dropped:
    def __init__(self, lake: Lake):
        self.lake = lake

    def close(self) -> None:
        self.lake.catalog.drop_table((self.lake.topic.database, self.lake.topic.table))


def test_when_the_rest_catalog_is_down_at_an_hours_commit_then_the_landing_fails_saying_so_and_the_next_commits_it(
        broker, tmp_path):
    """The catalog goes away after the hour's files and manifest are written, before its snapshot (the stand-in
    server stopped from the table format, as an outage would strike); it comes back on the same address."""
    backend = str(tmp_path / "rest_backend.db")
    server = RestCatalogServer(backend).__enter__()
    lake_root = str(tmp_path / "lake")
    lake = Lake(broker, tmp_path, lake_root, IcebergCatalogConfig(lake_root, rest_uri=server.uri))

    class CatalogGoesDown(IcebergTables):
        def commit_hour(self, *args):
            server.__exit__(None, None, None)
            return super().commit_hour(*args)

    with topic_deleted_after(broker, lake):
        with pytest.raises(IcebergCommitFailed, match=rf"{lake.topic.topic} hour .*manifest are written.*REST catalog "
                                                      rf"{server.uri}.*materializing catalog/e2e/orders") as failed:
            land(lake.topic, RAW_HOURS[:1], lake.settings, in_this_process, now=NOW,
                 table_formats=lambda table: CatalogGoesDown(TableAccess(lake.storage, lake.config)))
        assert isinstance(failed.value.__cause__, OSError), failed.value.__cause__  # refused: nothing listens
        assert lake.manifests.landed_hours()  # the manifest is written: the hour waits for its commit

        with RestCatalogServer(backend, port=server.port):
            lake.land()
            assert_exactly_once(lake.storage, lake.topic, lake.traffic.in_hours(RAW_HOURS).produced, lake.config)
            assert _keys(pyiceberg_rows(lake.table)) == sorted((p.partition, p.offset) for p in lake.traffic.rows())


def test_the_catalog_shown_names_the_embedded_database_by_its_absolute_path_and_hides_credentials(tmp_path):
    lake_root = str(tmp_path / "lake")
    assert IcebergCatalogConfig(lake_root).describe() == f"SQL catalog sqlite:///{tmp_path}/lake/_iceberg/catalog.db"
    shown = IcebergCatalogConfig(lake_root, sql_uri="postgresql+psycopg2://lake:s3cret@db:5432/iceberg").describe()
    assert shown == "SQL catalog postgresql+psycopg2://db:5432/iceberg"
