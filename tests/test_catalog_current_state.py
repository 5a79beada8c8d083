"""The `current_state` keys of topic.yaml: what a change topic's current-state table is made of, resolved against the
schema files at load; every wrong entry fails naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_lake.current.state_table import current_table_schema
from kafka_lake.table_spec import Route
from kafka_lake.topics.loader import CatalogError, load_catalog, load_topic
from tests.change_topics import KEY, ROW_V1, ROW_V2, envelope


def change_entry(root: Path, name: str = "inventory.customers", key: dict | None = KEY,
                 versions: tuple[dict, ...] = (envelope(ROW_V1), envelope(ROW_V2)), **keys) -> Path:
    folder = root.joinpath(*name.split("."))
    folder.mkdir(parents=True, exist_ok=True)
    for number, schema in enumerate(versions, start=1):
        (folder / f"v{number}.avsc").write_text(json.dumps(schema))
    if key is not None:
        (folder / "key.avsc").write_text(json.dumps(key))
    document = {"topic": f"dbserver1.{name}", "owner": "team-test", "start_hour": "2026-11-01T00:00Z",
                "time_partitioning": {"source": "kafka_time"},
                "schema_versions": [{"version": n, "file": f"v{n}.avsc", "registry_id": 900 + n + 10 * len(name)}
                                    for n in range(1, len(versions) + 1)],
                **({"key_schema": "key.avsc"} if key is not None else {}),
                "current_state": {"row": "after", "delete_when": {"field": "op", "equals": "d"}}}
    document.update(keys)
    (folder / "topic.yaml").write_text(json.dumps({k: v for k, v in document.items() if v is not None}))
    return folder / "topic.yaml"


def test_given_a_debezium_topic_with_current_state_then_its_table_columns_are_the_rows_then_the_keys(tmp_path):
    topic = load_topic(change_entry(tmp_path))

    assert topic.current_state is not None
    assert topic.current_state.table == "customers_current" and topic.current_state.row == ("after",)
    assert topic.current_state.delete_when == Route(("op",), ("d",), True)
    assert topic.keep_tombstones, "a current-state table needs the tombstones as rows: each deletes its key"
    schema = current_table_schema(topic)
    assert [f.name for f in schema.fields] == ["id", "first_name", "email", "phone", "_kafka_key_id",
                                               "_kafka_partition", "_kafka_offset", "_kafka_timestamp"]
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == ["_kafka_key_id"]
    assert schema.find_field("_kafka_key_id").required and not schema.find_field("phone").required


def test_without_row_the_whole_value_is_the_row_and_the_table_may_be_named(tmp_path):
    flat = {"type": "record", "name": "Customer", "fields": [{"name": "id", "type": "int"},
                                                             {"name": "deleted", "type": "boolean"}]}
    topic = load_topic(change_entry(tmp_path, versions=(flat,), current_state={
        "table": "customers_now", "delete_when": {"field": "deleted", "equals": True}}))

    assert topic.current_state.table == "customers_now" and topic.current_state.row is None
    assert [f.name for f in current_table_schema(topic).fields][:2] == ["id", "deleted"]


WITHOUT_ROW = {**envelope(ROW_V1), "fields": [f for f in envelope(ROW_V1)["fields"] if f["name"] != "after"]}
FLOAT_KEY = {**KEY, "fields": [{"name": "id", "type": "double"}]}
CLASHING_ROW = {**ROW_V1, "name": "Value", "fields": [*ROW_V1["fields"], {"name": "_kafka_offset", "type": "long"}]}


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"key": None}, "current_state needs key_schema"),
        ({"keep_tombstones": False}, "remove keep_tombstones: false"),
        ({"route": {"field": "op", "equals": "c"}}, "current_state and route exclude each other"),
        ({"current_state": {"table": "Customers"}}, "current_state.table 'Customers' must be lowercase letters"),
        ({"current_state": {"table": "customers"}}, "current_state.table 'customers' is the topic's own table"),
        ({"current_state": {"row": "after.email"}}, "current_state.row 'after.email' is a string in version 1 (v1.avsc); "
                                                     "the row must be a record"),
        ({"current_state": {"row": "payload"}}, "current_state.row 'payload' is not a field of any schema version"),
        ({"versions": (envelope(ROW_V1), WITHOUT_ROW)}, "current_state.row 'after' is no field in version 2 (v2.avsc)"),
        ({"versions": (envelope(CLASHING_ROW),)}, "field '_kafka_offset' of current_state.row 'after' (version 1, v1.avsc) "
                                                  "takes a name of the table's own _kafka_… columns"),
        ({"current_state": {"row": "after", "delete_when": {"field": "op", "equals": 3}}},
         "current_state.delete_when.field 'op' is a string in version 1 (v1.avsc), which holds text; "
         "current_state.delete_when.equals 3 could never match"),
        ({"current_state": {"delete_when": {"field": "verb", "equals": "d"}}},
         "current_state.delete_when.field 'verb' is not a field of any schema version"),
        ({"current_state": {"row": "after", "mode": "upsert"}}, "unknown key 'mode' in current_state"),
        ({"subject_field": "source.db"}, "subject_field 'source.db' is not inside current_state.row 'after'"),
        ({"subject_field": ["before.id", "source.db"]},
         "no path of subject_field 'before.id, source.db' is inside current_state.row 'after'"),
        ({"subject_field": ["after.id", "before.idd"]}, "subject_field 'before.idd' is not a field of any schema version"),
        ({"subject_field": []}, "subject_field [] must be a dotted field path or a non-empty list of them"),
        ({"key": FLOAT_KEY}, "key field 'id' of key.avsc is double; the key's columns identify"),
    ],
)
def test_a_wrong_current_state_fails_at_load_naming_the_file_and_the_key(tmp_path, changes, problem):
    changes = dict(changes)
    options = {name: changes.pop(name) for name in ("key", "versions") if name in changes}
    path = change_entry(tmp_path, **options, **changes)

    with pytest.raises(CatalogError) as failure:
        load_topic(path)

    assert str(failure.value).startswith(str(path)) and problem in str(failure.value), str(failure.value)


def test_a_current_state_table_named_like_another_table_of_the_database_is_refused_naming_both(tmp_path):
    first = change_entry(tmp_path, "inventory.customers", current_state={"table": "orders"})
    second = change_entry(tmp_path, "inventory.orders", current_state=None, key=None)

    with pytest.raises(CatalogError) as failure:
        load_catalog(tmp_path)
    tolerant = load_catalog(tmp_path, tolerant=True)

    assert "table inventory.orders" in str(failure.value) and "give current_state.table another name" in str(failure.value)
    assert {b.path for b in tolerant.broken} == {str(first), str(second)}


def test_a_subject_field_of_several_paths_loads_as_written_and_matches_on_each_in_the_raw_table(tmp_path):
    """`subject_field` names one path or several (a Debezium delete event holds its row in `before` alone): written as
    one, it stays one, the contract; the current-state table matches on the paths inside its row."""
    from kafka_lake.current.upkeep import erased_in_current_state
    from kafka_lake.upkeep.subjects import ErasedSubjects, ErasureRequest, erased_subjects

    one = load_topic(change_entry(tmp_path / "one", subject_field="after.id"))
    several = load_topic(change_entry(tmp_path / "several", subject_field=["after.id", "before.id"]))
    request = ErasureRequest("r1", ("6",), "", "_erasure_requests/r1.json")

    assert one.subject_field == "after.id" and one.subject_fields == (("after", "id"),)
    assert several.subject_field == ("after.id", "before.id")
    assert several.subject_columns == (("after", "id"), ("before", "id"))
    erased = erased_subjects(several, [request], None)
    assert erased.by_column == ((("after", "id"), frozenset({"6"})), (("before", "id"), frozenset({"6"})))
    assert erased_in_current_state(several, erased) == ErasedSubjects(((("id",), frozenset({"6"})),), ("r1",))
