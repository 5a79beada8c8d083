"""The local services against the real thing: a Tansu broker, a SeaweedFS S3 server, and the demo traffic.

No mocks: every process starts on free loopback ports and is stopped by its pid, also when a test fails.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
from datetime import date, datetime, timedelta, timezone
from datetime import time as time_of_day
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from dev_services.demo_traffic import (
    CUSTOMERS_TOPIC,
    PAGE_VIEWS_TOPIC,
    TRANSACTIONS_TOPIC,
    last_closed_hours,
    plan_topic,
    produce_demo_traffic,
)
from dev_services.ports import LOOPBACK, free_port, is_listening, listening_addresses, wait_for_port
from dev_services.processes import is_alive
from dev_services.seaweedfs import SeaweedS3
from dev_services.tansu import PID_FILE_NAME, TansuBroker, running_broker, stop_detached
from kafka_lake.kafka.framing import FramingError, split_confluent
from kafka_lake.topics.loader import load_catalog

# Starts the broker, the S3 server and the demo as a user does.
pytestmark = pytest.mark.services
REPO = Path(__file__).resolve().parents[1]
UTC = timezone.utc
DEMO_HOURS = [datetime(2026, 11, 2, 9, tzinfo=UTC), datetime(2026, 11, 2, 10, tzinfo=UTC)]
DEMO_TOPICS = (PAGE_VIEWS_TOPIC, TRANSACTIONS_TOPIC, CUSTOMERS_TOPIC)


@pytest.fixture(scope="module")
def fresh_broker():
    """A broker of this module's own, not the session's shared one: the demo topics must start empty."""
    with TansuBroker() as running:
        yield running


@pytest.fixture(scope="module")
def object_store():
    """An S3 server of this module's own: restarting it must not pull the floor from under other tests."""
    with SeaweedS3() as running:
        yield running


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(REPO / "schema_catalog")


def consumer_for(bootstrap_servers: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap_servers, "group.id": "dev-services-test", "enable.auto.commit": False,
        "fetch.wait.max.ms": 5, "enable.partition.eof": True,
    })


def consume_everything(bootstrap_servers: str, topic: str, partitions: int, idle_seconds: float = 0.5) -> list:
    """Every record of `topic`, read past the partition ends until nothing arrives for `idle_seconds`.

    Reading on after end-of-partition is what proves a high watermark exact: a record beyond it shows up.
    """
    consumer = consumer_for(bootstrap_servers)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        messages, last_seen = [], time.monotonic()
        while time.monotonic() - last_seen < idle_seconds:
            message = consumer.poll(0.1)
            if message is None or (message.error() and message.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert message.error() is None, message.error()
            messages.append(message)
            last_seen = time.monotonic()
        return messages
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def demo(fresh_broker, catalog):
    started = time.monotonic()
    summary = produce_demo_traffic(fresh_broker.bootstrap_servers, catalog, DEMO_HOURS, records_per_hour=2000, partitions=3)
    print(f"\ndemo traffic: {time.monotonic() - started:.2f} s\n{summary}")
    consumed = {topic: consume_everything(fresh_broker.bootstrap_servers, topic, 3) for topic in DEMO_TOPICS}
    return summary, consumed


def decode(catalog, topic: str, value: bytes) -> tuple[int, dict]:
    """(schema version, record) of a framed value, the way the platform's decoder reads it."""
    schema_id, payload = split_confluent(value)
    version = catalog.by_topic(topic).version_for_registry_id(schema_id)
    if version is None:
        raise FramingError("unknown_schema_id", f"schema id {schema_id}")
    stream = io.BytesIO(payload)
    record = fastavro.schemaless_reader(stream, version.parsed, None)
    if stream.read(1):
        raise FramingError("undecodable_payload", "bytes left after the record")
    return version.version, record


def classify(catalog, topic: str, message) -> str:
    if message.value() is None:
        return "tombstone"
    try:
        decode(catalog, topic, message.value())
    except (FramingError, EOFError, ValueError, UnicodeDecodeError, IndexError):
        return "broken"
    return "valid"


# --- Tansu ------------------------------------------------------------------------------------------


def test_broker_creates_a_topic_and_serves_a_produced_record_back(fresh_broker):
    # given a topic created twice (the second time is a no-op)
    assert fresh_broker.create_topic("dev.round_trip", partitions=2) == 2
    assert fresh_broker.create_topic("dev.round_trip", partitions=5) == 2
    # when one record is produced with an explicit partition and timestamp
    producer = Producer({"bootstrap.servers": fresh_broker.bootstrap_servers})
    producer.produce("dev.round_trip", value=b"hello", key=b"k1", partition=1, timestamp=1_790_000_000_123)
    assert producer.flush(10) == 0
    # then it is consumed back unchanged
    [message] = consume_everything(fresh_broker.bootstrap_servers, "dev.round_trip", 2)
    assert (message.partition(), message.offset(), message.key(), message.value()) == (1, 0, b"k1", b"hello")
    assert message.timestamp()[1] == 1_790_000_000_123


def run_broker_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dev_services.tansu", *args], cwd=REPO, capture_output=True, text=True, timeout=60,
    )


def test_broker_cli_starts_reports_and_stops_a_detached_broker(tmp_path):
    port, state_dir = free_port(), tmp_path / "broker"
    pid_file = state_dir / PID_FILE_NAME
    # given a stale pid file left by a broker that died: the pid of a process that has exited
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    state_dir.mkdir()
    pid_file.write_text(finished.stdout)
    try:
        # when started, it replaces the stale pid file and says where it listens and what a restart loses
        started = run_broker_cli("start", "--port", str(port), "--state-dir", str(state_dir))
        assert started.returncode == 0, started.stderr
        assert f"listening on 127.0.0.1:{port}" in started.stdout
        assert "memory" in started.stdout
        first = running_broker(pid_file)
        assert first is not None and first.port == port and is_listening("127.0.0.1", port)

        # then starting again does nothing, and status finds it answering
        again = run_broker_cli("start", "--port", str(port), "--state-dir", str(state_dir))
        assert again.returncode == 0 and "already running" in again.stdout
        assert running_broker(pid_file) == first
        status = run_broker_cli("status", "--state-dir", str(state_dir))
        assert status.returncode == 0 and f"127.0.0.1:{port}" in status.stdout

        # and stop ends that pid and removes the pid file
        stopped = run_broker_cli("stop", "--state-dir", str(state_dir))
        assert stopped.returncode == 0 and str(first.pid) in stopped.stdout
        assert not is_alive(first.pid) and not pid_file.exists()
        assert run_broker_cli("status", "--state-dir", str(state_dir)).returncode == 1
    finally:
        stop_detached(pid_file)


# --- SeaweedFS --------------------------------------------------------------------------------------


def test_object_store_serves_boto3_and_pyarrow_and_keeps_objects_over_a_restart(object_store):
    from pyarrow import fs

    # given a bucket and an object written with boto3
    object_store.create_bucket("lake")
    object_store.create_bucket("lake")  # idempotent
    s3 = object_store.s3_client()
    s3.put_object(Bucket="lake", Key="raw/hello.txt", Body=b"written by boto3")
    # when pyarrow, configured the way Spark tasks configure it, reads it and writes another
    arrow = fs.S3FileSystem(
        endpoint_override=object_store.endpoint_url, scheme="http",
        access_key=object_store.access_key, secret_key=object_store.secret_key, region="us-east-1",
    )
    with arrow.open_input_stream("lake/raw/hello.txt") as stream:
        assert stream.read() == b"written by boto3"
    with arrow.open_output_stream("lake/raw/arrow.txt") as stream:
        stream.write(b"written by pyarrow")
    assert s3.get_object(Bucket="lake", Key="raw/arrow.txt")["Body"].read() == b"written by pyarrow"
    assert object_store.env()["AWS_ENDPOINT_URL"] == object_store.endpoint_url

    # then both survive a restart on the same ports, data and credentials
    endpoint, pid = object_store.endpoint_url, object_store.pid
    started = time.monotonic()
    object_store.restart()
    print(f"\nSeaweedFS restart: {time.monotonic() - started:.1f} s")
    assert object_store.endpoint_url == endpoint and object_store.pid != pid
    s3 = object_store.s3_client()
    assert s3.get_object(Bucket="lake", Key="raw/hello.txt")["Body"].read() == b"written by boto3"
    assert s3.get_object(Bucket="lake", Key="raw/arrow.txt")["Body"].read() == b"written by pyarrow"


# --- Where they listen ------------------------------------------------------------------------------


def test_the_broker_and_the_s3_server_listen_on_loopback_only(fresh_broker, object_store):
    # given the broker and the S3 server, started as the demo and the tests start them
    # when the kernel is asked which sockets each process listens on
    broker, s3 = listening_addresses(fresh_broker.pid), listening_addresses(object_store.pid)
    # then every one is on 127.0.0.1: none on a wildcard address, IPv4 or IPv6
    assert broker == {(LOOPBACK, fresh_broker.port)}
    assert {address for address, _ in s3} == {LOOPBACK}
    assert object_store.s3_port in {port for _, port in s3}


# --- Demo traffic -----------------------------------------------------------------------------------


def test_demo_traffic_lands_exactly_the_records_the_summary_counts(demo, catalog):
    summary, consumed = demo
    for topic in DEMO_TOPICS:
        traffic, messages = summary[topic], consumed[topic]
        assert len(messages) == traffic.produced
        assert traffic.produced == 2 * 2000 + traffic.closing and traffic.closing == 3
        kinds = [classify(catalog, topic, m) for m in messages]
        assert kinds.count("valid") == traffic.valid
        assert kinds.count("tombstone") == traffic.tombstones
        assert kinds.count("broken") == traffic.broken_total
        assert {p: sum(1 for m in messages if m.partition() == p) for p in range(3)} == dict(traffic.by_partition)
    assert summary[TRANSACTIONS_TOPIC].tombstones == 0
    page_views = summary[PAGE_VIEWS_TOPIC]
    assert 10 <= page_views.tombstones <= 80 and 60 <= page_views.late <= 200
    assert set(page_views.broken) == {"bad_magic_byte", "unknown_schema_id", "truncated_payload", "garbage_payload"}
    assert "shop.page_views" in str(summary) and "v2=" in str(summary)


def test_high_watermarks_equal_the_last_offset_plus_one(demo, fresh_broker):
    _, consumed = demo
    consumer = consumer_for(fresh_broker.bootstrap_servers)
    try:
        for topic in DEMO_TOPICS:
            for partition in range(3):
                last = max(m.offset() for m in consumed[topic] if m.partition() == partition)
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
                assert high == last + 1, f"{topic}[{partition}]"
    finally:
        consumer.close()


def test_records_are_in_their_hours_in_kafka_time_order_with_a_schema_change_mid_stream(demo, catalog):
    summary, consumed = demo
    start, end = DEMO_HOURS[0], DEMO_HOURS[-1] + timedelta(hours=1)
    for topic in DEMO_TOPICS:
        for partition in range(3):
            stamps = [m.timestamp()[1] for m in consumed[topic] if m.partition() == partition]
            assert stamps == sorted(stamps)
            assert start.timestamp() * 1000 <= stamps[0] and stamps[-1] < end.timestamp() * 1000
        closing = [m for m in consumed[topic] if m.timestamp()[1] == end.timestamp() * 1000 - 1]
        assert len(closing) == 3 and all(classify(catalog, topic, m) == "valid" for m in closing)
    versions = [
        (m.timestamp()[1], decode(catalog, PAGE_VIEWS_TOPIC, m.value())[0])
        for m in consumed[PAGE_VIEWS_TOPIC] if classify(catalog, PAGE_VIEWS_TOPIC, m) == "valid"
    ]
    last_v1 = max(stamp for stamp, version in versions if version == 1)
    first_v2 = min(stamp for stamp, version in versions if version == 2)
    assert last_v1 <= first_v2
    assert summary[PAGE_VIEWS_TOPIC].by_schema_version[1] > 1900 and summary[PAGE_VIEWS_TOPIC].by_schema_version[2] > 1900


def test_page_views_decode_with_their_event_time_seconds_or_hours_before_kafka_time(demo, catalog):
    _summary, consumed = demo
    late = 0
    for message in consumed[PAGE_VIEWS_TOPIC][::7]:
        if classify(catalog, PAGE_VIEWS_TOPIC, message) != "valid":
            continue
        version, view = decode(catalog, PAGE_VIEWS_TOPIC, message.value())
        lag = message.timestamp()[1] - view["occurred_at"].timestamp() * 1000
        assert 0 < lag < 10_000 or 3_600_000 <= lag < 3 * 3_600_000
        late += lag >= 3_600_000
        assert view["url"].startswith("https://shop.example.com/")
        assert message.key() == (view["user_id"].encode() if view["user_id"] else None)
        assert view["client"]["user_agent"].startswith("Mozilla/5.0")
        assert ("session_id" in view) == (version == 2) and ("experiments" in view) == (version == 2)
    assert late > 0


def test_transactions_decode_with_decimals_enums_nested_records_and_unions(demo, catalog):
    _, consumed = demo
    risk_types = set()
    for message in consumed[TRANSACTIONS_TOPIC][::5]:
        if classify(catalog, TRANSACTIONS_TOPIC, message) != "valid":
            continue
        _, payment = decode(catalog, TRANSACTIONS_TOPIC, message.value())
        assert message.key() == str(payment["customer_id"]).encode()
        assert payment["amount"].as_tuple().exponent == -2
        assert payment["amount"] == sum(item["unit_price"] * item["quantity"] for item in payment["line_items"])
        assert payment["fee"] is None or payment["fee"].as_tuple().exponent == -4
        assert payment["currency"] in {"EUR", "USD", "GBP", "SEK"}
        assert payment["status"] in {"AUTHORIZED", "CAPTURED", "DECLINED", "REFUNDED"}
        assert isinstance(payment["card"]["expiry"], date) and len(payment["card"]["pan_last4"]) == 4
        assert all(item["sku"].startswith("SKU-") and isinstance(item["unit_price"], Decimal) for item in payment["line_items"])
        assert payment["attributes"]["channel"] in {"web", "app", "pos"}
        assert payment["authorized_at"].tzinfo is not None
        assert payment["settlement_time"] is None or isinstance(payment["settlement_time"], time_of_day)
        assert payment["terminal_signature"] is None or len(payment["terminal_signature"]) == 32
        risk_types.add(type(payment["risk_score"]))
    assert risk_types == {type(None), float, str}


def test_customer_changes_are_debezium_events_keyed_by_their_row_each_delete_followed_by_its_tombstone(demo, catalog):
    _, consumed = demo
    key_schema = fastavro.parse_schema(catalog.by_topic(CUSTOMERS_TOPIC).key_schema.schema)
    live: set[int] = set()
    awaiting_tombstone: dict[int, int] = {}  # partition → the customer whose delete was the partition's last change
    operations = set()
    for message in sorted(consumed[CUSTOMERS_TOPIC], key=lambda m: m.timestamp()[1]):
        customer = fastavro.schemaless_reader(io.BytesIO(split_confluent(message.key())[1]), key_schema, None)["customer_id"]
        if message.value() is None:
            assert awaiting_tombstone.pop(message.partition(), None) == customer, "a tombstone follows its delete"
            continue
        if classify(catalog, CUSTOMERS_TOPIC, message) != "valid":
            continue
        _, change = decode(catalog, CUSTOMERS_TOPIC, message.value())
        operations.add(change["op"])
        row = change["after"] or change["before"]
        assert row["customer_id"] == customer and change["source"]["ts_ms"] <= message.timestamp()[1]
        assert (customer in live) == (change["op"] != "c"), f"{change['op']} of customer {customer}"
        if change["op"] == "d":
            live.discard(customer)
            awaiting_tombstone[message.partition()] = customer
        else:
            live.add(customer)
    assert operations == {"c", "u", "d"} and len(live) > 100


def test_demo_traffic_is_deterministic_for_a_seed(catalog):
    spec = catalog.by_topic(TRANSACTIONS_TOPIC)
    first = plan_topic(spec, DEMO_HOURS, 50, 3, seed=7)
    assert plan_topic(spec, DEMO_HOURS, 50, 3, seed=7) == first
    assert plan_topic(spec, DEMO_HOURS, 50, 3, seed=8) != first


def test_last_closed_hours_are_the_whole_hours_before_the_current_one():
    now = datetime(2026, 11, 2, 13, 27, tzinfo=UTC)
    assert last_closed_hours(2, now) == [datetime(2026, 11, 2, 11, tzinfo=UTC), datetime(2026, 11, 2, 12, tzinfo=UTC)]


def test_wait_for_port_names_the_address_it_gave_up_on():
    port = free_port()
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        wait_for_port("127.0.0.1", port, timeout=0.2)


# --- `make ui`, `make broker` and `make demo`: their ports, and the instance the UI serves ----------------------------

def dry_run(*arguments: str) -> str:
    """What `make` would run, without running it."""
    done = subprocess.run(["make", "-n", *arguments], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_ui_and_the_broker_take_their_ports_from_one_variable_each():
    """`make ui PORT=N` serves the UI on N, `make broker BROKER_PORT=M` listens on M; unset, 3000 and 9092."""
    assert "-m dev_services.ui -p 3123\n" in dry_run("ui", "PORT=3123")
    assert "-m dev_services.ui -p 3000\n" in dry_run("ui")
    assert "-m dev_services.tansu start --port 19093\n" in dry_run("broker", "BROKER_PORT=19093")
    assert "-m dev_services.tansu start --port 9092\n" in dry_run("broker")


def test_the_ui_serves_the_demos_dagster_home_whatever_the_environment_says(tmp_path):
    """Given the settings a demo wrote, its Dagster home among them; when `dev_services.ui` makes its environment from a
    shell without DAGSTER_HOME, or with another one; then `dagster dev` runs on the demo's home (never on a temporary
    instance of its own, which shows the demo as never materialized and ignores the instance's limits), on the port
    asked, with the repository's workspace whatever the working directory."""
    from dev_services.demo import write_demo_env
    from dev_services.ui import dagster_dev_arguments, ui_environment

    env_file = tmp_path / "demo.env"
    write_demo_env(env_file, {"DAGSTER_HOME": str(tmp_path / "demo_home"), "PII_HMAC_KEY": "k"})

    assert ui_environment({"PATH": "/bin"}, env_file)["DAGSTER_HOME"] == str(tmp_path / "demo_home")
    assert ui_environment({"DAGSTER_HOME": str(tmp_path / "other")}, env_file)["DAGSTER_HOME"] == str(tmp_path / "demo_home")
    assert ui_environment({}, tmp_path / "no_demo.env")["DAGSTER_HOME"] == str(Path(".dagster_home").resolve())
    assert dagster_dev_arguments(["-p", "3123"]) == ["-p", "3123", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1"]
    assert dagster_dev_arguments([]) == ["-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", "3000"]


def test_dagster_dev_started_in_the_repository_finds_no_instance_file_it_would_call_unused():
    """`dagster dev` warns at every start when the folder it starts in holds a dagster.yaml that is not $DAGSTER_HOME's
    (Dagster's `dev` command); the instance's settings live in deploy/dagster.yaml, which `deploy.instance` renders
    into $DAGSTER_HOME, as the Makefile, the demo and the image's entrypoint run it."""
    from deploy.instance import REPOSITORY_INSTANCE_FILE

    assert not (REPO / "dagster.yaml").exists() and not (REPO / "dagster.yml").exists()
    assert REPOSITORY_INSTANCE_FILE == REPO / "deploy" / "dagster.yaml" and REPOSITORY_INSTANCE_FILE.exists()


# --- `make produce TABLE=…`: test records for a catalog entry ---------------------------------------------------------

@pytest.mark.parametrize("table", ["shop/page_views", "payments/transactions", "shop/orders", "shop/cart_opens",
                                   "archive/shop_cart_events", "crm/customers"])
def test_make_produce_writes_records_of_a_catalog_entry_that_land_as_its_rows(table, broker, catalog, tmp_path):
    """Given a catalog entry of each shape (Avro with nested records and event time, Avro by Kafka time with decimals
    and unions, Protobuf, routed JSON, raw, a keyed change topic); when `dev_services.produce` writes its test records
    into the last hour the clock has closed, then landing that hour makes a row of every one: no dead letter."""
    from dev_services.produce import hours_to_fill, produce_test_records
    from tests.landing_fixtures import in_this_process, land, landing_settings, unique_topic_name

    database, name = table.split("/")
    spec = catalog.by_name(database, name).model_copy(update={"topic": unique_topic_name()})
    hours = hours_to_fill(spec, 1, datetime.now(UTC))

    produced = produce_test_records(spec, broker.bootstrap_servers, hours, per_hour=30, partitions=2)

    [result] = land(spec, hours, landing_settings(str(tmp_path / "lake"), broker.bootstrap_servers), in_this_process)
    counts = result.manifest.counts
    assert produced == 30 and (counts.rows, counts.dead_letters) == (30, 0), result.manifest.dead_letter_causes


def test_make_produce_names_the_entry_it_lacks_and_runs_as_the_makefile_says():
    assert "-m dev_services.produce billing/invoices --records 5\n" in dry_run("produce", "TABLE=billing/invoices",
                                                                             "ARGS=--records 5")
    missing = subprocess.run([sys.executable, "-m", "dev_services.produce", "nowhere/none"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no topic nowhere/none in the catalog at schema_catalog" in missing.stderr


# --- `make demo` on a catalog holding a newcomer's own entries ------------------------------------------------------

def test_the_demo_lands_what_it_has_records_for_and_says_what_it_did_not_land(tmp_path):
    """Given a catalog of one sample table, the README's example entry (a newcomer's, which the demo has no records
    for) and an entry broken by a typo; when `make demo` runs on it without DAGSTER_HOME in its environment; then it
    lands, compacts, registers and queries the sample table, says it did not land the other two and why (with the
    command that makes records for the newcomer's), and exits 0; the settings it leaves for `make ui` name the Dagster
    home it recorded into, where its runs are runs of the layer jobs of the code location `make ui` serves (the UI's
    page of the `landing` job listed none of them)."""
    from dagster import DagsterInstance, RunsFilter
    from dagster._core.storage.tags import REPOSITORY_LABEL_TAG

    from dev_services.demo import DEMO_ENV_FILE
    from dev_services.ui import read_env_file
    from tests.readme_entry import write_readme_entry

    catalog = tmp_path / "catalog"
    (catalog / "payments").mkdir(parents=True)
    shutil.copytree(REPO / "schema_catalog" / "payments" / "transactions", catalog / "payments" / "transactions")
    write_readme_entry(catalog)
    (catalog / "broken" / "entry").mkdir(parents=True)
    (catalog / "broken" / "entry" / "topic.yaml").write_text("topic: broken.entry\nowner: team-x\n")
    env = {name: value for name, value in os.environ.items()
           if name not in ("DAGSTER_HOME", "LAKE_ROOT", "TABLE_FORMAT", "PII_HMAC_KEY", "SPARK_MASTER")
           and not name.startswith(("KAFKA_", "DAGSTER_PG_"))}
    env.update({"SCHEMA_CATALOG_DIR": str(catalog), "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
                "SPARK_LOCAL_IP": "127.0.0.1"})
    try:
        demo = subprocess.run([sys.executable, "-m", "dev_services.demo"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=900)
    finally:
        stop_detached(tmp_path / ".lake" / "broker" / PID_FILE_NAME)

    out = demo.stdout
    assert demo.returncode == 0, out[-4000:] + demo.stderr[-4000:]
    assert "Landing raw/payments/transactions" in out and "Landing raw/billing/invoices" not in out
    assert ("billing/invoices: the demo produces traffic for its sample topics only, not billing.invoices; "
            "`make produce TABLE=billing/invoices` produces test records for it") in out
    assert "broken/entry: its entry is rejected, " in out and "broken/entry/topic.yaml: missing required key" in out
    assert "payments.transactions:" in out and "catalog matches storage" in out and "FAILED" not in out
    settings = read_env_file(tmp_path / DEMO_ENV_FILE)
    assert settings["DAGSTER_HOME"] == str((tmp_path / ".dagster_home").resolve())
    assert (tmp_path / ".dagster_home" / "dagster.yaml").exists()
    # The UI lists a job's runs by its name and the code location they record: `make ui`'s (workspace.yaml).
    with DagsterInstance.from_config(settings["DAGSTER_HOME"]) as instance:
        runs = instance.get_runs()
        attributed = instance.get_runs(RunsFilter(tags={REPOSITORY_LABEL_TAG: "__repository__@kafka_lake"}))
    assert {run.job_name for run in runs} == {"landing", "compaction", "registration", "retention"}
    assert sorted(run.run_id for run in attributed) == sorted(run.run_id for run in runs), "each on its job's page"
    assert all(run.tags["topic"] == "payments.transactions" for run in runs), "the sensors' tags, one topic here"
