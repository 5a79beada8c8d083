"""Secrets and personal data at the platform's boundaries, on the real broker, S3 server and Spark.

A landing through Dagster runs with every secret set to a recognisable value (the PII key, the dead-letter key,
the S3 secret key, a Kafka SASL password, a schema registry password in its URL); then its logs, its Dagster
event log and materialization metadata, every file it wrote to the lake, the reprs of its settings and resources,
and the errors of runs made to fail are searched for them. The same landing proves that `pii_fields` never reach
a table in clear, and that dead letters keep their raw bytes encrypted, decryptable for a replay.
The schema registry is the decoding tests' HTTP stand-in: no Confluent Schema Registry runs here.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, materialize

from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.lake import layout
from kafka_lake.lake.dead_letters import DeadLetterDecryptionError, decrypt_table, decrypt_value, is_encrypted
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.landing_settings import LandingSettings
from kafka_lake.landing.slice_task import SliceTask
from kafka_lake.landing.slices import OffsetSlice
from kafka_lake.settings import PlatformSettings, dead_letter_key_from_env
from platform_assets.assets import raw_landing_asset
from platform_assets.definitions import platform_resources
from tests.landing_fixtures import (
    HOURS,
    PARTITIONS,
    Produced,
    build_traffic,
    produce,
    pseudonym,
    unique_topic_name,
    write_test_topic,
)
from tests.test_decoding import RegistryStandIn

HOUR = HOURS[1]
PII_DEAD_LETTER_USER = "user-in-a-dead-letter"


@dataclass
class Collected:
    """Everything a landing left where people or programs can read it."""

    texts: list[tuple[str, str]] = field(default_factory=list)

    def add(self, where: str, text) -> None:
        self.texts.append((where, text if isinstance(text, str) else repr(text)))

    def assert_free_of(self, secrets: dict[str, str]) -> None:
        leaks = [f"{name} in {where}" for where, text in self.texts for name, secret in secrets.items() if secret in text]
        assert not leaks, leaks


class RecordsOfAllLoggers(logging.Handler):
    """Every Python log record of every logger, at every level, as it would be formatted."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter("%(name)s %(levelname)s %(message)s").format(record))

    def __enter__(self):
        root = logging.getLogger()
        self._level = root.level
        root.addHandler(self)
        root.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc):
        root = logging.getLogger()
        root.removeHandler(self)
        root.setLevel(self._level)


def secrets_for(s3_server, registry_password: str) -> tuple[dict[str, str], bytes]:
    dead_letter_key = os.urandom(32)
    secrets = {
        "PII_HMAC_KEY": f"pii-hmac-secret-{uuid.uuid4().hex}",
        "DEAD_LETTER_KEY": base64.b64encode(dead_letter_key).decode(),
        "KAFKA_CLIENT_SASL_PASSWORD": f"kafka-sasl-secret-{uuid.uuid4().hex}",
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "schema registry password": registry_password,
    }
    return secrets, dead_letter_key


@pytest.fixture(scope="module")
def registry_of(request):
    """Starts the registry stand-in serving a topic's catalog schemas under their registry ids."""
    servers = []

    def start(topic) -> RegistryStandIn:
        server = RegistryStandIn({v.registry_id: v.schema for v in topic.schema_versions})
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def environment(secrets: dict[str, str], registry: RegistryStandIn, bootstrap_servers: str) -> dict[str, str]:
    host = registry.url.removeprefix("http://")
    return {
        "PII_HMAC_KEY": secrets["PII_HMAC_KEY"],
        "DEAD_LETTER_KEY": secrets["DEAD_LETTER_KEY"],
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
        "KAFKA_CLIENT_SASL_USERNAME": "lake-landing",
        "KAFKA_CLIENT_SASL_PASSWORD": secrets["KAFKA_CLIENT_SASL_PASSWORD"],
        "SCHEMA_REGISTRY_URL": f"http://registry-user:{secrets['schema registry password']}@{host}",
    }


def traffic_with_pii_in_a_dead_letter(topic):
    """The landing tests' traffic, plus a record whose event time cannot be parsed and whose user id is PII."""
    traffic = build_traffic(topic)
    v1 = topic.version(1)
    record = {"event_id": 10**6, "user_id": PII_DEAD_LETTER_USER, "meta": {"occurred_at": "tea time"},
              "amount": Decimal("1.00"), "quantity": 1, "tags": []}
    traffic.produced.append(Produced(0, to_millis(HOUR + timedelta(minutes=30)), b"pii-key",
                                     encode_confluent(v1.registry_id, v1.parsed, record), "unparseable_event_time"))
    traffic.produced.sort(key=lambda p: (p.partition, p.timestamp_ms))
    return traffic


@dataclass
class SecretLanding:
    topic: object
    traffic: object
    storage: LakeStorage
    secrets: dict[str, str]
    dead_letter_key: bytes
    collected: Collected
    materializations: list


def lake_contents(storage: LakeStorage, collected: Collected) -> None:
    for stored in storage.list_files(""):
        raw = storage.read_bytes(stored.path)
        collected.add(f"{stored.path} (bytes)", raw.decode("latin-1"))
        if stored.path.endswith(".parquet"):
            parquet = pq.ParquetFile(storage.full_path(stored.path), filesystem=storage.filesystem)
            collected.add(f"{stored.path} (rows)", parquet.read().to_pylist())
            collected.add(f"{stored.path} (metadata)", parquet.metadata.metadata)


@pytest.fixture(scope="module")
def secret_landing(broker, spark, s3_server, registry_of, tmp_path_factory):
    """Given every secret set to a recognisable value, when an hour lands through Dagster onto S3."""
    topic = write_test_topic(tmp_path_factory.mktemp("catalog"), unique_topic_name(), max_rows_per_task=10)
    broker.create_topic(topic.topic, PARTITIONS)
    traffic = traffic_with_pii_in_a_dead_letter(topic)
    produce(broker.bootstrap_servers, traffic)
    registry = registry_of(topic)
    secrets, dead_letter_key = secrets_for(s3_server, f"registry-secret-{uuid.uuid4().hex}")
    lake_root = f"s3://lake/{uuid.uuid4().hex[:12]}"
    collected = Collected()
    with pytest.MonkeyPatch.context() as env, RecordsOfAllLoggers() as logs:
        for name, value in environment(secrets, registry, broker.bootstrap_servers).items():
            env.setenv(name, value)
        settings = dataclasses.replace(PlatformSettings.from_env(), lake_root=lake_root)
        resources = platform_resources(settings)
        instance = DagsterInstance.ephemeral()
        result = materialize([raw_landing_asset(topic)], partition_key=KafkaHour(HOUR).partition_key,
                             resources=resources, instance=instance)
        assert result.success
        assert registry.requests, "the landing resolved its schema ids through the registry"
        for event in result.all_events:
            collected.add(f"Dagster event {event.event_type_value}", event)
        for entry in instance.all_logs(result.run_id):
            collected.add("Dagster event log", entry)
        materializations = result.asset_materializations_for_node(f"land_{topic.database}__{topic.table}")
        assert materializations
        collected.add("materialization metadata", [m.metadata for m in materializations])
        collected.add("check results", result.get_asset_check_evaluations())
        collected.add("reprs", [settings, resources, *resources.values(), PlatformSettings.from_env(),
                                {name: resource.model_dump() for name, resource in resources.items() if hasattr(resource, "model_dump")},
                                resources["schema_registry"].url])
        landing = LandingSettings(lake_root, resources["kafka"].consumer_config(), resources["schema_registry"].client_url(),
                                  resources["pii"].key(), dead_letter_key=resources["pii"].dead_letter_key())
        # Every secret was in play: the client configs carry them, and the keys are the ones set.
        assert landing.kafka_config["sasl.password"] == secrets["KAFKA_CLIENT_SASL_PASSWORD"]
        assert secrets["schema registry password"] in landing.schema_registry_url
        assert (landing.pii_key.decode(), landing.dead_letter_key) == (secrets["PII_HMAC_KEY"], dead_letter_key)
        collected.add("reprs", [landing, SliceTask(topic, KafkaHour(HOUR), OffsetSlice(0, 0, 1), landing)])
    collected.add("Python logs", "\n".join(logs.lines))
    storage = LakeStorage(lake_root)
    lake_contents(storage, collected)
    return SecretLanding(topic, traffic, storage, secrets, dead_letter_key, collected, materializations)


@pytest.mark.spark
@pytest.mark.s3
def test_a_landing_shows_no_secret_in_logs_event_log_metadata_lake_files_or_reprs(secret_landing):
    collected = secret_landing.collected
    assert any("Python logs" == where and "land" in text for where, text in collected.texts), "logs were captured"
    assert any(where.endswith("(rows)") for where, _ in collected.texts), "lake files were read"

    collected.assert_free_of(secret_landing.secrets)


@pytest.mark.spark
@pytest.mark.s3
def test_pii_fields_never_reach_a_table_in_clear_and_dead_letters_hold_pii_only_encrypted(secret_landing):
    storage, topic = secret_landing.storage, secret_landing.topic
    clear = {p.record["user_id"] for p in secret_landing.traffic.produced if p.record and p.record["user_id"]}
    clear.add(PII_DEAD_LETTER_USER)
    files = [f.path for f in storage.list_files("") if f.path.endswith(".parquet")]
    data = [path for path in files if path.startswith(layout.table_prefix(topic.database, topic.table))]
    dead = [path for path in files if path.startswith(layout.dead_letter_prefix(topic.database, topic.table))]
    assert data and dead

    pseudonyms = {pseudonym(user, secret_landing.secrets["PII_HMAC_KEY"]) for user in clear}
    landed_user_ids = {row["user_id"] for path in data for row in pq.read_table(
        storage.full_path(path), filesystem=storage.filesystem, columns=["user_id"]).to_pylist()} - {None}
    assert landed_user_ids and landed_user_ids <= pseudonyms, "user ids land as their HMAC under PII_HMAC_KEY"

    for path in files:
        table = pq.read_table(storage.full_path(path), filesystem=storage.filesystem)
        text = repr(table.to_pylist())
        found = [value for value in clear if value in text or value.encode() in storage.read_bytes(path)]
        assert not found, f"{path} holds {found} in clear"
        if path in dead:
            assert is_encrypted(table.schema), f"{path}: dead letters land encrypted when DEAD_LETTER_KEY is set"


@pytest.mark.spark
@pytest.mark.s3
def test_an_encrypted_dead_letter_decrypts_to_the_raw_kafka_value_for_a_replay(secret_landing):
    storage, topic = secret_landing.storage, secret_landing.topic
    produced = {(p.partition, p.offset): p.value for p in secret_landing.traffic.produced}
    decrypted = []
    for stored in storage.list_files(layout.dead_letter_prefix(topic.database, topic.table)):
        table = pq.read_table(storage.full_path(stored.path), filesystem=storage.filesystem)
        decrypted += decrypt_table(secret_landing.dead_letter_key, table).to_pylist()

    assert decrypted and all(row["value"] == produced[(row["_kafka_partition"], row["_kafka_offset"])] for row in decrypted)
    pii_letter = next(row for row in decrypted if PII_DEAD_LETTER_USER.encode() in row["value"])
    assert pii_letter["error"].startswith("unparseable_event_time") and PII_DEAD_LETTER_USER not in pii_letter["error"]

    one = pq.read_table(storage.full_path(stored.path), filesystem=storage.filesystem).to_pylist()[0]
    with pytest.raises(DeadLetterDecryptionError, match="another DEAD_LETTER_KEY"):
        decrypt_value(os.urandom(32), one["value"], one["_kafka_topic"], one["_kafka_partition"], one["_kafka_offset"])
    with pytest.raises(DeadLetterDecryptionError, match="does not decrypt"):  # moved to another record's row
        decrypt_value(secret_landing.dead_letter_key, one["value"], one["_kafka_topic"], one["_kafka_partition"],
                      one["_kafka_offset"] + 1)


FORCED_FAILURES = {
    # The broker refuses the SASL handshake: librdkafka logs and the error see the configured password.
    "kafka SASL": {"KAFKA_CLIENT_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_CLIENT_SASL_MECHANISM": "PLAIN"},
    # The registry is gone: the Spark task fails with the URL that carries the password.
    "schema registry": {"SCHEMA_REGISTRY_URL": "http://registry-user:{registry}@127.0.0.1:9"},
    # S3 refuses a wrong secret key, itself a secret: the driver's S3 calls fail with it.
    "S3 credentials": {"AWS_SECRET_ACCESS_KEY": "aws-wrong-secret-{token}"},
}


@pytest.mark.spark
@pytest.mark.s3
@pytest.mark.parametrize("failure", FORCED_FAILURES)
def test_a_run_made_to_fail_shows_no_secret_in_its_error_or_logs(broker, spark, s3_server, registry_of, tmp_path,
                                                                  monkeypatch, capfd, failure):
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    broker.create_topic(topic.topic, PARTITIONS)
    produce(broker.bootstrap_servers, build_traffic(topic, per_partition_per_hour=2))
    secrets, _ = secrets_for(s3_server, f"registry-secret-{uuid.uuid4().hex}")
    secrets["wrong AWS secret"] = f"aws-wrong-secret-{uuid.uuid4().hex}"
    for name, value in environment(secrets, registry_of(topic), broker.bootstrap_servers).items():
        monkeypatch.setenv(name, value)
    for name, value in FORCED_FAILURES[failure].items():
        monkeypatch.setenv(name, value.format(registry=secrets["schema registry password"],
                                              token=secrets["wrong AWS secret"].rsplit("-", 1)[-1]))
    collected = Collected()

    with RecordsOfAllLoggers() as logs:
        settings = dataclasses.replace(PlatformSettings.from_env(), lake_root=f"s3://lake/{uuid.uuid4().hex[:12]}")
        instance = DagsterInstance.ephemeral()
        result = materialize([raw_landing_asset(topic)], partition_key=KafkaHour(HOUR).partition_key,
                             resources=platform_resources(settings), instance=instance, raise_on_error=False)

    assert not result.success
    [step_failure] = [e for e in result.all_events if e.is_step_failure]
    error = step_failure.step_failure_data.error
    collected.add("the step's error", error.to_string())
    expected_cause = {"kafka SASL": "KafkaUnavailable", "schema registry": "SchemaRegistryUnavailable",
                      "S3 credentials": "OSError"}[failure]
    assert expected_cause in error.to_string(), error.to_string()[:2000]
    for entry in instance.all_logs(result.run_id):
        collected.add("Dagster event log", entry)
    collected.add("Python logs", "\n".join(logs.lines))
    out, err = capfd.readouterr()
    collected.add("stdout and stderr (librdkafka, Spark)", out + err)
    if failure == "kafka SASL":
        assert "SASL" in out + err, "librdkafka's own log lines were captured"
    collected.assert_free_of(secrets)


def test_a_malformed_dead_letter_key_fails_without_echoing_it():
    for wrong in ("not base64 at all: secret-1234!", base64.b64encode(b"secret-but-16-bytes").decode()):
        with pytest.raises(ValueError, match="DEAD_LETTER_KEY") as refused:
            dead_letter_key_from_env({"DEAD_LETTER_KEY": wrong})
        assert wrong not in str(refused.value) and "secret" not in str(refused.value)
    assert dead_letter_key_from_env({}) is None
    key = os.urandom(32)
    assert dead_letter_key_from_env({"DEAD_LETTER_KEY": base64.b64encode(key).decode()}) == key


def test_settings_and_secret_holders_never_show_a_secret_in_their_repr():
    from kafka_lake.decoding.pii import ColumnPseudonymizer, Pseudonymizer
    from kafka_lake.lake.dead_letters import DeadLetterEncryption
    from resources import KafkaResource, PiiKeyResource, SchemaRegistryResource

    secret = "shown-secret-" + uuid.uuid4().hex
    settings = PlatformSettings.from_env({"KAFKA_CLIENT_SASL_PASSWORD": secret,
                                          "SCHEMA_REGISTRY_URL": f"https://user:{secret}@registry.example:8081"})
    registry = SchemaRegistryResource.for_url(settings.schema_registry_url)
    shown = [settings, registry, registry.model_dump(), KafkaResource(bootstrap_servers="b:9092"), PiiKeyResource(),
             Pseudonymizer(secret.encode()), ColumnPseudonymizer(secret.encode()), DeadLetterEncryption(os.urandom(32)),
             LandingSettings("s3://lake", {"sasl.password": secret}, settings.schema_registry_url, secret.encode(),
                             dead_letter_key=secret.encode())]

    assert not [repr(thing) for thing in shown if secret in repr(thing) or secret in str(thing)]
    assert registry.url == "https://registry.example:8081"
    assert settings.schema_registry_url.endswith("@registry.example:8081")  # the client still gets its credentials
