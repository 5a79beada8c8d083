"""`python -m deploy.metrics`: what a scrape serves equals what was produced and landed, read from the manifests of a
real lake (local and on the S3 server) and the log ends of the real broker; a scrape reads only the manifests new since
the one before; the image runs the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from deploy.metrics import METRICS, serve
from dev_services.ports import LOOPBACK, free_port, listening_addresses
from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.cluster import KafkaCluster
from kafka_lake.kafka.log import KafkaLog, consumer_config
from kafka_lake.lake import layout
from kafka_lake.lake.manifests import ManifestChanges
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.metrics import PlatformMeasures
from kafka_lake.settings import PlatformSettings
from kafka_lake.upkeep.retention import apply_retention
from tests.conftest import REPO
from tests.landing_fixtures import (
    RAW_HOURS,
    Traffic,
    in_this_process,
    land,
    landing_settings,
    topic_with_traffic,
    write_test_topic,
)
from tests.test_deployment import dockerfile_instruction

NOW = datetime(2026, 11, 1, 16, 25, tzinfo=timezone.utc)


def platform_settings(catalog, lake_root: str, broker) -> PlatformSettings:
    return PlatformSettings(kafka_bootstrap_servers=broker.bootstrap_servers, schema_catalog_dir=str(catalog),
                            lake_root=lake_root)


@contextlib.contextmanager
def metrics_server(settings: PlatformSettings, clock=lambda: NOW):
    measures = PlatformMeasures(settings, KafkaCluster(consumer_config(settings.kafka_bootstrap_servers)))
    server = serve(measures, LOOPBACK, 0, clock)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_port}", measures
    finally:
        server.shutdown()
        server.server_close()
        measures.close()


def scrape_text(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=60) as response:
        return response.read().decode()


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of `/metrics`: (name, labels) → value."""
    text = scrape_text(url)
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def table_labels(topic) -> frozenset:
    return frozenset({"database": topic.database, "table": topic.table}.items())


def produced_in(traffic: Traffic, hours: list[KafkaHour]) -> Counter:
    """What the records of the Kafka hours became: rows, dead letters and tombstones, as produced."""
    counts: Counter = Counter()
    for item in traffic.produced:
        if any(hour.start_ms <= item.timestamp_ms < hour.end_ms for hour in hours):
            counts["row" if item.kind == "row" else "tombstone" if item.kind == "tombstone" else "dead"] += 1
    return counts


def waiting_after(traffic: Traffic, hour: KafkaHour) -> dict[int, int]:
    """Per partition, the records produced after the hour: the offsets past its end."""
    waiting: Counter = Counter({p.partition: 0 for p in traffic.produced})
    waiting.update(p.partition for p in traffic.produced if p.timestamp_ms >= hour.end_ms)
    return dict(waiting)


@pytest.fixture
def landed_two_hours(broker, tmp_path, lake_root):
    """Given a topic with records over four Kafka hours, of which the first two are landed."""
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog")
    landing = landing_settings(lake_root, broker.bootstrap_servers)
    hours = [KafkaHour(hour) for hour in RAW_HOURS[:2]]
    land(topic, hours, landing, in_this_process)
    return topic, traffic, hours, landing, platform_settings(tmp_path / "catalog", lake_root, broker)


def test_a_scrape_serves_the_totals_of_the_landed_hours_and_the_lag_behind_the_log_ends(landed_two_hours):
    topic, traffic, hours, _, settings = landed_two_hours
    produced = produced_in(traffic, hours)
    newest = hours[-1]

    with metrics_server(settings) as (url, _):
        samples = scrape(url)

    table = table_labels(topic)
    assert samples["kafka_lake_landed_rows", table] == produced["row"] > 0
    assert samples["kafka_lake_dead_letters", table] == produced["dead"] > 0
    assert samples["kafka_lake_landed_hour_manifests", table] == 2
    assert samples["kafka_lake_newest_landed_hour_timestamp_seconds", table] == newest.start.timestamp()
    assert samples["kafka_lake_lag_seconds", table] == (NOW - newest.end).total_seconds()
    lags = {dict(labels)["partition"]: value for (name, labels), value in samples.items()
            if name == "kafka_lake_lag_records" and dict(labels)["topic"] == topic.topic}
    assert lags == {str(partition): count for partition, count in waiting_after(traffic, newest).items()}
    assert all(lags.values())
    assert samples["kafka_lake_catalog_rejected_entries", frozenset()] == 0
    assert samples["kafka_lake_brokers_up", frozenset()] == 1


def test_lag_in_records_counts_to_the_log_end_as_read_not_as_a_broker_under_reports_it(landed_two_hours, broker):
    """Given records produced after the landed hours in one batch of many, which Tansu's high watermark under-reports
    (it answers the last batch's first offset + 1, TESTING.md); then the lag in records counts every one of them, as
    the landing would read them: the log end verified by reading at it, not the broker's answer."""
    topic, traffic, hours, _, settings = landed_two_hours
    partition, more = 0, 40
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 200})
    stamp = int(traffic.produced[-1].timestamp_ms)
    for n in range(more):
        producer.produce(topic.topic, value=b"not landed yet", partition=partition, timestamp=stamp + n)
    producer.flush(30)
    with KafkaLog(consumer_config(broker.bootstrap_servers), topic.topic) as log:
        read = log.log_bounds(partition)
    assert read.reported_end < read.end, "the broker reports the log end exactly: this test shows nothing"

    with metrics_server(settings) as (url, _):
        samples = scrape(url)

    lag = samples["kafka_lake_lag_records", frozenset({**dict(table_labels(topic)), "topic": topic.topic,
                                                        "partition": str(partition)}.items())]
    assert lag == waiting_after(traffic, hours[-1])[partition] + more


def test_a_scrape_reads_at_the_log_ends_only_of_partitions_whose_reported_end_moved(landed_two_hours, broker,
                                                                                     monkeypatch):
    """Confirming an end costs a read: the first scrape reads at every partition's, the next none (no log grew), and
    after records are produced to one partition, that one alone, whose lag then counts them."""
    topic, traffic, hours, _, settings = landed_two_hours
    asked: list[set] = []
    confirmed_ends = KafkaCluster.confirmed_ends

    def counting(cluster, reported, *args):
        asked.append({key for key in reported if key[0] == topic.topic})
        return confirmed_ends(cluster, reported, *args)

    monkeypatch.setattr(KafkaCluster, "confirmed_ends", counting)
    with metrics_server(settings) as (url, _):
        scrape(url)
        scrape(url)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for n in range(3):
            producer.produce(topic.topic, value=b"later", partition=1, timestamp=traffic.produced[-1].timestamp_ms + n)
        producer.flush(30)
        samples = scrape(url)

    partitions = {p.partition for p in traffic.produced}
    assert asked == [{(topic.topic, p) for p in partitions}, {(topic.topic, 1)}], "the second scrape read none"
    lag = samples["kafka_lake_lag_records", frozenset({**dict(table_labels(topic)), "topic": topic.topic,
                                                        "partition": "1"}.items())]
    assert lag == waiting_after(traffic, hours[-1])[1] + 3


def test_log_ends_a_scrape_had_no_time_to_confirm_count_to_the_brokers_answer_and_are_confirmed_next(broker):
    """Given a partition whose last batch holds several records (Tansu under-reports its end); when a scrape's time for
    reading ends is spent, then its end is the broker's answer, a lower bound; the next scrape with time confirms it."""
    from kafka_lake.metrics import ConfirmedEnds

    name = f"e2e.ends.{time.monotonic_ns()}"
    broker.create_topic(name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 200})
    for _ in range(10):
        producer.produce(name, value=b"x", partition=0)
    producer.flush(30)
    cluster = KafkaCluster(consumer_config(broker.bootstrap_servers))
    [reported] = cluster.log_ends({name: [0]})[0].values()

    hurried, _ = ConfirmedEnds(cluster, budget_s=0.0).read({name: [0]})
    ends = ConfirmedEnds(cluster)
    confirmed, _ = ends.read({name: [0]})

    assert reported < 10, "the broker reports the end exactly: this test shows nothing"
    assert hurried == {(name, 0): reported} and confirmed == {(name, 0): 10}
    assert ends.read({name: [0]})[0] == {(name, 0): 10}, "kept while the answer does not move"


def test_each_scrape_reads_only_the_manifests_landed_since_the_one_before(landed_two_hours, monkeypatch):
    """Given two scrapes with nothing landed between them, the second reads no manifest; once a third hour lands,
    the next scrape reads that hour's manifest alone and its totals hold all three hours."""
    topic, traffic, hours, landing, settings = landed_two_hours
    manifests_read: list[str] = []
    read_bytes = LakeStorage.read_bytes

    def counting(storage, relative):
        if relative.startswith(layout.MANIFESTS_PREFIX):
            manifests_read.append(relative)
        return read_bytes(storage, relative)

    monkeypatch.setattr(LakeStorage, "read_bytes", counting)
    with metrics_server(settings) as (url, _):
        scrape(url)
        assert len(manifests_read) == 2
        manifests_read.clear()
        scrape(url)
        assert manifests_read == []

        third = KafkaHour(RAW_HOURS[2])
        land(topic, [third], landing, in_this_process)
        manifests_read.clear()
        samples = scrape(url)

    assert manifests_read == [layout.manifest_path(topic.database, topic.table, third)]
    assert samples["kafka_lake_landed_rows", table_labels(topic)] == produced_in(traffic, [*hours, third])["row"]
    assert samples["kafka_lake_landed_hour_manifests", table_labels(topic)] == 3


def test_a_table_whose_next_hour_cannot_have_closed_is_not_listed_until_it_can(landed_two_hours, monkeypatch):
    """An hour lands once closed, at the earliest `record_grace_minutes` after its end: before that moment for the hour
    after the newest landed one, a scrape asks storage nothing about a table the change log does not name (here the
    third hour is landed by a writer that kept no change log, as releases before it did); from it on, the hour shows."""
    topic, _, _, landing, settings = landed_two_hours
    listed: list[str] = []
    list_names = LakeStorage.list_names

    def counting(storage, directory, *args, **kwargs):
        if not directory.startswith(layout.MANIFEST_CHANGES_PREFIX):
            listed.append(directory)
        return list_names(storage, directory, *args, **kwargs)

    monkeypatch.setattr(LakeStorage, "list_names", counting)
    third = KafkaHour(RAW_HOURS[2])
    closable = third.end + timedelta(minutes=topic.record_grace_minutes)
    moments = iter([NOW, closable - timedelta(seconds=1), closable])
    with metrics_server(settings, clock=lambda: next(moments)) as (url, _):
        scrape(url)  # the first reads every landed hour, up to the second
        land(topic, [third], landing, in_this_process)
        LakeStorage(settings.lake_root).delete_folder(layout.MANIFEST_CHANGES_PREFIX)
        listed.clear()
        early = scrape(url)
        assert listed == []
        due = scrape(url)

    assert listed == [layout.manifest_prefix(topic.database, topic.table)]
    assert early["kafka_lake_landed_hour_manifests", table_labels(topic)] == 2
    assert due["kafka_lake_landed_hour_manifests", table_labels(topic)] == 3


def test_an_hour_landed_again_or_behind_the_newest_shows_at_the_next_scrape(broker, tmp_path, monkeypatch):
    """Given hours 1 and 3 landed while the catalog lacked version 2 (hour 1's records of it dead letters) and a scrape
    of them; when hour 1 is landed again with version 2 (after `add_topic --update`) and hour 2, behind the newest, is
    landed; then the very next scrape shows both, as the manifests now say, each hour counted once: the lake's log of
    manifest changes names the hours, and the table is counted again without waiting for a recount."""
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog")
    lake_root = str(tmp_path / "lake")
    landing = landing_settings(lake_root, broker.bootstrap_servers)
    first, second, third = (KafkaHour(hour) for hour in RAW_HOURS[1:4])
    without_v2 = topic.model_copy(update={"schema_versions": topic.schema_versions[:1]})
    land(without_v2, [first, third], landing, in_this_process)
    changes_listed: list[str] = []
    list_names = LakeStorage.list_names

    def counting(storage, directory, *args, **kwargs):
        if directory.startswith(layout.MANIFEST_CHANGES_PREFIX):
            changes_listed.append(directory)
        return list_names(storage, directory, *args, **kwargs)

    monkeypatch.setattr(LakeStorage, "list_names", counting)
    with metrics_server(platform_settings(tmp_path / "catalog", lake_root, broker)) as (url, _):
        before = scrape(url)
        land(topic, [first, second], landing, in_this_process)
        changes_listed.clear()
        after = scrape(url)

    table = table_labels(topic)
    produced = produced_in(traffic, [first, second, third])
    v2_in_third = sum(1 for item in traffic.produced if item.kind == "row" and item.version == 2
                      and third.start_ms <= item.timestamp_ms < third.end_ms)  # still dead letters: not landed again
    assert before["kafka_lake_landed_hour_manifests", table] == 2
    assert before["kafka_lake_landed_rows", table] < produced_in(traffic, [first, third])["row"]
    assert after["kafka_lake_landed_hour_manifests", table] == 3
    assert after["kafka_lake_landed_rows", table] == produced["row"] - v2_in_third
    assert after["kafka_lake_dead_letters", table] == produced["dead"] + v2_in_third
    assert len(changes_listed) == 1, "one listing of the change log a scrape"


def test_the_change_log_is_pruned_by_retention_to_its_last_days(tmp_path, lake_root):
    """Given changes recorded over five days; when a retention run applies on the fifth; then the days older than
    `ManifestChanges.KEPT` are gone and the newer ones stay (locally and on the S3 server)."""
    topic = write_test_topic(tmp_path / "catalog", "e2e.pruned")
    storage = LakeStorage(lake_root)
    changes = ManifestChanges(storage)
    now = datetime(2026, 11, 5, 3, 17, tzinfo=timezone.utc)
    for days_ago in range(5):
        changes.record(topic.database, topic.table, KafkaHour(RAW_HOURS[0]), at=now - timedelta(days=days_ago))

    apply_retention(storage, topic, now, None, lambda tasks: [], lambda manifests: None, lambda partitions: None)

    kept = {change.at.date() for change in changes.since(now - timedelta(days=10))}
    assert kept == {(now - timedelta(days=n)).date() for n in range(3)}


def test_a_recount_shows_an_hour_relanded_with_other_counts(broker, tmp_path):
    """Given an hour landed while the catalog lacked version 2 (its records dead letters), then landed again with
    it: the scrape after a recount shows them as rows, as the manifest now says."""
    topic, traffic = topic_with_traffic(broker, tmp_path / "catalog")
    lake_root = str(tmp_path / "lake")
    landing = landing_settings(lake_root, broker.bootstrap_servers)
    hour = KafkaHour(RAW_HOURS[1])  # holds records of both versions
    without_v2 = topic.model_copy(update={"schema_versions": topic.schema_versions[:1]})
    land(without_v2, [hour], landing, in_this_process)
    produced = produced_in(traffic, [hour])

    with metrics_server(platform_settings(tmp_path / "catalog", lake_root, broker)) as (url, measures):
        before = scrape(url)
        land(topic, [hour], landing, in_this_process)
        measures.recount()
        after = scrape(url)

    table = table_labels(topic)
    assert before["kafka_lake_landed_rows", table] < produced["row"]
    assert before["kafka_lake_dead_letters", table] > produced["dead"]
    assert after["kafka_lake_landed_rows", table] == produced["row"]
    assert after["kafka_lake_dead_letters", table] == produced["dead"]


def test_rejected_catalog_entries_are_counted_at_each_scrape_and_healthz_answers_ok(broker, tmp_path):
    topic, _ = topic_with_traffic(broker, tmp_path / "catalog")
    settings = platform_settings(tmp_path / "catalog", str(tmp_path / "lake"), broker)
    broken = tmp_path / "catalog" / "e2e" / "broken"

    with metrics_server(settings) as (url, _):
        assert scrape(url)["kafka_lake_catalog_rejected_entries", frozenset()] == 0
        broken.mkdir()
        (broken / "topic.yaml").write_text("topic: e2e.broken\nowner: team-test\n")
        rejected = scrape(url)
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
            health = (response.status, response.read())
        with pytest.raises(urllib.error.HTTPError) as elsewhere:
            urllib.request.urlopen(f"{url}/other", timeout=10)

    assert rejected["kafka_lake_catalog_rejected_entries", frozenset()] == 1
    assert rejected["kafka_lake_landed_hour_manifests", table_labels(topic)] == 0  # never landed: no hour, no lag in seconds
    assert ("kafka_lake_lag_seconds", table_labels(topic)) not in rejected
    assert health == (200, b"ok\n")
    assert elsewhere.value.code == 404


def test_every_metric_of_the_contract_is_served_with_its_labels(landed_two_hours):
    _, _, _, _, settings = landed_two_hours
    with metrics_server(settings) as (url, _):
        samples = scrape(url)

    served = {name: set(dict(labels)) for name, labels in samples}
    contract = {
        "kafka_lake_lag_records": {"database", "table", "topic", "partition"},
        "kafka_lake_lag_seconds": {"database", "table"},
        "kafka_lake_landed_rows": {"database", "table"},
        "kafka_lake_dead_letters": {"database", "table"},
        "kafka_lake_newest_landed_hour_timestamp_seconds": {"database", "table"},
        "kafka_lake_catalog_rejected_entries": set(),
    }
    assert {name: served.get(name) for name in contract} == contract
    assert set(served) == set(METRICS)


@contextlib.contextmanager
def metrics_process(command: list[str], env: dict[str, str], port: int):
    """`command` run as a process of its own, yielded once `/healthz` answers on loopback; stopped by SIGTERM, as a
    container is."""
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://{LOOPBACK}:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
                    assert response.read() == b"ok\n"
                    break
            except (urllib.error.URLError, ConnectionError):
                assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
                assert time.monotonic() < deadline, "the metrics server did not answer within 60 s"
                time.sleep(0.3)
        yield process, url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_the_image_runs_the_metrics_server_beside_the_daemon(broker, tmp_path):
    """The Dockerfile's ENTRYPOINT with `python -m deploy.metrics --port P` (no Docker engine runs here: the
    entrypoint runs on this machine, as tests/test_deployment.py does): /healthz answers, /metrics serves the catalog,
    and no Dagster instance is rendered for it (it needs none)."""
    topic_with_traffic(broker, tmp_path / "catalog")
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home"), "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"),
           "LAKE_ROOT": str(tmp_path / "lake"), "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    (tmp_path / "dagster_home").mkdir()
    command = [*dockerfile_instruction("ENTRYPOINT"), "python", "-m", "deploy.metrics", "--port", str(port),
               "--host", LOOPBACK]
    with metrics_process(command, env, port) as (process, url):
        samples = scrape(url)

    assert samples["kafka_lake_landed_hour_manifests", frozenset({"database": "e2e", "table": "orders"}.items())] == 0
    assert process.returncode == 0, "SIGTERM ends the server cleanly"
    assert not (tmp_path / "dagster_home" / "dagster.yaml").exists()


@pytest.mark.parametrize("host, listens_on", [([], LOOPBACK), (["--host", "0.0.0.0"], "0.0.0.0")],
                         ids=["default", "host-given"])
def test_the_metrics_server_listens_on_loopback_unless_given_a_host(broker, tmp_path, host, listens_on):
    """Given `python -m deploy.metrics --port P` as OPERATING_METRICS.md starts it; then the kernel has it listening on
    127.0.0.1:P alone, no wildcard address, IPv4 or IPv6; and `--host 0.0.0.0`, as a container is started, widens it."""
    write_test_topic(tmp_path / "catalog", "dev.listen")
    port = free_port()
    env = {**os.environ, "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"), "LAKE_ROOT": str(tmp_path / "lake"),
           "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers}
    command = [sys.executable, "-m", "deploy.metrics", "--port", str(port), *host]
    with metrics_process(command, env, port) as (process, _):
        listening = listening_addresses(process.pid)

    assert listening == {(listens_on, port)}


def test_lag_seconds_is_measured_against_the_clock_of_each_scrape(landed_two_hours):
    _, _, hours, _, settings = landed_two_hours
    moments = iter([NOW, NOW + timedelta(minutes=30)])
    with metrics_server(settings, clock=lambda: next(moments)) as (url, _):
        first, second = scrape(url), scrape(url)

    lag = {name: value for (name, _), value in first.items() if name == "kafka_lake_lag_seconds"}
    later = {name: value for (name, _), value in second.items() if name == "kafka_lake_lag_seconds"}
    assert later["kafka_lake_lag_seconds"] - lag["kafka_lake_lag_seconds"] == 1800
    assert lag["kafka_lake_lag_seconds"] == (NOW - hours[-1].end).total_seconds()


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Prometheus' own linter, from Debian's `prometheus` package (`make test` installs it as root)."""
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("no promtool on PATH: install it with 'sudo apt-get install -y prometheus' (make test does as root)")
    return subprocess.run([found, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_a_scrape_and_the_alert_rules_lint_clean_with_promtool(landed_two_hours):
    """Given a scrape of a table with landed hours and lag; then `promtool check metrics` finds nothing to say about
    any name, unit, type or help text, and `promtool check rules` accepts the alert rules shipped in deploy/."""
    *_, settings = landed_two_hours
    with metrics_server(settings) as (url, _):
        text = scrape_text(url)

    linted = promtool("check", "metrics", stdin=text)
    rules = promtool("check", "rules", str(REPO / "deploy" / "prometheus-alerts.yaml"))

    assert "kafka_lake_lag_records{" in text
    assert (linted.returncode, linted.stdout + linted.stderr) == (0, "")
    assert rules.returncode == 0, rules.stdout + rules.stderr


# --- The dashboard and the alert rules shipped in deploy/ -------------------------------------------------------

METRIC_NAME = re.compile(r"\bkafka_lake_[a-z_]+\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHERS = re.compile(r"\{([^{}]*)\}")
TEMPLATE_LABEL = re.compile(r"\{\{\s*\$labels\.([A-Za-z_]+)\s*\}\}|\{\{([A-Za-z_]+)\}\}")


def dashboard_queries(node) -> list[tuple[str, str]]:
    """(expr, legend) of every panel target and every templating query of a Grafana dashboard."""
    found = []
    if isinstance(node, dict):
        if "expr" in node:
            found.append((node["expr"], node.get("legendFormat", "")))
        elif isinstance(node.get("query"), str) and "kafka_lake_" in node["query"]:
            found.append((node["query"], ""))
        for value in node.values():
            found += dashboard_queries(value)
    elif isinstance(node, list):
        for value in node:
            found += dashboard_queries(value)
    return found


def check_query(expr: str, shown: str, served: dict[str, set[str]]) -> list[str]:
    """What is wrong with a query against what a scrape serves: a metric it does not serve, a label its metrics do not
    carry (in a matcher or a grouping), or a label the text shown names that the query's result does not carry."""
    names = METRIC_NAME.findall(expr)
    if not names:
        return [f"{expr}: names no kafka_lake_ metric"]
    problems = [f"{expr}: {name} is not served" for name in names if name not in served]
    labels = set().union(*(served.get(name, set()) for name in names))
    grouped = [set(map(str.strip, group.split(","))) - {""} for group in GROUPING.findall(expr)]
    matched = {re.split(r"[=!~]", part, maxsplit=1)[0].strip() for body in MATCHERS.findall(expr)
               for part in body.split(",") if part.strip()}
    problems += [f"{expr}: label {label} is on none of {names}" for label in set().union(*grouped, matched) - labels]
    result = grouped[-1] if grouped else labels
    wanted = {a or b for a, b in TEMPLATE_LABEL.findall(shown)}
    problems += [f"{expr}: {shown!r} shows label {label}, which its result does not carry" for label in wanted - result]
    return problems


@pytest.fixture
def served(landed_two_hours) -> dict[str, set[str]]:
    """Each metric a real scrape serves, with its labels."""
    *_, settings = landed_two_hours
    with metrics_server(settings) as (url, _):
        samples = scrape(url)
    found: dict[str, set[str]] = {}
    for name, labels in samples:
        found.setdefault(name, set()).update(dict(labels))
    return found


def test_the_grafana_dashboard_queries_only_metrics_and_labels_a_scrape_serves(served):
    dashboard = json.loads((REPO / "deploy" / "grafana-dashboard.json").read_text())

    queries = dashboard_queries(dashboard)

    assert len(queries) >= 10
    assert [problem for expr, legend in queries for problem in check_query(expr, legend, served)] == []
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and all(panel["targets"] for panel in dashboard["panels"])
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    used = set(re.findall(r"\$([a-z_]+)", json.dumps(dashboard["panels"])))
    assert used <= variables, used - variables
    assert {"kafka_lake_lag_records", "kafka_lake_lag_seconds", "kafka_lake_landed_rows", "kafka_lake_dead_letters",
            "kafka_lake_catalog_rejected_entries"} <= {name for expr, _ in queries for name in METRIC_NAME.findall(expr)}


def test_the_prometheus_alert_rules_name_only_metrics_and_labels_a_scrape_serves(served):
    rules = yaml.safe_load((REPO / "deploy" / "prometheus-alerts.yaml").read_text())

    [group] = rules["groups"]

    alerts = {rule["alert"]: rule for rule in group["rules"]}
    assert {"KafkaLakeLagRecordsHigh", "KafkaLakeNoHourLanded", "KafkaLakeCatalogEntriesRejected"} <= set(alerts)
    assert len(alerts) == len(group["rules"])
    problems = []
    for rule in group["rules"]:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]
        problems += check_query(rule["expr"], " ".join(rule["annotations"].values()), served)
    assert problems == []


def test_a_scrape_answers_within_its_budget_while_a_first_count_goes_on_and_serves_it_once_done(landed_two_hours,
                                                                                                monkeypatch):
    """A first count of thousands of tables on S3 takes minutes, past Prometheus' scrape timeout: a scrape waits for
    the counting no longer than its budget, leaves out the tables not counted yet (never served as zero, counted in
    `kafka_lake_tables_counting`), and serves them at a later scrape once counted in the background."""
    from kafka_lake.lake import landed_totals

    _, traffic, hours, _, settings = landed_two_hours
    release = threading.Event()
    slow_read = landed_totals.ManifestStore.read

    def held_read(self, hour):
        release.wait(30)
        return slow_read(self, hour)

    monkeypatch.setattr(landed_totals.ManifestStore, "read", held_read)
    measures = PlatformMeasures(settings, KafkaCluster(consumer_config(settings.kafka_bootstrap_servers)),
                                count_budget_s=1.0)
    try:
        started = time.monotonic()
        first = measures.measure(NOW)
        assert time.monotonic() - started < 15, "the scrape waited past its budget"
        assert (first.tables, first.counting) == ((), 1), "not counted yet: left out, not served as zero"
        release.set()
        deadline = time.monotonic() + 30
        while (later := measures.measure(NOW)).counting:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        [table] = later.tables
        assert table.totals.rows == produced_in(traffic, hours)["row"] and table.totals.hours == 2
    finally:
        release.set()
        measures.close()
