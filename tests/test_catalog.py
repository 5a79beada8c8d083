"""The topic catalog: the samples load, and every kind of wrong entry fails at load naming its file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_lake.topics.loader import CatalogError, load_catalog, load_topic
from tests.constants import REPO
from tests.readme_entry import write_readme_entry


def test_the_sample_catalog_loads_with_both_time_sources():
    catalog = load_catalog(REPO / "schema_catalog")
    page_views = catalog.by_name("shop", "page_views")
    transactions = catalog.by_topic("payments.transactions")
    assert (page_views.time_source, page_views.time_field) == ("event_time", ("occurred_at",))
    assert [v.version for v in page_views.schema_versions] == [1, 2]
    assert ("client", "ip_address") in page_views.pii_fields
    assert transactions.time_source == "kafka_time" and transactions.time_field is None


def edit_topic(catalog: Path, change) -> Path:
    path = catalog / "shop" / "page_views" / "topic.yaml"
    path.write_text(change(path.read_text()))
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda text: text.replace("owner: team-web\n", ""), "missing required key 'owner'"),
        (lambda text: text.replace("field: occurred_at", "field: meta.occurred"), "'meta.occurred' is not a field of version 1"),
        (lambda text: text.replace("field: occurred_at", "field: url"), None),  # a string is a valid time field
        (lambda text: text.replace("field: occurred_at", "field: duration_ms"), "must be a timestamp"),
        (lambda text: text.replace("source: event_time", "source: wall_clock"), "must be event_time or kafka_time"),
        (lambda text: text.replace('start_hour: "2026-11-01T00:00Z"', 'start_hour: "2026-11-01T00:30Z"'), "must be on the hour"),
        (lambda text: text.replace("registry_id: 1002", "registry_id: 2001"), "registry_id 2001"),
        (lambda text: text.replace("file: v2.avsc", "file: v9.avsc"), "schema file does not exist"),
        (lambda text: text.replace("file: v2.avsc", "file: ../../payments/transactions/v1.avsc"), "must sit beside topic.yaml"),
        (lambda text: text + "colour: blue\n", "unknown key(s) colour"),
        (lambda text: text.replace("pii_fields: [user_id, client.ip_address]", "pii_fields: [user_id, client.ip]"),
         "'client.ip' is not a field"),
        (lambda text: "topic: [unclosed", "not valid YAML"),
        (lambda text: text + "open_hour: {every_minutes: 45}\n", "every_minutes"),
        (lambda text: text + "open_hour: on\n", "open_hour"),
    ],
)
def test_a_wrong_entry_fails_at_load_naming_the_file(catalog_copy, change, message):
    path = edit_topic(catalog_copy, change)
    if message is None:
        load_catalog(catalog_copy)
        return
    with pytest.raises(CatalogError) as failure:
        load_catalog(catalog_copy)
    assert str(path) in str(failure.value) or path.parent.name in str(failure.value)
    assert message in str(failure.value)


def test_a_schema_that_does_not_parse_names_the_schema_file(catalog_copy):
    schema = catalog_copy / "shop" / "page_views" / "v2.avsc"
    schema.write_text('{"type": "record", "name": "PageView", "fields": [{"name": "x", "type": "decimal"}]}')
    with pytest.raises(CatalogError, match=r"v2\.avsc: not a valid Avro schema"):
        load_catalog(catalog_copy)


def test_an_incompatible_evolution_names_both_versions(catalog_copy):
    schema_path = catalog_copy / "shop" / "page_views" / "v2.avsc"
    schema = json.loads(schema_path.read_text())
    for field in schema["fields"]:
        if field["name"] == "duration_ms":
            field["type"] = "string"
    schema_path.write_text(json.dumps(schema))
    with pytest.raises(CatalogError) as failure:
        load_catalog(catalog_copy)
    assert "version 2 (v2.avsc) is not a compatible evolution of version 1 (v1.avsc)" in str(failure.value)
    assert "duration_ms" in str(failure.value)


def test_a_folder_name_that_is_no_safe_identifier_is_refused(catalog_copy):
    (catalog_copy / "shop" / "page_views").rename(catalog_copy / "shop" / "Page-Views")
    with pytest.raises(CatalogError, match="table folder 'Page-Views'"):
        load_catalog(catalog_copy)


def test_the_same_kafka_topic_twice_in_the_same_way_is_refused_naming_both_files(catalog_copy):
    twin = catalog_copy / "shop" / "page_views_copy"
    twin.mkdir()
    for source in (catalog_copy / "shop" / "page_views").iterdir():
        (twin / source.name).write_text(source.read_text().replace("registry_id: 100", "registry_id: 300"))
    with pytest.raises(CatalogError) as refused:
        load_catalog(catalog_copy)
    assert str(refused.value) == (
        f"{twin / 'topic.yaml'}: Kafka topic 'shop.page_views' is already landed by "
        f"{catalog_copy / 'shop' / 'page_views' / 'topic.yaml'} in the same way (format avro, placed by event_time "
        f"field occurred_at); give one a route, or another time_partitioning or format")


# --- fields whose names the lake's columns take, renamed ----------------------------------------------------

DATED = {
    "type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "date", "type": {"type": "record", "name": "When", "fields": [
            {"name": "occurred_at", "type": "string"}, {"name": "user", "type": "string"}]}},
        {"name": "hour", "type": "int"},
    ],
}


def write_entry(tmp_path: Path, name: str, schema: dict, time_field: str, **keys) -> Path:
    """`<database>/<table>/topic.yaml` (name `database.table`, also the Kafka topic) with one schema version."""
    folder = tmp_path.joinpath(*name.split("."))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "v1.avsc").write_text(json.dumps(schema))
    document = {"topic": name, "owner": "team-test", "start_hour": "2026-11-01T00:00Z",
                "time_partitioning": {"source": "event_time", "field": time_field},
                "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": 7001}], **keys}
    (folder / "topic.yaml").write_text(json.dumps(document))
    return folder / "topic.yaml"


def dated_topic(tmp_path: Path, **keys) -> Path:
    return write_entry(tmp_path, "shop.orders", DATED, "date.occurred_at", **keys)


def test_a_field_named_like_a_layout_column_without_a_rename_fails_at_load_suggesting_rename(tmp_path):
    path = dated_topic(tmp_path)

    with pytest.raises(CatalogError) as refused:
        load_topic(path)

    assert str(path) in str(refused.value) and "v1.avsc" in str(refused.value)
    assert "field 'date'" in str(refused.value) and "`rename: {date: <column>}`" in str(refused.value)


def test_a_rename_names_the_columns_and_the_catalogs_keys_keep_naming_avro_fields(tmp_path):
    topic = load_topic(dated_topic(tmp_path, rename={"date": "order_date", "hour": "order_hour"},
                                   pii_fields=["date.user"], subject_field="date.user"))

    assert topic.columns_by_field == {"date": "order_date", "hour": "order_hour"}
    assert topic.time_field == ("date", "occurred_at") and topic.pii_fields == (("date", "user"),)
    assert topic.subject_columns == (("order_date", "user"),)
    assert topic.column_path(("id",)) == ("id",)


@pytest.mark.parametrize(
    ("rename", "message"),
    [
        ({"date": "order_date", "hour": "Date"}, "rename.hour\\) of .* takes the name of one of the lake's own columns"),
        ({"date": "id", "hour": "order_hour"}, "field 'date' \\(renamed to 'id' by rename.date\\) and field 'id'"),
        ({"date": "ID", "hour": "order_hour"}, "would both be column 'ID'"),
        ({"date": "order_date", "hour": "order_date"}, "would both be column 'order_date'"),
        ({"date": "_kafka_date", "hour": "order_hour"}, "takes the name of one of the lake's own columns"),
        ({"date": "order date", "hour": "order_hour"}, "rename.date is 'order date'; a column name is letters"),
        ({"date": 7, "hour": "order_hour"}, "rename.date is 7"),
        ({"date.occurred_at": "at", "date": "d", "hour": "h"}, "renames top-level fields only"),
        ({"day": "order_day", "date": "d", "hour": "h"}, "rename.day names no top-level field"),
        (["date", "order_date"], "'rename' must map Avro field names to column names"),
    ],
)
def test_a_rename_whose_column_clashes_or_repeats_fails_at_load_naming_the_file_and_key(tmp_path, rename, message):
    path = dated_topic(tmp_path, rename=rename)

    with pytest.raises(CatalogError, match=message) as refused:
        load_topic(path)

    assert str(path) in str(refused.value)


# --- records that contain themselves ------------------------------------------------------------------------

NODE = {  # Avro's interop `Node`
    "type": "record", "name": "Node", "fields": [
        {"name": "label", "type": "string"}, {"name": "occurred_at", "type": "string"},
        {"name": "owner", "type": {"type": "record", "name": "Owner", "fields": [{"name": "email", "type": "string"}]}},
        {"name": "children", "type": {"type": "array", "items": "Node"}},
        {"name": "partner", "type": ["null", "Node"], "default": None},
    ],
}


def node_topic(tmp_path: Path, **keys) -> Path:
    return write_entry(tmp_path, "graph.nodes", NODE, "occurred_at", **keys)


def test_a_recursive_record_loads_and_says_where_it_recurs_unless_the_topic_refuses_recursion(tmp_path):
    topic = load_topic(node_topic(tmp_path, pii_fields=["owner.email", "partner"]))
    assert topic.version(1).recursions == ("record 'Node' at field 'children[]'", "record 'Node' at field 'partner'")

    path = node_topic(tmp_path, recursive_records="refuse")
    with pytest.raises(CatalogError, match="has a record that contains itself .*recursive_records is refuse") as refused:
        load_topic(path)
    assert str(path) in str(refused.value)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"subject_field": "children"}, "subject_field 'children' is in field 'children' .* lands as one column of JSON"),
        ({"pii_fields": ["partner.owner.email"]}, "'partner.owner.email' is in field 'partner' .*name 'partner' itself to "
                                                  "pseudonymize its whole text"),
        ({"time_partitioning": {"source": "event_time", "field": "children"}}, "must be a timestamp"),
        ({"recursive_records": "maybe"}, "recursive_records must be json or refuse, got 'maybe'"),
    ],
)
def test_a_key_naming_what_lands_as_json_text_fails_at_load(tmp_path, keys, message):
    path = node_topic(tmp_path, **keys)

    with pytest.raises(CatalogError, match=message) as refused:
        load_topic(path)

    assert str(path) in str(refused.value)


# --- the document's own shape -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"time_partitioning": {"source": "event_time", "field": "occurred_at", "unti": "us"}},
         "unknown key 'unti' in time_partitioning; allowed there: source, field, unit"),
        ({"schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": 7001, "registry": "prod"}]},
         "unknown key 'registry' in schema_versions[0]; allowed there: version, file, registry_id"),
    ],
    ids=["a misspelt unit", "an extra key of a schema version"],
)
def test_an_unknown_key_inside_a_block_fails_at_load_naming_it_and_what_is_allowed(tmp_path, keys, message):
    """A misspelt `unit` would otherwise leave the topic silently counting milliseconds."""
    path = write_entry(tmp_path, "shop.orders", NODE, "occurred_at", **keys)

    with pytest.raises(CatalogError) as refused:
        load_topic(path)

    assert str(path) in str(refused.value) and message in str(refused.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("retention_days", "90"), ("retention_days", True), ("max_rows_per_task", 1000.0), ("owner", 7),
     ("dead_letter_rate_threshold", "0.1"), ("pii_fields", "label"), ("time_partitioning", {"source": "event_time",
                                                                                           "field": 5})],
)
def test_a_value_of_another_type_is_refused_not_converted(tmp_path, key, value):
    path = write_entry(tmp_path, "graph.nodes", NODE, "occurred_at", **{key: value})

    with pytest.raises(CatalogError, match=key) as refused:
        load_topic(path)

    assert str(path) in str(refused.value)


def test_the_readmes_example_entry_loads_beside_every_sample_entry(catalog_copy):
    """Given the README's four steps followed as written, its `v1.avsc` and `topic.yaml` copied into the catalog; then
    every entry loads, the samples' and the new one: the example takes no sample's registry id nor topic (copied as
    it was, it knocked a sample table out with it)."""
    samples = load_catalog(catalog_copy)
    added = write_readme_entry(catalog_copy)

    catalog = load_catalog(catalog_copy, tolerant=True)

    assert catalog.broken == ()
    assert {t.name for t in catalog.topics} == {t.name for t in samples.topics} | {"billing/invoices"}
    assert next(t for t in catalog.topics if t.name == "billing/invoices").source_file == str(added)


def test_open_hour_is_the_entrys_own_else_the_deployments_and_off_opts_out(catalog_copy):
    """`open_hour: {every_minutes: N}` of topic.yaml, else `OPEN_HOUR_EVERY_MINUTES`; `open_hour: off` (which YAML reads
    as false) keeps a topic's hours landing once closed whatever the deployment says."""
    from kafka_lake.settings import PlatformSettings
    from kafka_lake.topics.archive import load_platform_catalog

    page_views = catalog_copy / "shop" / "page_views" / "topic.yaml"
    page_views.write_text(page_views.read_text() + "open_hour: {every_minutes: 3}\n")
    orders = catalog_copy / "shop" / "orders" / "topic.yaml"
    orders.write_text(orders.read_text() + "open_hour: off\n")

    def minutes(environ: dict) -> dict[str, int | None]:
        settings = PlatformSettings.from_env({"SCHEMA_CATALOG_DIR": str(catalog_copy), **environ})
        return {t.name: t.open_hour_minutes for t in load_platform_catalog(settings).topics}

    assert minutes({})["shop/page_views"] == 3 and minutes({})["shop/orders"] is None
    assert set(minutes({}).values()) == {3, None}
    deployment = minutes({"OPEN_HOUR_EVERY_MINUTES": "10"})
    assert (deployment["shop/page_views"], deployment["shop/orders"], deployment["crm/customers"]) == (3, None, 10)
    with pytest.raises(ValueError, match="OPEN_HOUR_EVERY_MINUTES is '0'"):
        PlatformSettings.from_env({"OPEN_HOUR_EVERY_MINUTES": "0"})


def test_a_runs_catalog_holds_every_table_of_the_kafka_topics_it_carries():
    """A run's process builds the tables of the Kafka topics its tables land (one asset lands a topic's tables)."""
    from kafka_lake.topics.loader import TopicCatalog, load_catalog

    whole = load_catalog(REPO / "schema_catalog")
    orders = whole.topics[0]
    copy = orders.model_copy(update=dict(database="copies", table=orders.table))
    catalog = TopicCatalog(whole.topics + (copy,), directory=whole.directory)

    carried = catalog.carrying([copy.name])

    assert {t.name for t in carried.topics} == {t.name for t in catalog.tables_of(orders.topic)} | {copy.name}
    assert len(catalog.tables_of(orders.topic)) > 1 and len(carried.topics) < len(catalog.topics)
    assert catalog.carrying([]) is catalog
