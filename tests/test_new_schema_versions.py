"""A producer's new schema version, end to end: the catalog entry written from the registry by `deploy.add_topic`, the
producer registering a second version and writing with it to the real broker, the hours landed through Dagster on
Spark. The landing names the new version (topic, id, subject, version and the `add_topic --update` command) in its
run's log and metadata and in the dead letters' error; `topic_health` names it in its tick and alerts once; after
`add_topic --update` the same hours land those records as rows, and the metrics show it after a recount.

The registry is a stand-in speaking Confluent's REST API (tests/registry_stand_in.py: no registry server installs
here), driven through confluent-kafka's `SchemaRegistryClient`.
"""

from __future__ import annotations

import json
import zlib
from datetime import timedelta

import pyarrow.parquet as pq
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from dagster import AssetKey, DagsterInstance, build_sensor_context, materialize

from deploy import add_topic
from kafka_lake.hours import KafkaHour
from kafka_lake.lake import layout
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.loader import TopicCatalog, load_topic
from platform_assets import sensors
from platform_assets.assets import raw_landing_asset
from platform_assets.definitions import platform_resources
from resources import KafkaResource, LakeStorageResource, SchemaRegistryResource
from tests.landing_fixtures import RAW_HOURS, V1, V2, build_traffic, produce, unique_topic_name, write_test_topic
from tests.registry_stand_in import RegistryStandIn
from tests.test_metrics import metrics_server, scrape, table_labels
from tests.test_sensors import alerts_resource, webhook  # noqa: F401  (a fixture)


def test_a_new_schema_version_is_named_where_operators_look_and_lands_after_add_topic_update(
        broker, spark, tmp_path, monkeypatch, caplog, webhook):  # noqa: F811
    topic_name = unique_topic_name()
    # The producer's view: both versions, with the ids the registry gives them (registered in order from the first).
    producing = write_test_topic(tmp_path / "producer", topic_name)
    first_id = zlib.crc32(topic_name.encode()) % 10**6 * 10 + 1
    assert [v.registry_id for v in producing.schema_versions] == [first_id, first_id + 1]
    catalog, lake_root = tmp_path / "catalog", str(tmp_path / "lake")
    with RegistryStandIn(first_id=first_id) as registry:
        monkeypatch.setenv("SCHEMA_REGISTRY_URL", registry.url)
        client = SchemaRegistryClient({"url": registry.url})
        client.register_schema(f"{topic_name}-value", Schema(json.dumps(V1)))
        assert add_topic.main(["--catalog", str(catalog), "--topic", topic_name, "--database", "e2e", "--table", "orders",
                               "--time-field", "meta.occurred_at", "--start-hour", "2026-11-01T00:00Z"]) == 0
        client.register_schema(f"{topic_name}-value", Schema(json.dumps(V2)))  # the producer's new version
        traffic = build_traffic(producing)
        broker.create_topic(topic_name, 3)
        produce(broker.bootstrap_servers, traffic)
        topic = load_topic(catalog / "e2e" / "orders" / "topic.yaml")
        settings = PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, lake_root=lake_root,
                                    schema_catalog_dir=str(catalog), schema_registry_url=registry.url)
        hour = KafkaHour(RAW_HOURS[1])  # holds records of both versions
        new_id, command = first_id + 1, (f"python -m deploy.add_topic --topic {topic_name} --database e2e --table "
                                         f"orders --update")
        v2_records = sum(1 for p in traffic.rows() if p.version == 2 and hour.start_ms <= p.timestamp_ms < hour.end_ms)
        instance = DagsterInstance.ephemeral()

        run = materialize([raw_landing_asset(topic)], partition_key=hour.partition_key, instance=instance,
                          resources=platform_resources(settings))

        # The run: its log and the hour's metadata.
        assert run.success
        said = [entry.user_message for entry in instance.all_logs(run.run_id) if entry.user_message]
        sentence = (f"records of topic {topic_name} carry schema id {new_id}, version 2 of subject {topic_name}-value in "
                    f"the schema registry, which the catalog lacks; add it with `{command}`, then land their hours again")
        assert any(sentence in line and f"{v2_records} dead letter(s)" in line for line in said), said
        materialization = instance.get_latest_materialization_event(AssetKey(["raw", "e2e", "orders"])).asset_materialization
        assert materialization.metadata["unknown_schema_ids"].value[str(new_id)] == v2_records
        assert command in materialization.metadata["new_schema_versions"].value
        # The dead letters' error.
        storage = LakeStorage(lake_root)
        errors = [row["error"] for stored in storage.list_files(layout.dead_letter_prefix("e2e", "orders"))
                  for row in pq.read_table(storage.full_path(stored.path)).to_pylist()]
        named = [error for error in errors if f"schema id {new_id} " in error]
        assert len(named) == v2_records
        assert all(f"it is version 2 of subject {topic_name}-value; add it with `{command}`" in e for e in named)

        # The sensor's tick, and an alert once per new id.
        health = sensors.health_sensor(TopicCatalog((topic,)))
        monkeypatch.setattr(sensors, "_now", lambda: hour.end + timedelta(hours=2))
        resources = dict(kafka=KafkaResource(bootstrap_servers=broker.bootstrap_servers),
                         lake=LakeStorageResource(root=lake_root), alerts=alerts_resource(),
                         schema_registry=SchemaRegistryResource.for_url(registry.url))
        context = build_sensor_context(instance=instance, resources=resources)
        context.log.addHandler(caplog.handler)
        with caplog.at_level("WARNING"):
            first = health(context)
        assert any(sentence in r.getMessage() for r in caplog.records if r.getMessage().startswith(topic_name))
        alerted = [alert["text"] for alert in webhook if str(new_id) in alert["text"]]
        assert alerted == [f"[SCHEMA] {sentence}"]
        health(build_sensor_context(instance=instance, cursor=first.cursor, resources=resources))
        assert len([alert for alert in webhook if str(new_id) in alert["text"]]) == 1, "once per new id"

        # The command the landing named adds the version; the hour landed again holds those records as rows.
        with metrics_server(settings) as (url, measures):
            before = scrape(url)
            assert add_topic.main(["--catalog", str(catalog), *command.split()[3:]]) == 0
            updated = load_topic(catalog / "e2e" / "orders" / "topic.yaml")
            again = materialize([raw_landing_asset(updated)], partition_key=hour.partition_key, instance=instance,
                                resources=platform_resources(settings))
            measures.recount()
            after = scrape(url)

    assert again.success
    manifest = ManifestStore(storage, "e2e", "orders").read(hour)
    assert manifest is not None and str(new_id) not in manifest.unknown_schema_ids
    assert manifest.schema_versions["2"] == v2_records
    rows = before["kafka_lake_landed_rows", table_labels(topic)]
    assert after["kafka_lake_landed_rows", table_labels(topic)] == rows + v2_records
