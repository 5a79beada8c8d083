"""Hostile input: corrupted Kafka values, broken catalog files, unsafe names, huge records and deep schemas.

Hypothesis throws generated garbage at the decoder and the catalog loader; every example has a deadline, so a
decoder or loader that starts to crawl fails the test instead of hanging the run. `HOSTILE_EXAMPLES=5000` fuzzes
longer than the default few seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kafka_lake.schemas.avro_files import MAX_SCHEMA_DEPTH
from kafka_lake.table_spec import TableSpec
from kafka_lake.topics.loader import CatalogError, load_catalog, load_topic
from tests.conftest import REPO
from tests.test_columnar import assert_same

SAMPLE = REPO / "schema_catalog" / "shop" / "page_views"
FUZZ = settings(
    max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 150)),
    deadline=timedelta(seconds=5),  # far above the milliseconds one example takes: only a runaway trips it
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# --- the catalog loader ---------------------------------------------------------------------------------


def sample_copy(root: Path) -> Path:
    """A writable copy of the sample page_views entry at `<root>/shop/page_views`."""
    folder = root / "shop" / "page_views"
    shutil.copytree(SAMPLE, folder)
    return folder


def load_or_refuse(folder: Path):
    """Loads the entry; the only acceptable failure is a CatalogError that names a file of the entry."""
    try:
        return load_topic(folder / "topic.yaml")
    except CatalogError as error:
        assert str(folder) in str(error), f"the error names no file of {folder}: {error}"
        return error


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["", ".", "..", "../..", "/etc/passwd", "a;b", "a`b", "a'b", 'a"b', "a b", "\u0430dmin",
                     "occurred_at", "user_id", "client.ip_address", "event_time", "kafka_time", "v1.avsc",
                     "2026-11-01T00:00Z", "0001-01-01T00:00+01:00", "9999-12-31T23:00-01:00", "x\x00y"]),
    st.dates(), st.datetimes(),
)
# Values a conversion away from a valid one: what a lenient loader would accept, and change.
NEAR_MISSES = st.sampled_from(["90", "1.5", "true", "yes", "null", "~", "", "JSON", "Event_Time", "occurred_at ", True,
                               False, 1.0, 90.0, 0.0, 0, -1, 2**31, ["user_id"], {"source": "event_time"}])
YAML_VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=10,
)


def key_paths(document) -> list[tuple]:
    """Every path to a value in the sample document: top-level keys, nested keys, list items."""
    found = []

    def visit(node, path):
        found.append(path)
        if isinstance(node, dict):
            for key, child in node.items():
                visit(child, (*path, key))
        elif isinstance(node, list):
            for index, child in enumerate(node):
                visit(child, (*path, index))

    visit(document, ())
    return found[1:]


def replaced(document, path: tuple, value, delete: bool):
    document = json.loads(json.dumps(document))
    *parents, last = path
    node = document
    for step in parents:
        node = node[step]
    if delete:
        del node[last]
    else:
        node[last] = value
    return document


SAMPLE_DOCUMENT = yaml.safe_load((SAMPLE / "topic.yaml").read_text())
SAMPLE_SCHEMA = json.loads((SAMPLE / "v1.avsc").read_text())
# The sample with the optional keys it does not use, so their values are fuzzed too.
FUZZED_DOCUMENT = {**SAMPLE_DOCUMENT, "rename": {"referrer": "referred_by", "url": "page_url"}, "recursive_records": "json",
                   "format": "avro", "route": {"field": "url", "in": ["/home", "/cart"]}, "keep_tombstones": False,
                   "table_format": "hive"}


# The defaults of the optional keys the fuzzed document uses, as SPEC and the README's table of keys state them.
DOCUMENTED_DEFAULTS = {"retention_days": None, "pii_fields": [], "subject_field": None, "freshness_minutes": None,
                       "max_rows_per_task": 1_000_000, "rename": {}, "format": "avro", "route": None,
                       "keep_tombstones": False, "table_format": "hive"}  # the deployment's TABLE_FORMAT, hive unset


def as_written(topic: TableSpec) -> dict:
    """A loaded topic told as the `topic.yaml` keys that say it, each in the type YAML gives it."""
    partitioning = {"source": topic.time_source, "field": ".".join(topic.time_field) if topic.time_field else None,
                    "unit": topic.time_unit}
    return {
        "topic": topic.topic, "owner": topic.owner, "time_partitioning": without_nulls(partitioning),
        "schema_versions": [{"version": v.version, "file": v.file, "registry_id": v.registry_id}
                            for v in topic.schema_versions],
        "retention_days": topic.retention_days, "pii_fields": [".".join(path) for path in topic.pii_fields],
        "subject_field": list(topic.subject_field) if isinstance(topic.subject_field, tuple) else topic.subject_field,
        "freshness_minutes": topic.freshness_minutes,
        "max_rows_per_task": topic.max_rows_per_task, "rename": dict(topic.rename), "format": topic.payload_format,
        "route": None if topic.route is None else {"field": topic.route.field_text, **(
            {"equals": topic.route.values[0]} if topic.route.written_as_equals else {"in": list(topic.route.values)})},
        "keep_tombstones": topic.keep_tombstones, "table_format": topic.table_format,
    }


def without_nulls(block):
    """A mapping whose keys written without a value are left out, as the catalog reads them."""
    return {key: value for key, value in block.items() if value is not None} if isinstance(block, dict) else block


def same(stated, loaded) -> bool:
    """Equal values of the same types all the way down: `"90"` is not 90, `True` not 1, `1.0` not 1."""
    if type(stated) is not type(loaded):
        return False
    if isinstance(stated, dict):
        return stated.keys() == loaded.keys() and all(same(stated[key], loaded[key]) for key in stated)
    if isinstance(stated, list):
        return len(stated) == len(loaded) and all(map(same, stated, loaded))
    return stated == loaded


def hour_stated(value) -> datetime:
    """The hour a loaded `start_hour` names: an ISO 8601 time, a YAML timestamp or date; UTC where it names no zone."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    else:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def assert_means_what_it_says(document: dict, topic: TableSpec) -> None:
    """A topic.yaml that loads is what it says: every key's value as written (never converted, never dropped for a
    default), every absent optional key its documented default, and no required key absent."""
    for key, loaded in as_written(topic).items():
        stated = document.get(key)
        if stated is None:
            assert key in DOCUMENTED_DEFAULTS, f"required key {key!r} is absent or null, yet the entry loaded"
            assert same(DOCUMENTED_DEFAULTS[key], loaded), f"absent {key!r} loaded as {loaded!r}, not its default"
        elif key in ("time_partitioning", "schema_versions", "route"):
            stated = [without_nulls(v) for v in stated] if key == "schema_versions" else without_nulls(stated)
            assert same(stated, loaded), f"{key} says {stated!r} but loaded as {loaded!r}"
        else:
            assert same(stated, loaded), f"{key} says {stated!r} but loaded as {loaded!r}"
    assert topic.start_hour == hour_stated(document["start_hour"]) and topic.start_hour.minute == 0
    assert document.get("recursive_records") in (None, "json", "refuse"), document["recursive_records"]


@FUZZ
@given(path=st.sampled_from(key_paths(FUZZED_DOCUMENT)), value=st.one_of(NEAR_MISSES, YAML_VALUES), delete=st.booleans())
def test_given_a_topic_yaml_with_one_value_replaced_by_anything_when_loaded_then_it_means_what_it_says_or_names_the_file(
    path, value, delete
):
    with tempfile.TemporaryDirectory() as root:
        folder = sample_copy(Path(root))
        text = yaml.safe_dump(replaced(FUZZED_DOCUMENT, path, value, delete))
        (folder / "topic.yaml").write_text(text)

        loaded = load_or_refuse(folder)

        if not isinstance(loaded, CatalogError):
            assert_means_what_it_says(yaml.safe_load(text), loaded)


YAML_TOKENS = st.sampled_from([
    "topic: ", "owner: x\n", "schema_versions:\n", "  - ", "{", "}", "[", "]", ": ", ",", "\n", "  ", "\t", "&a ", "*a",
    "*b", "!!python/object:os.system ", "!!binary ", "? ", "---\n", "...\n", "#", "'", '"', "|\n", ">\n", "2026-13-45",
    "2026-11-01 25:00:00", "1e999", "0x", ".nan", "~", "<<: *a\n", "\ufeff", "\u202e", "é", "\x85", "%YAML 9.9\n",
])


@FUZZ
@given(text=st.one_of(st.lists(YAML_TOKENS, max_size=30).map("".join), st.text(max_size=200)), raw=st.binary(max_size=64))
def test_given_a_topic_yaml_of_garbage_when_loaded_then_it_is_refused_naming_the_file(text, raw):
    """Neither the tokens nor random text or bytes can spell the required keys: every example must be refused."""
    with tempfile.TemporaryDirectory() as root:
        folder = sample_copy(Path(root))
        (folder / "topic.yaml").write_text(text, encoding="utf-8")
        assert isinstance(load_or_refuse(folder), CatalogError)
        (folder / "topic.yaml").write_bytes(raw)
        assert isinstance(load_or_refuse(folder), CatalogError)


@pytest.mark.parametrize("key", ["freshness_minutes", "start_hour", "pii_fields", "topic"])
def test_given_a_yaml_bomb_when_loaded_then_it_is_refused_quickly_naming_the_file(tmp_path, key):
    """Nine levels of nine aliases: 387 million strings if anything expanded them (an error message, say)."""
    folder = sample_copy(tmp_path)
    levels = ['&a0 ["lol"]'] + [f"&a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 10)]
    bomb = f"{key}: [{', '.join(levels)}]\n"
    text = "".join(line for line in (folder / "topic.yaml").read_text().splitlines(True) if not line.startswith(f"{key}:"))
    (folder / "topic.yaml").write_text(text + bomb)

    with pytest.raises(CatalogError, match=key) as refused:
        load_topic(folder / "topic.yaml")
    assert str(folder) in str(refused.value) and len(str(refused.value)) < 2000


AVRO_NAMES = st.sampled_from(["x", "X", "_x", "1x", "x y", "x;DROP TABLE t", "x`y", "x'y", 'x"y', "x.y", "../x", "",
                              "\u0445", "x\u200b", "date", "_kafka_offset", "PageView", "Client", "com.example.shop.Client"])
AVRO_TYPES = st.recursive(
    st.one_of(
        st.sampled_from(["null", "boolean", "int", "long", "float", "double", "bytes", "string", "PageView", "Client",
                         "Nowhere", "record", "array", "decimal"]),
        st.builds(lambda size: {"type": "fixed", "name": "F", "size": size}, st.one_of(st.integers(-2, 3), st.text(max_size=2))),
        st.builds(lambda p, s: {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s},
                  st.integers(-1, 100), st.integers(-1, 100)),
        st.just({"type": "long", "logicalType": "timestamp-millis"}),
        SCALARS,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.builds(lambda items: {"type": "array", "items": items}, children),
        st.builds(lambda values: {"type": "map", "values": values}, children),
        st.builds(lambda name, fields: {"type": "record", "name": name, "fields": fields},
                  AVRO_NAMES, st.lists(st.builds(lambda n, t: {"name": n, "type": t}, AVRO_NAMES, children), max_size=3)),
        st.dictionaries(st.sampled_from(["type", "name", "fields", "items", "values", "symbols", "size"]), children, max_size=3),
    ),
    max_leaves=12,
)


def schema_nodes(schema) -> list[tuple]:
    """Paths to every type and name in a schema: what a careless edit of an .avsc changes."""
    return [path for path in key_paths(schema) if path and path[-1] in ("type", "name", "items", "values", "fields")]


@FUZZ
@given(path=st.sampled_from(schema_nodes(SAMPLE_SCHEMA)), value=st.one_of(AVRO_TYPES, AVRO_NAMES), delete=st.booleans())
def test_given_an_avsc_with_one_node_replaced_by_anything_when_loaded_then_it_lands_or_names_the_file(path, value, delete):
    with tempfile.TemporaryDirectory() as root:
        folder = sample_copy(Path(root))
        text = json.dumps(replaced(SAMPLE_SCHEMA, path, value, delete), default=str)
        (folder / "v1.avsc").write_text(text)

        loaded = load_or_refuse(folder)

        if not isinstance(loaded, CatalogError):
            assert_lands(loaded)
            assert loaded.version(1).schema == json.loads(text)


def assert_lands(topic: TableSpec) -> None:
    """What the catalog accepts, landing can use: the table's columns, and both decode paths of every version
    (compiled as a landing task compiles them); a refusal here would fail every run of the topic instead."""
    from kafka_lake.decoding.batch_decoder import BatchDecoder
    from kafka_lake.kafka.schema_resolution import CatalogSchemas
    from kafka_lake.tables.table_schema import table_columns

    table_columns(topic)
    decoder = BatchDecoder(topic, CatalogSchemas(topic), b"fuzz-key")
    for version in topic.schema_versions:
        decoder._version_decoding(version)


@FUZZ
@given(text=st.one_of(st.text(max_size=200), st.just("[" * 5000 + "]" * 5000), st.just('{"type": "record", "x": 1' + "0" * 5000 + "}"),
                      st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3)).map(
                          lambda v: json.dumps(v, default=str))),
       raw=st.binary(max_size=64))
def test_given_an_avsc_of_garbage_when_loaded_then_it_names_the_file(text, raw):
    with tempfile.TemporaryDirectory() as root:
        folder = sample_copy(Path(root))
        (folder / "v2.avsc").write_text(text, encoding="utf-8")
        assert isinstance(load_or_refuse(folder), CatalogError)
        (folder / "v2.avsc").write_bytes(raw)
        assert isinstance(load_or_refuse(folder), CatalogError)


def nested_schema(levels: int) -> str:
    """A record whose field `x` holds a record whose field `x` holds … `levels` records in all, as JSON text
    (built as text: json.dumps itself recurses once per level)."""
    opening = "".join(f'{{"type": "record", "name": "Level{level}", "fields": [{{"name": "x", "type": ' for level in range(1, levels))
    closing = "}]}" * (levels - 1)
    return ('{"type": "record", "name": "Level0", "fields": [{"name": "occurred_at", '
            '"type": {"type": "long", "logicalType": "timestamp-millis"}}, {"name": "x", "type": '
            + opening + '"int"' + closing + "}]}")


@pytest.mark.parametrize("levels", [MAX_SCHEMA_DEPTH + 1, 400, 5000])
def test_given_a_schema_nested_deeper_than_the_limit_when_loaded_then_it_is_refused_naming_the_limit(tmp_path, levels):
    folder = sample_copy(tmp_path)
    (folder / "v2.avsc").write_text(nested_schema(levels))

    with pytest.raises(CatalogError) as refused:
        load_topic(folder / "topic.yaml")

    assert str(folder / "v2.avsc") in str(refused.value)
    assert f"nested more than {MAX_SCHEMA_DEPTH} levels" in str(refused.value) or "nested too deeply" in str(refused.value)


def test_given_a_schema_at_the_nesting_limit_when_loaded_then_it_lands_as_a_table(tmp_path):
    from kafka_lake.tables.table_schema import table_columns

    folder = sample_copy(tmp_path)
    (folder / "v1.avsc").write_text(nested_schema(MAX_SCHEMA_DEPTH))
    (folder / "v2.avsc").unlink()
    document = {**SAMPLE_DOCUMENT, "schema_versions": SAMPLE_DOCUMENT["schema_versions"][:1],
                "pii_fields": None, "subject_field": None}
    (folder / "topic.yaml").write_text(yaml.safe_dump(document))

    topic = load_topic(folder / "topic.yaml")

    assert [c.name for c in table_columns(topic)][:2] == ["occurred_at", "x"]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "record", "name": "Node", "fields": [{"name": "next", "type": "Node"}]},
         "record 'Node' contains itself at field 'next' with no way to end"),
        ({"type": "record", "name": "A", "namespace": "n", "fields": [
            {"name": "b", "type": {"type": "record", "name": "B", "fields": [{"name": "a", "type": ["n.A"]}]}}]},
         "record 'n.A' contains itself at field 'b.a' with no way to end"),
        ({"type": "record", "name": "R", "fields": [{"name": "xs", "type": {"type": "array", "items": "null"}}]},
         "array of items that take no bytes"),
        ({"type": "record", "name": "R", "fields": [{"name": "xs", "type": {"type": "array", "items": {
            "type": "record", "name": "Nothing", "fields": []}}}]}, "array of items that take no bytes"),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": []}]}, "empty union"),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": ["int", "int"]}]}, "repeats a member"),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": {"type": "fixed", "name": "F", "size": -1}}]},
         "fixed 'F' has size -1"),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": ["null", {
            "type": "bytes", "logicalType": "decimal", "precision": 0}]}]}, "decimal of precision 0"),
    ],
    ids=["plain self reference", "cycle through a nested record and a one-member union", "array of nulls",
         "array of empty records", "empty union", "repeated union member", "negative fixed size", "decimal of no digits"],
)
def test_given_a_schema_with_an_impossible_shape_when_loaded_then_it_is_refused_naming_the_file(tmp_path, schema, message):
    folder = sample_copy(tmp_path)
    (folder / "v2.avsc").write_text(json.dumps(schema))

    with pytest.raises(CatalogError, match=message) as refused:
        load_topic(folder / "topic.yaml")

    assert str(folder / "v2.avsc") in str(refused.value)


# --- the decoder ----------------------------------------------------------------------------------------

CAUSES = {"bad_magic_byte", "unknown_schema_id", "unknown_message_index", "undecodable_payload", "missing_event_time", "unparseable_event_time"}
HUGE = [2**31 - 1, 2**31, 2**62, 2**63 - 1, -1, -(2**63)]
MUTATIONS = st.one_of(
    st.tuples(st.just("intact")),
    st.tuples(st.just("tombstone")),
    st.tuples(st.just("flip"), st.integers(0, 10**4), st.integers(0, 7)),  # one bit anywhere, header included
    st.tuples(st.just("truncate"), st.integers(0, 10**4)),
    # A length or block count claiming up to 2^63 bytes or items, written over or between a field's bytes.
    st.tuples(st.just("huge_length"), st.integers(0, 10**4), st.sampled_from(HUGE), st.booleans()),
    st.tuples(st.just("overlong_varint"), st.integers(0, 10**4), st.integers(11, 40)),
    st.tuples(st.just("magic"), st.integers(1, 255)),
    st.tuples(st.just("schema_id"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("random"), st.binary(max_size=80)),
)


def zigzag(value: int) -> bytes:
    unsigned, out = (value << 1) ^ (value >> 63), bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    return bytes(out + bytes([unsigned]))


def in_payload(good: bytes, position: int) -> int:
    """A position after the 5-byte Confluent header."""
    return 5 + position % max(len(good) - 5, 1)


def mutated(good: bytes, mutation: tuple) -> bytes | None:
    kind, *args = mutation
    if kind == "intact":
        return good
    if kind == "tombstone":
        return None
    if kind == "flip":
        at = args[0] % len(good)
        return good[:at] + bytes([good[at] ^ (1 << args[1])]) + good[at + 1:]
    if kind == "truncate":
        return good[: args[0] % len(good)]
    if kind == "huge_length":
        at, claim, overwrite = in_payload(good, args[0]), zigzag(args[1]), args[2]
        return good[:at] + claim + good[at + (len(claim) if overwrite else 0):]
    if kind == "overlong_varint":
        at = in_payload(good, args[0])
        return good[:at] + b"\xff" * args[1] + b"\x01" + good[at:]
    if kind == "magic":
        return bytes([args[0]]) + good[1:]
    if kind == "schema_id":
        return b"\x00" + args[0].to_bytes(4, "big") + good[5:]
    return args[0]


@pytest.fixture(scope="module")
def hostile_topics(tmp_path_factory):
    """The sample page views (two versions, PII, columnar), the decoding tests' zoo of every Avro type, and a
    recursive record (its recurring fields land as JSON text, decoded by fastavro's Python reader)."""
    from tests.test_decoding import PERSON, ZOO_SCHEMA, framed, page_view, person, write_topic, zoo_value

    views = load_catalog(REPO / "schema_catalog").by_name("shop", "page_views")
    zoo = write_topic(tmp_path_factory.mktemp("zoo"), [ZOO_SCHEMA], pii_fields=["name", "address.street"])
    people = write_topic(tmp_path_factory.mktemp("people"), [PERSON], time_partitioning={"source": "kafka_time"})
    goods = {
        "page_views": [framed(views, page_view(1), 1), framed(views, page_view(2, url="é" * 300), 2),
                       framed(views, page_view(2, user_id=None, experiments={"a": "b" * 40, "c": ""}), 2)],
        "zoo": [framed(zoo, zoo_value()), framed(zoo, zoo_value(tags=["x"] * 30, scores={}, choice=7))],
        "person": [framed(people, person("Ada", friends=[person("Bob", pet={"species": "cat"})], spouse=person("Cy")))],
    }
    return {"page_views": views, "zoo": zoo, "person": people}, goods


# A dead letter's error is a cause a person reads: never a bare Python exception, never empty after the cause.
_BARE_EXCEPTION = re.compile(r"\b\w*(Error|Exception)\b|:\s*$")


def assert_reads_as_a_cause(error: str) -> None:
    cause, _, detail = error.partition(": ")
    assert cause in CAUSES and detail.strip(), error
    assert not _BARE_EXCEPTION.search(error), f"a bare exception in a dead letter's error: {error}"


@settings(FUZZ, max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 400)))
@given(which=st.sampled_from(["page_views", "zoo", "person"]),
       picks=st.lists(st.tuples(st.integers(0, 2), MUTATIONS), min_size=1, max_size=12))
def test_given_corrupted_confluent_values_when_decoded_then_each_record_is_a_row_a_dead_letter_or_a_tombstone(
    hostile_topics, which, picks
):
    topics, goods = hostile_topics
    values = [mutated(goods[which][pick % len(goods[which])], mutation) for pick, mutation in picks]
    assert_each_is_a_row_a_dead_letter_or_a_tombstone(topics[which], values)


def assert_each_is_a_row_a_dead_letter_or_a_tombstone(topic: TableSpec, values: list[bytes | None]) -> None:
    """Decoded as columns and record by record, every value is exactly one row, dead letter (its bytes kept, a cause
    a person reads) or tombstone, sorted alike by both paths."""
    from kafka_lake.decoding.batch_decoder import BatchDecoder
    from kafka_lake.kafka.records import KafkaRecord
    from kafka_lake.kafka.schema_resolution import CatalogSchemas

    records = [KafkaRecord(0, offset, 1_793_000_000_000, b"k", value) for offset, value in enumerate(values)]
    outcomes = []
    for columnar in (True, False):
        batch = BatchDecoder(topic, CatalogSchemas(topic), b"fuzz-key", columnar=columnar).decode(records)

        row_offsets = sorted(o for t in batch.rows.values() for o in t.column("_kafka_offset").to_pylist())
        dead = [letter for t in batch.dead_letters.values() for letter in t.to_pylist()]
        assert batch.records == len(values)
        assert len(row_offsets) + len(dead) + batch.tombstones == len(values)
        assert sorted(row_offsets + [d["_kafka_offset"] for d in dead]) == [o for o, v in enumerate(values) if v is not None]
        assert batch.tombstones == values.count(None)
        for letter in dead:
            assert letter["value"] == values[letter["_kafka_offset"]], "a dead letter keeps the raw bytes for replay"
            assert_reads_as_a_cause(letter["error"])
        assert sum(batch.dead_letter_causes.values()) == len(dead) and set(batch.dead_letter_causes) <= CAUSES
        outcomes.append((row_offsets, sorted((d["_kafka_offset"], d["error"].split(":", 1)[0]) for d in dead)))
    assert outcomes[0] == outcomes[1], "the columnar and the record path must sort the records alike"


LENIENT_TOKENS = [b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"Inf", b"01", b"-0.5e", b"+1", b".5", b"1.", b"0x1F",
                  b"'text'", b"True", b"None", b"undefined", b"1 /* c */", b"1 // c", b"[1,]", b'{"a": 1,}', b'"\\x41"',
                  b'"\\q"', b'"tab\there"']
JSON_MUTATIONS = st.one_of(
    st.tuples(st.just("intact")),
    st.tuples(st.just("tombstone")),
    st.tuples(st.just("flip"), st.integers(0, 10**4), st.integers(0, 7)),  # one bit anywhere: quotes, braces, digits
    st.tuples(st.just("truncate"), st.integers(0, 10**4)),
    # A token spliced in anywhere: structure, numbers past every range, escapes, nesting, line breaks, raw bytes.
    st.tuples(st.just("splice"), st.integers(0, 10**4), st.sampled_from([
        b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\\u", b"\\ud800", b"null", b"true", b"1e999", b"-",
        b"99999999999999999999999", b"NaN", b"\n", b"\r\n", b"\x00", b"\xff", b"\xef\xbb\xbf", b"[" * 150,
        b'{"a":' * 120, b'"type":"x",', b"\xf0\x9f\x98", b"\t"])),
    # A value replaced by what a lenient parser reads and JSON has not: both paths must refuse it alike.
    st.tuples(st.just("value"), st.integers(0, 60), st.sampled_from(LENIENT_TOKENS)),
    st.tuples(st.just("frame"), st.integers(0, 2**32 - 1)),  # a Confluent header, of a known or unknown schema id
    st.tuples(st.just("random"), st.binary(max_size=80)),
    st.tuples(st.just("text"), st.text(max_size=60)),
)


def json_mutated(good: bytes, mutation: tuple) -> bytes | None:
    kind, *args = mutation
    if kind == "splice":
        at = args[0] % (len(good) + 1)
        return good[:at] + args[1] + good[at:]
    if kind == "value":  # the value after the n-th colon, up to the next comma or closing bracket
        colons = [at for at, byte in enumerate(good) if byte == ord(":")]
        if not colons:
            return good
        start = colons[args[0] % len(colons)] + 1
        end = min((at for at in (good.find(b",", start), good.find(b"}", start), good.find(b"]", start)) if at >= 0),
                  default=len(good))
        return good[:start] + b" " + args[1] + good[end:]
    if kind == "frame":
        return b"\x00" + (901 if args[0] % 2 else args[0]).to_bytes(4, "big") + good
    if kind == "text":
        return args[0].encode("utf-8", "surrogatepass")
    return mutated(good, mutation)


@pytest.fixture(scope="module")
def hostile_json(tmp_path_factory):
    """The JSON events of the JSON decoding tests (every type read as columns, PII), and a topic of every Avro type
    the record path reads (maps, general unions, bytes, fixed)."""
    from tests.test_decoding import ZOO_SCHEMA
    from tests.test_json_decoding import EVENT, PII, event, json_topic

    events = json_topic(tmp_path_factory.mktemp("events"), [EVENT], pii=PII)
    zoo = json_topic(tmp_path_factory.mktemp("zoo"), [ZOO_SCHEMA], {"source": "event_time", "field": "occurred_at"},
                     pii=["name", "address.street"])
    zoo_value = {"occurred_at": 1_793_000_000_000, "flag": False, "small": 1, "big": -1, "ratio": 0.5, "precise": 1e-300,
                 "name": "Zoë", "raw": "AP8=", "color": "RED", "checksum": "YWJjZA==", "price": "12.34",
                 "huge": "-1234567890123456789012345678901234567890.12345", "day": 1, "lunch": 2, "lap": 3, "at_micros": 4,
                 "wall_ms": 5, "wall_us": 6, "id": "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
                 "address": {"street": "Elm", "zip": None}, "previous_address": None, "favorite": "GREEN",
                 "tags": ["a"], "scores": {"x": 1}}
    goods = {"events": [json.dumps(event()).encode(), json.dumps(event(items=[], address=None)).encode()],
             "zoo": [json.dumps(zoo_value).encode(), json.dumps({**zoo_value, "scores": {}, "tags": []}).encode()]}
    return {"events": events, "zoo": zoo}, goods


@settings(FUZZ, max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 400)))
@given(which=st.sampled_from(["events", "zoo"]), picks=st.lists(st.tuples(st.integers(0, 1), JSON_MUTATIONS), min_size=1,
                                                               max_size=12))
def test_given_corrupted_json_values_when_decoded_then_each_record_is_a_row_a_dead_letter_or_a_tombstone(
    hostile_json, which, picks
):
    from kafka_lake.decoding.batch_decoder import BatchDecoder
    from kafka_lake.kafka.records import KafkaRecord
    from kafka_lake.kafka.schema_resolution import CatalogSchemas
    from tests.test_columnar import assert_same

    topics, goods = hostile_json
    topic = topics[which]
    values = [json_mutated(goods[which][pick], mutation) for pick, mutation in picks]
    records = [KafkaRecord(0, offset, 1_793_000_000_000, b"k", value) for offset, value in enumerate(values)]

    batches = []
    for columnar in (True, False):
        batch = BatchDecoder(topic, CatalogSchemas(topic), b"fuzz-key", columnar=columnar).decode(records)
        row_offsets = sorted(o for t in batch.rows.values() for o in t.column("_kafka_offset").to_pylist())
        dead = [letter for t in batch.dead_letters.values() for letter in t.to_pylist()]
        assert sorted(row_offsets + [d["_kafka_offset"] for d in dead]) == [o for o, v in enumerate(values) if v is not None]
        assert batch.tombstones == values.count(None) and batch.records == len(values)
        for letter in dead:
            assert letter["value"] == values[letter["_kafka_offset"]], "a dead letter keeps the raw bytes for replay"
            assert_reads_as_a_cause(letter["error"])
        batches.append(batch)
    assert_same(*batches)  # the columnar path lands and refuses exactly what the record path does, value for value


# --- Kafka Connect and Debezium types with extreme parameters and values ----------------------------------------

INT32_EDGES = [-(2**31), -(2**31) + 1, -719_163, -719_162, -1, 0, 1, 86_399_999, 86_400_000, 2_932_896, 2_932_897,
               2**31 - 1]
INT64_EDGES = [-(2**63), -(2**63) + 1, -(2**62), -62_135_596_800_000_001, -1, 0, 1, 86_399_999_999,
               253_402_300_799_999_999, 253_402_300_800_000_000, 2**62, 2**63 - 2, 2**63 - 1]
PARAMETER_TEXTS = ["0", "1", "2", "38", "39", "64", "4300", "4301", "2147483647", "2147483648", "-1", "-2147483648",
                   "", "abc", "1e3", " 2", "\u0663", "99999999999999999999"]
DECIMAL_BYTES = st.sampled_from([0, 1, 16, 17, 32, 1786, 1787, 5000, 100_000]).flatmap(
    lambda size: st.sampled_from([b"\x00", b"\xff", b"\x7f", b"\x80"]).map(lambda byte: byte * size))


def connect_field(kind: str, name: str, **extra) -> dict:
    return {"type": kind, "connect.version": 1, "connect.name": name, **extra}


# (Avro type node, values to write): every Connect and Debezium logical type, its parameters from the extremes.
CONNECT_TYPES = st.one_of(
    st.tuples(st.sampled_from(["io.debezium.time.Date", "org.apache.kafka.connect.data.Date", "io.debezium.time.Time",
                               "org.apache.kafka.connect.data.Time"]).map(lambda name: connect_field("int", name)),
              st.lists(st.sampled_from(INT32_EDGES), min_size=1, max_size=6)),
    st.tuples(st.sampled_from(["io.debezium.time.MicroTime", "io.debezium.time.NanoTime", "io.debezium.time.Timestamp",
                               "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp",
                               "org.apache.kafka.connect.data.Timestamp"]).map(lambda name: connect_field("long", name)),
              st.lists(st.sampled_from(INT64_EDGES), min_size=1, max_size=6)),
    st.tuples(st.just(connect_field("string", "io.debezium.time.ZonedTimestamp")),
              st.lists(st.sampled_from(["infinity", "-infinity", "+infinity", "Infinity", "", "0001-01-01T00:00:00Z",
                                        "9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59-00:01",
                                        "2026-11-01T13:05:00+99:99", "x" * 100_000]), min_size=1, max_size=6)),
    st.tuples(st.builds(lambda scale, precision: connect_field(
        "bytes", "org.apache.kafka.connect.data.Decimal",
        **{"connect.parameters": {"scale": scale, **({} if precision is None else {"connect.decimal.precision": precision})}}),
        st.sampled_from(PARAMETER_TEXTS), st.one_of(st.none(), st.sampled_from(PARAMETER_TEXTS))),
        st.lists(DECIMAL_BYTES, min_size=1, max_size=4)),
    st.tuples(st.builds(lambda precision, scale: {"type": "bytes", "logicalType": "decimal", "precision": precision,
                                                  "scale": scale},
                        st.sampled_from([1, 38, 39, 4300, 4301, 2**31 - 1]), st.sampled_from([0, 1, 38, 4300, 2**31 - 1])),
              st.lists(DECIMAL_BYTES, min_size=1, max_size=4)),
    st.tuples(st.just({"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
                       "connect.name": "io.debezium.data.VariableScaleDecimal",
                       "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}),
              st.lists(st.builds(lambda scale, value: {"scale": scale, "value": value},
                                 st.sampled_from([*INT32_EDGES, 16_383, 4299, 4300, 4301]), DECIMAL_BYTES),
                       min_size=1, max_size=4)),
)


def as_json_value(value):
    """A value of an Avro field as a JSON producer writes it: bytes as base64."""
    import base64

    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {key: as_json_value(item) for key, item in value.items()}
    return value


@settings(FUZZ, max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 150)))
@given(field_and_values=CONNECT_TYPES, payload_format=st.sampled_from(["avro", "json"]))
def test_every_connect_and_debezium_type_with_extreme_parameters_loads_or_is_refused_and_decodes_in_bounded_memory(
        field_and_values, payload_format):
    """Scales, precisions and lengths from the int limits, dates and times at them: the catalog loads the schema or
    refuses it naming the file, and each value is a row or a dead letter naming its field, alike on both paths, with
    the Python memory of decoding bounded (a scale of 2^31 once built a 2 GB text)."""
    import tracemalloc

    import fastavro

    from kafka_lake.decoding.batch_decoder import BatchDecoder
    from kafka_lake.kafka.framing import encode_confluent
    from kafka_lake.kafka.records import KafkaRecord
    from kafka_lake.kafka.schema_resolution import CatalogSchemas

    field, values = field_and_values
    schema = {"type": "record", "name": "Change", "fields": [{"name": "id", "type": "int"}, {"name": "x", "type": field}]}
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "db" / "changes"
        folder.mkdir(parents=True)
        (folder / "v1.avsc").write_text(json.dumps(schema))
        (folder / "topic.yaml").write_text(json.dumps({
            "topic": "db.changes", "owner": "team-test", "start_hour": "2026-11-01T00:00Z", "format": payload_format,
            "time_partitioning": {"source": "kafka_time"},
            "schema_versions": [{"version": 1, "file": "v1.avsc", "registry_id": 77}]}))
        topic = load_or_refuse(folder)
    event(f"{'refused' if isinstance(topic, CatalogError) else 'loaded'} {field.get('connect.name', 'decimal')}")
    if isinstance(topic, CatalogError):
        return
    plain = fastavro.parse_schema({**schema, "fields": [schema["fields"][0], {"name": "x", "type": json.loads(
        json.dumps(field).replace('"logicalType"', '"ignoredType"'))}]})  # the bytes as they are, whatever they mean
    if payload_format == "avro":
        payloads = [encode_confluent(77, plain, {"id": n, "x": value}) for n, value in enumerate(values)]
    else:
        payloads = [json.dumps({"id": n, "x": as_json_value(value)}).encode() for n, value in enumerate(values)]
    records = [KafkaRecord(0, offset, 1_793_000_000_000, None, payload) for offset, payload in enumerate(payloads)]

    batches = []
    for columnar in (True, False):
        tracemalloc.start()
        try:
            batch = BatchDecoder(topic, CatalogSchemas(topic), None, columnar=columnar).decode(records)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 * 2**20, f"decoding {len(values)} values took {peak / 2**20:.0f} MiB of Python memory"
        rows = sorted(o for t in batch.rows.values() for o in t.column("_kafka_offset").to_pylist())
        dead = [letter for t in batch.dead_letters.values() for letter in t.to_pylist()]
        assert sorted(rows + [d["_kafka_offset"] for d in dead]) == list(range(len(values)))
        for letter in dead:
            assert_reads_as_a_cause(letter["error"])
            assert len(letter["error"]) < 2000, "a cause is a sentence, not the value"
            if "does not fit its table columns" in letter["error"]:
                assert "table columns: x" in letter["error"], f"the cause names the field: {letter['error']}"
        batches.append(batch)
    assert_same(*batches)


# --- names that become paths and SQL identifiers -----------------------------------------------------------

UNSAFE_FOLDER_NAMES = ["..", "a b", " a", "a\tb", "a`b", "a'b", 'a"b', "a;b", "a--b", "Shop", "sh\u043ep", "\uff53hop",
                       "a\u200bb", "1abc", "a" * 129, "shop\n"]


@pytest.mark.parametrize("name", UNSAFE_FOLDER_NAMES)
@pytest.mark.parametrize("level", ["database", "table"])
def test_given_an_unsafe_database_or_table_folder_when_loaded_then_it_is_refused_naming_it(tmp_path, name, level):
    folder = sample_copy(tmp_path)
    if name == "..":  # a path that climbs out: shop/page_views/../topic.yaml, or shop/page_views/../page_views/…
        path = folder / ".." / "topic.yaml" if level == "table" else folder / ".." / "page_views" / "topic.yaml"
        if level == "table":
            shutil.copy(folder / "topic.yaml", path)
    else:
        target = tmp_path / "catalog" / (name if level == "database" else "shop") / (name if level == "table" else "page_views")
        shutil.copytree(folder, target)
        path = target / "topic.yaml"

    with pytest.raises(CatalogError) as refused:
        load_topic(path)

    assert f"{level} folder" in str(refused.value) and "must be lowercase letters, digits and underscores" in str(refused.value)


@pytest.mark.parametrize("topic_name", ["../etc", "a/b", "/abs", "a`b", "a'b", "a;b", "a b", "\uff41", "", ".", "..",
                                        ".hidden", "x" * 250, "shop.page_views\n"])
def test_given_an_unsafe_kafka_topic_name_when_loaded_then_it_is_refused_naming_the_file(tmp_path, topic_name):
    folder = sample_copy(tmp_path)
    (folder / "topic.yaml").write_text(yaml.safe_dump({**SAMPLE_DOCUMENT, "topic": topic_name}))

    with pytest.raises(CatalogError, match="topic") as refused:
        load_topic(folder / "topic.yaml")

    assert str(folder / "topic.yaml") in str(refused.value)


UNFIT_FIELD_NAMES = ["a b", "a`b", "a'b", 'a"b', "a;DROP TABLE t", "a)b", "a>b", "a:b", "a,b", "../a", "a/b", "", "1a",
                     "\uff41", "a\u200b", "a\n"]
RESERVED_FIELD_NAMES = ["_kafka_offset", "date", "Hour", "schema_version"]  # only at the top level, beside the lake's


@pytest.mark.parametrize(
    ("field_name", "nested"),
    [(name, nested) for name in UNFIT_FIELD_NAMES for nested in (False, True)] + [(name, False) for name in RESERVED_FIELD_NAMES],
)
def test_given_a_field_name_unfit_for_ddl_when_loaded_then_the_schema_file_is_named(tmp_path, field_name, nested):
    folder = sample_copy(tmp_path)
    schema = json.loads((folder / "v2.avsc").read_text())
    unfit = {"name": field_name, "type": ["null", "string"], "default": None}
    if nested:
        client = next(f for f in schema["fields"] if f["name"] == "client")
        client["type"]["fields"].append(unfit)
    else:
        schema["fields"].append(unfit)
    (folder / "v2.avsc").write_text(json.dumps(schema))

    with pytest.raises(CatalogError) as refused:
        load_topic(folder / "topic.yaml")

    assert str(folder / "v2.avsc") in str(refused.value)
    assert "field" in str(refused.value)


def test_given_two_fields_differing_only_in_case_when_loaded_then_it_is_refused(tmp_path):
    folder = sample_copy(tmp_path)
    schema = json.loads((folder / "v2.avsc").read_text())
    schema["fields"].append({"name": "URL", "type": ["null", "string"], "default": None})
    (folder / "v2.avsc").write_text(json.dumps(schema))

    with pytest.raises(CatalogError, match="'url' and 'URL', which differ only in case"):
        load_topic(folder / "topic.yaml")


@pytest.mark.parametrize("key", ["pii_fields", "subject_field", "time_partitioning"])
@pytest.mark.parametrize("path", ["../user_id", "user_id;DROP", "client/ip_address", "client..ip_address", "`user_id`",
                                  "user_id ", "/user_id", "user\u0456d", "client.ip_address.x"])
def test_given_an_unsafe_field_path_when_loaded_then_it_is_no_field_and_is_refused(tmp_path, key, path):
    folder = sample_copy(tmp_path)
    value = {"pii_fields": [path], "subject_field": path, "time_partitioning": {"source": "event_time", "field": path}}[key]
    (folder / "topic.yaml").write_text(yaml.safe_dump({**SAMPLE_DOCUMENT, key: value}))

    with pytest.raises(CatalogError, match="is not a field") as refused:
        load_topic(folder / "topic.yaml")

    assert str(folder / "topic.yaml") in str(refused.value)


@pytest.mark.parametrize("file_name", ["../v1.avsc", "../../payments/transactions/v1.avsc", "/etc/passwd", "v1.avsc\x00",
                                       "sub/v1.avsc", ".", "x" * 5000])
def test_given_a_schema_file_outside_the_topic_folder_when_loaded_then_it_is_refused(tmp_path, file_name):
    folder = sample_copy(tmp_path)
    document = json.loads(json.dumps(SAMPLE_DOCUMENT))
    document["schema_versions"][1]["file"] = file_name
    (folder / "topic.yaml").write_text(yaml.safe_dump(document))

    with pytest.raises(CatalogError, match="must sit beside topic.yaml|does not exist") as refused:
        load_topic(folder / "topic.yaml")

    assert str(folder / "topic.yaml") in str(refused.value) or str(folder) in str(refused.value)


@pytest.mark.parametrize("identifier", ["a b", "a`b", "a;DROP TABLE t", "a'b", "a.b", "", "\uff41", "a\nb", "a\n"])
def test_given_a_name_no_identifier_when_quoted_for_hive_ddl_then_it_is_refused(identifier):
    pytest.importorskip("pyspark")  # the Hive back end lives in the Spark shell
    from kafka_lake.tables.catalogs.hive_metastore import quote

    with pytest.raises(ValueError, match="not a plain identifier"):
        quote(identifier)
    assert quote("page_views") == "`page_views`"


@pytest.mark.spark
@pytest.mark.parametrize("text", ["it's", "a\\'; DROP TABLE x; --", "back\\slash", "s3a://lake/a b/é", "\\\\'", "'", "\\"])
def test_given_a_hostile_string_literal_when_spark_sql_reads_it_then_it_is_exactly_that_text(spark, text):
    from kafka_lake.tables.catalogs.hive_metastore import sql_string

    assert spark.sql(f"SELECT {sql_string(text)} AS value").collect()[0]["value"] == text


# --- huge records ------------------------------------------------------------------------------------------

MIB = 1024 * 1024


def produce_values(bootstrap_servers: str, topic: str, values: list[bytes | None]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "message.max.bytes": 64 * MIB, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value, partition=0, timestamp=1_793_000_000_000)
        producer.flush(60)


def test_given_big_values_when_a_slice_is_read_then_batches_are_cut_by_bytes_the_same_way_every_time(broker):
    from kafka_lake.kafka.log import KafkaLog, consumer_config

    topic = f"hostile.bytes.{os.urandom(4).hex()}"
    broker.create_topic(topic, 1)
    produce_values(broker.bootstrap_servers, topic, [bytes([n]) * 1000 for n in range(10)] + [None])

    with KafkaLog(consumer_config(broker.bootstrap_servers), topic) as kafka_log:
        by_bytes = [len(b) for b in kafka_log.read_slice_batches(0, 0, 11, batch_size=4, max_batch_bytes=2500)]
        by_count = [len(b) for b in kafka_log.read_slice_batches(0, 0, 11, batch_size=4)]
        offsets = [o for b in kafka_log.read_slice_batches(0, 0, 11, batch_size=4, max_batch_bytes=2500) for o in b.offsets]

    assert by_bytes == [3, 3, 3, 2]  # 3,000 bytes reach the 2,500-byte cap; the tombstone weighs nothing
    assert by_count == [4, 4, 3]
    assert offsets == list(range(11))


LAND_AND_MEASURE = """
import pickle, resource, sys, json
from kafka_lake.landing.slice_task import land_slice
task = pickle.loads(sys.stdin.buffer.read())
before = int(open("/proc/self/statm").read().split()[1]) * 4096
report = land_slice(task)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rows": report.counts.rows, "dead_letters": report.counts.dead_letters, "growth": peak - before,
                  "causes": report.dead_letter_causes}))
"""


def test_given_records_of_ten_mib_when_a_slice_lands_then_they_land_or_dead_letter_in_bounded_memory(broker, tmp_path):
    """Nine 10 MiB page views (one of them truncated) in one slice, landed by the Spark task body in a fresh
    process whose peak memory is measured: 540 MiB of growth here, 910 MiB without the batch byte cap."""
    import pickle
    import subprocess
    import sys
    from datetime import datetime, timezone

    import pyarrow.parquet as pq

    from kafka_lake.hours import KafkaHour
    from kafka_lake.kafka.log import consumer_config
    from kafka_lake.lake import layout
    from kafka_lake.lake.storage import LakeStorage
    from kafka_lake.landing.landing_settings import LandingSettings
    from kafka_lake.landing.slice_task import SliceTask
    from kafka_lake.landing.slices import OffsetSlice
    from tests.test_decoding import framed, page_view

    views = load_catalog(REPO / "schema_catalog").by_name("shop", "page_views")
    topic = f"hostile.huge.{os.urandom(4).hex()}"
    views = views.model_copy(update=dict(topic=topic))
    broker.create_topic(topic, 1)
    urls = [f"https://shop.example/{n}?" + "q" * (10 * MIB) for n in range(8)]
    values = [framed(views, page_view(2, url=url), 2) for url in urls]
    truncated = values[3][: 10 * MIB]
    produce_values(broker.bootstrap_servers, topic, values[:4] + [truncated] + values[4:])
    lake = tmp_path / "lake"
    task = SliceTask(views, KafkaHour(datetime(2026, 11, 1, 13, tzinfo=timezone.utc)), OffsetSlice(0, 0, 9),
                     LandingSettings(str(lake), consumer_config(broker.bootstrap_servers), pii_key=b"huge-test-key"))

    landed = subprocess.run([sys.executable, "-c", LAND_AND_MEASURE], input=pickle.dumps(task), capture_output=True,
                            cwd=REPO, timeout=300, check=True)

    report = json.loads(landed.stdout.decode().strip().splitlines()[-1])
    assert (report["rows"], report["dead_letters"], report["causes"]) == (8, 1, {"undecodable_payload": 1})
    assert report["growth"] < 750 * MIB, f"landing 90 MiB of records grew the task by {report['growth'] / MIB:.0f} MiB"
    storage = LakeStorage(str(lake))
    rows = [r for f in storage.list_files(layout.table_prefix("shop", "page_views"))
            for r in pq.read_table(storage.full_path(f.path), columns=["url", "_kafka_offset"]).to_pylist()]
    assert sorted((r["_kafka_offset"], r["url"]) for r in rows) == list(zip([0, 1, 2, 3, 5, 6, 7, 8], urls))
    [dead] = [r for f in storage.list_files(layout.dead_letter_prefix("shop", "page_views"))
              for r in pq.read_table(storage.full_path(f.path)).to_pylist()]
    assert (dead["_kafka_offset"], dead["value"]) == (4, truncated)


# --- Protobuf values -------------------------------------------------------------------------------------------------

PROTOBUF_MUTATIONS = st.one_of(
    MUTATIONS,
    # Message indexes of any count and value: past the file's messages, negative, more than any nesting.
    st.tuples(st.just("indexes"), st.lists(st.integers(-(2**40), 2**40), max_size=40)),
    # Unknown fields of every wire type appended, which the parser skips; a field of a known number with another wire
    # type; a group that never ends.
    st.tuples(st.just("append"), st.sampled_from([
        b"\xf8\x3f\x05", b"\xfa\x3f\x03abc", b"\xfd\x3f\x01\x02\x03\x04", b"\xf9\x3f" + b"\x01" * 8,
        b"\x08\x96\x01", b"\x0d\x01\x02\x03\x04", b"\xfb\x3f", b"\xfb\x3f\xfc\x3f", b"\x0a\xff\xff\xff\xff\x7f"])),
    # A message nested far past any parser's limit: field 38 (tree) of Zoo, a Node whose children hold Nodes.
    st.tuples(st.just("deep"), st.integers(1, 5000)),
)


def protobuf_mutated(good: bytes, mutation: tuple) -> bytes | None:
    from kafka_lake.decoding.protobuf.wire import read_message_indexes
    from tests.test_protobuf import varint

    kind, *args = mutation
    header, payload = good[:5], good[5:]
    _, start = read_message_indexes(payload)
    if kind == "indexes":
        indexes = args[0]
        return header + (b"\x00" if not indexes else zigzag(len(indexes)) + b"".join(map(zigzag, indexes))) + payload[start:]
    if kind == "append":
        return good + args[0]
    if kind == "deep":
        nested = b""
        for _ in range(args[0]):
            nested = b"\x12" + varint(len(nested)) + nested
        return good + b"\xb2\x02" + varint(len(nested)) + nested
    return mutated(good, mutation)


@pytest.fixture(scope="module")
def hostile_protobuf(tmp_path_factory):
    """The Protobuf tests' zoo of every type (maps, oneofs, packed and unpacked repeated scalars, well-known types),
    with PII, as its own values; a map entry without its key; repeated scalars written unpacked."""
    from tests.test_protobuf import framed, zoo, zoo_message

    topic = zoo(tmp_path_factory.mktemp("zoo"), pii_fields=["name", "first_item.sku"])
    message = zoo_message(topic)
    good = framed(topic, message)
    # Field 23 (counts, map<string, int64>) with an entry holding only its value: the key is its default, "".
    keyless = good + b"\xba\x01\x02\x10\x07"
    # Field 22 (scores, repeated double) unpacked: one tagged value after another, which a parser must take too.
    unpacked = good + b"\xb1\x01" + b"\x00" * 7 + b"\x40" + b"\xb1\x01" + b"\x00" * 8
    bare = type(message)()  # every field absent but the event time
    bare.occurred_at.CopyFrom(message.occurred_at)
    return topic, [good, keyless, unpacked, framed(topic, bare)]


@settings(FUZZ, max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 300)))
@given(picks=st.lists(st.tuples(st.integers(0, 3), PROTOBUF_MUTATIONS), min_size=1, max_size=12))
def test_given_corrupted_protobuf_values_when_decoded_then_each_record_is_a_row_a_dead_letter_or_a_tombstone(
    hostile_protobuf, picks
):
    topic, goods = hostile_protobuf
    assert_each_is_a_row_a_dead_letter_or_a_tombstone(topic, [protobuf_mutated(goods[pick], m) for pick, m in picks])


def test_given_protobuf_values_of_the_hostile_kinds_then_each_lands_as_the_parser_reads_it(hostile_protobuf):
    """The fixture's own values land as rows: a map entry without its key lands with the key's default, unpacked
    repeated scalars land like packed ones, and a message nested deeper than the parser follows is a dead letter."""
    from kafka_lake.decoding.batch_decoder import BatchDecoder
    from kafka_lake.kafka.records import KafkaRecord
    from kafka_lake.kafka.schema_resolution import CatalogSchemas

    topic, goods = hostile_protobuf
    deep = protobuf_mutated(goods[0], ("deep", 200))
    records = [KafkaRecord(0, offset, 1_793_000_000_000, b"k", value) for offset, value in enumerate([*goods, deep])]

    batch = BatchDecoder(topic, CatalogSchemas(topic), b"fuzz-key").decode(records)

    rows = {row["_kafka_offset"]: row for table in batch.rows.values() for row in table.to_pylist()}
    [dead] = [letter for table in batch.dead_letters.values() for letter in table.to_pylist()]
    assert sorted(rows) == [0, 1, 2, 3] and "nested deeper than the parser follows" in dead["error"]
    assert dict(rows[1]["counts"])[""] == 7
    assert rows[2]["scores"] == [*rows[0]["scores"], 2.0, 0.0]
