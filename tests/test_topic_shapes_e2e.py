"""Topic shapes end to end on the real broker and Spark, on a local lake and on the S3 server: a JSON topic of several
event types routed into a table per type, plain and in Confluent's JSON Schema framing, with a raw archive of the same
topic beside them; every offset accounted for once per placement copy, whichever tables land in whichever order.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka import Producer
from dagster import DagsterInstance, materialize

from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.kafka.log import KafkaLog
from kafka_lake.lake import layout
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.loader import load_catalog
from kafka_lake.upkeep.compaction import compact_hour, compact_partition
from platform_assets.assets import landing_groups, raw_landing_asset
from platform_assets.definitions import platform_resources
from tests.landing_fixtures import (
    in_this_process,
    land,
    land_on_spark,
    landing_settings,
    read_lake,
    rows_as_readers_see_them,
)

H = datetime(2026, 11, 1, 10, tzinfo=timezone.utc)
HOURS = [H, H + timedelta(hours=1)]
PARTITIONS = 2
OPEN_ID, CLOSE_ID = 7001, 7002
CART_OPEN = {"type": "record", "name": "CartOpen", "namespace": "shop.events", "fields": [
    {"name": "type", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "cart_id", "type": "string"},
    {"name": "user_id", "type": ["null", "string"], "default": None}]}
CART_CLOSE = {"type": "record", "name": "CartClose", "namespace": "shop.events", "fields": [
    {"name": "type", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "cart_id", "type": "string"},
    {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]}


def write_entry(root: Path, name: str, topic: str, schema: dict | None, registry_id: int | None = None, **keys) -> None:
    folder = root.joinpath(*name.split("/"))
    folder.mkdir(parents=True)
    document = {"topic": topic, "owner": "team-test", "start_hour": "2026-11-01T00:00Z",
                "time_partitioning": {"source": "kafka_time"}, **keys}
    if schema is not None:
        (folder / "v1.avsc").write_text(json.dumps(schema))
        document["schema_versions"] = [{"version": 1, "file": "v1.avsc", "registry_id": registry_id}]
    (folder / "topic.yaml").write_text(json.dumps(document))


def json_value(document: dict, schema_id: int | None = None) -> bytes:
    text = json.dumps(document).encode()
    return text if schema_id is None else b"\x00" + struct.pack(">I", schema_id) + text


def events_traffic(hour: datetime) -> list[tuple[str, bytes | None]]:
    """(what the record must become, its value) for one hour of a partition: each routed type plain and framed, a
    type no table takes, a record that is no JSON, one without a type, one that fits no schema, a tombstone."""
    ms = to_millis(hour) + 60_000
    opened = {"type": "cartOpen", "ts": ms, "cart_id": "c1", "user_id": "u1"}
    closed = {"type": "cartClose", "ts": ms + 1, "cart_id": "c1", "total": "12.30"}
    return [
        ("shop/cart_open", json_value(opened)),
        ("shop/cart_open", json_value({**opened, "cart_id": "c2", "user_id": None}, OPEN_ID)),
        ("shop/cart_close", json_value(closed)),
        ("shop/cart_close", json_value({**closed, "cart_id": "c3"}, CLOSE_ID)),
        ("unrouted", json_value({"type": "tap", "ts": ms})),
        ("unrouted", b'{"type": "cartOpen", "ts": '),
        ("unrouted", json_value({"ts": ms, "cart_id": "c4"})),
        ("dead:shop/cart_open", json_value({"type": "cartOpen", "cart_id": "c5"})),  # no event time
        ("dead:shop/cart_close", json_value({**closed, "total": "twelve"})),
        ("tombstone", None),
    ]


@pytest.fixture
def routed_topic(broker, tmp_path, lake_root):
    kafka_topic = f"e2e.events.{uuid.uuid4().hex[:8]}"
    catalog_dir = tmp_path / "catalog"
    placed = {"source": "event_time", "field": "ts"}
    # A third of each routed table's records are broken on purpose: the dead-letter rate check must pass anyway.
    write_entry(catalog_dir, "shop/cart_open", kafka_topic, CART_OPEN, OPEN_ID, format="json",
                route={"field": "type", "equals": "cartOpen"}, time_partitioning=placed, dead_letter_rate_threshold=0.4)
    write_entry(catalog_dir, "shop/cart_close", kafka_topic, CART_CLOSE, CLOSE_ID, format="json",
                route={"field": "type", "in": ["cartClose"]}, time_partitioning=placed, dead_letter_rate_threshold=0.4)
    write_entry(catalog_dir, "archive/events", kafka_topic, None, format="raw")
    catalog = load_catalog(catalog_dir)
    broker.create_topic(kafka_topic, PARTITIONS)
    expected: dict[tuple[int, int], str] = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for partition in range(PARTITIONS):
        for hour in HOURS:
            for fate, value in events_traffic(hour):
                def delivered(error, message, fate=fate):
                    assert error is None, error
                    expected[(message.partition(), message.offset())] = fate
                producer.produce(kafka_topic, value=value, key=b"k", partition=partition,
                                 timestamp=to_millis(hour) + 1000, on_delivery=delivered)
        producer.flush(30)
        # A last record alone in its batch, in the hour after: Tansu's high watermark is then exact (TESTING.md).
        producer.produce(kafka_topic, value=None, partition=partition, timestamp=to_millis(HOURS[-1]) + 3_600_000,
                         on_delivery=lambda error, message: None)
        producer.flush(30)
    settings = landing_settings(lake_root, broker.bootstrap_servers)
    return catalog, kafka_topic, expected, settings


def offsets_in(storage: LakeStorage, prefix: str) -> Counter:
    return Counter((row.row["_kafka_partition"], row.row["_kafka_offset"]) for row in read_lake(storage, prefix))


def assert_every_offset_once(storage: LakeStorage, catalog, kafka_topic: str, expected: dict) -> None:
    """Every offset is a row of exactly one routed table, a dead letter, an unrouted record or a tombstone, and a row
    of the archive too; the unrouted dead letters are the first routed table's."""
    cart_open, cart_close = catalog.by_name("shop", "cart_open"), catalog.by_name("shop", "cart_close")
    found: dict[str, Counter] = {
        "shop/cart_open": offsets_in(storage, layout.table_prefix("shop", "cart_open")),
        "shop/cart_close": offsets_in(storage, layout.table_prefix("shop", "cart_close")),
        "dead:shop/cart_open": offsets_in(storage, layout.dead_letter_prefix("shop", "cart_open")),
        "dead:shop/cart_close": offsets_in(storage, layout.dead_letter_prefix("shop", "cart_close")),
        "unrouted": offsets_in(storage, layout.unrouted_prefix(kafka_topic)),
    }
    landed = {fate: set(offsets) for fate, offsets in found.items()}
    assert all(count == 1 for offsets in found.values() for count in offsets.values()), "an offset landed twice"
    for fate, offsets in landed.items():
        assert offsets == {key for key, wanted in expected.items() if wanted == fate}, fate
    every = [key for key in expected if expected[key] != "tombstone"]
    assert sorted(k for offsets in landed.values() for k in offsets) == sorted(every), "an offset in two places"

    tombstones = Counter()
    for table in (cart_open, cart_close):
        manifests = list(ManifestStore(storage, table.database, table.table).all())
        tombstones[table.name] = sum(m.counts.tombstones for m in manifests)
        for manifest in manifests:
            assert manifest.counts.accounted == manifest.counts.records, (table.name, manifest.hour, manifest.counts)
    wanted_tombstones = sum(1 for fate in expected.values() if fate == "tombstone")
    assert tombstones == Counter({"shop/cart_open": wanted_tombstones, "shop/cart_close": wanted_tombstones})

    owned = {f.path for m in ManifestStore(storage, "shop", "cart_close").all() for f in m.files if f.kind == "unrouted"}
    assert owned == {f.path for f in storage.list_files(layout.unrouted_prefix(kafka_topic))}, \
        "the first routed table owns the unrouted dead letters"

    archived = offsets_in(storage, layout.table_prefix("archive", "events"))
    assert set(archived) == set(every) and max(archived.values()) == 1, "the archive holds every value once"


def test_a_json_topic_routed_into_a_table_per_type_holds_every_offset_once_whatever_lands_first(routed_topic, spark):
    """Given JSON events of two routed types, records no table takes, broken ones and tombstones, and a raw archive
    of the same topic; when the tables land on Spark one after the other, the routed ones again in another order,
    then every offset is a row of exactly one routed table, a dead letter, an unrouted record or a tombstone, and a
    row of the archive too."""
    catalog, kafka_topic, expected, settings = routed_topic
    cart_open, cart_close, archive = (catalog.by_name(*name.split("/"))
                                      for name in ("shop/cart_open", "shop/cart_close", "archive/events"))
    storage = LakeStorage(settings.lake_root)

    for table in (cart_open, archive, cart_close, cart_close, cart_open):
        results = land_on_spark(table, settings, spark, HOURS)
        for result in results:
            counts = result.manifest.counts
            assert counts.accounted == counts.records, (table.name, result.manifest.hour, counts)

    assert_every_offset_once(storage, catalog, kafka_topic, expected)
    unrouted = [row.row for row in read_lake(storage, layout.unrouted_prefix(kafka_topic))]
    assert any("no table of topic" in row["error"] and '"tap"' in row["error"] for row in unrouted)  # as JSON
    assert any("is not JSON" in row["error"] for row in unrouted)
    assert any("route field 'type' is absent" in row["error"] for row in unrouted)

    rows = [row.row for row in read_lake(storage, layout.table_prefix("shop", "cart_close"))]
    assert {row["total"] for row in rows} == {Decimal("12.30")}
    assert {row["cart_id"] for row in rows} == {"c1", "c3"}
    assert all(row["ts"].replace(tzinfo=timezone.utc) >= H for row in rows)

    raw = {(r.row["_kafka_partition"], r.row["_kafka_offset"]): r for r in read_lake(storage, layout.table_prefix("archive", "events"))}
    assert all("/schema_version=0/" in row.path for row in raw.values())
    assert raw[next(iter(sorted(raw)))].row["value"].startswith(b'{"type": "cartOpen"')


def test_tables_of_one_topic_landing_together_read_it_once_per_hour(routed_topic, monkeypatch):
    """Given a topic of two routed tables and a raw archive; when the three land their hours together, then each
    offset is fetched from Kafka once (the log reader's batches counted in this process, where the slices run), and
    the lake is as if each had landed alone."""
    catalog, kafka_topic, expected, settings = routed_topic
    fetched = Counter()
    reading = KafkaLog.read_slice_batches

    def counted(self, partition, start, end, *args, **kwargs):
        for batch in reading(self, partition, start, end, *args, **kwargs):
            fetched.update(zip(batch.partitions, batch.offsets))
            yield batch
    monkeypatch.setattr(KafkaLog, "read_slice_batches", counted)
    cart_open, cart_close, archive = (catalog.by_name(*name.split("/"))
                                      for name in ("shop/cart_open", "shop/cart_close", "archive/events"))

    results = land(cart_close, HOURS, settings, in_this_process, together=(cart_open, archive))

    assert [(r.manifest.table, r.manifest.hour) for r in results] == [
        (table, KafkaHour(hour).partition_key) for hour in HOURS for table in ("cart_close", "cart_open", "events")]
    assert set(fetched) == set(expected) and max(fetched.values()) == 1, "each offset read once for three tables"
    storage = LakeStorage(settings.lake_root)
    assert_every_offset_once(storage, catalog, kafka_topic, expected)

    # The raw archive compacts like any table: its one schema version's hour into one file, the same rows.
    before = rows_as_readers_see_them(storage, archive)
    compacted = compact_hour(archive, H, storage, lambda tasks: [compact_partition(t) for t in tasks], lambda m: None)
    assert [(m.partition.schema_version, len(m.files)) for m in compacted.manifests] == [(0, 1)]
    assert rows_as_readers_see_them(storage, archive) == before


def test_one_dagster_run_lands_every_table_of_a_topic_each_with_its_own_materialization_and_checks(routed_topic, spark):
    """Given the routed topic's three tables, one asset in the code location; when a run selects all of them for
    each hour, then every table gets its own materialization and passing landing checks per hour, and the lake
    holds every offset once per placement copy."""
    catalog, kafka_topic, expected, settings = routed_topic
    [group] = [g for g in landing_groups(catalog.topics) if len(g) > 1]
    asset = raw_landing_asset(group[0], together=group[1:])
    platform = PlatformSettings(kafka_bootstrap_servers=settings.kafka_config["bootstrap.servers"],
                                lake_root=settings.lake_root)

    for hour in HOURS:
        result = materialize([asset], partition_key=KafkaHour(hour).partition_key,
                             resources=platform_resources(platform), instance=DagsterInstance.ephemeral())
        assert result.success
        landed = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
        assert landed >= {f"raw/{t.name}" for t in group}
        # Each routed table's materialization accounts for every record read: its own, other tables', no table's; the
        # first by name keeps the records no table takes and lists them on its dead letters, the other points there.
        shown = {event.asset_key.to_user_string(): {name: value.value for name, value in
                                                    event.materialization.metadata.items()}
                 for event in result.get_asset_materialization_events()}
        keeper, other = shown["raw/shop/cart_close"], shown["raw/shop/cart_open"]
        assert keeper["routed_to_other_tables"] > 0 and keeper["unrouted"] > 0
        assert (keeper["rows"] + keeper["dead_letters"] + keeper["tombstones"] + keeper["routed_to_other_tables"]
                + keeper["unrouted"]) == keeper["records_read"], keeper
        assert (other["rows"] + other["dead_letters"] + other["tombstones"]
                + other["routed_to_other_tables_or_unrouted"]) == other["records_read"], other
        assert other["unrouted_kept_by"].to_user_string() == "dead_letters/shop/cart_close"
        kept = shown["dead_letters/shop/cart_close"]
        assert kept["unrouted"] == keeper["unrouted"] == sum(kept["unrouted_causes"].values())
        assert all(cause.startswith("unrouted: ") for cause in kept["unrouted_causes"]), kept["unrouted_causes"]
        assert kept["unrouted_paths"] and all(f"/_dead_letters/_unrouted/{kafka_topic}/" in path
                                              for path in kept["unrouted_paths"])
        checks = result.get_asset_check_evaluations()
        assert len(checks) == 4 * len(group), checks
        assert all(c.passed for c in checks), [(c.asset_key.to_user_string(), c.check_name, c.description) for c in checks if not c.passed]

    assert_every_offset_once(LakeStorage(settings.lake_root), catalog, kafka_topic, expected)
