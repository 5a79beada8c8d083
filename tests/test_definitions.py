"""The code location: every asset spec snapshotted, topics added by folder, and the CLI of SPEC working."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
from dagster import AssetKey

from kafka_lake.lake.compaction_manifest import read_compaction
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.lake.table_state import storage_partitions
from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.loader import load_catalog
from platform_assets.definitions import build_definitions
from tests.constants import PII_TEST_KEY, REPO
from tests.landing_fixtures import (
    HOURS,
    PARTITIONS,
    RAW_HOURS,
    build_traffic,
    produce,
    unique_topic_name,
    write_test_topic,
)

SNAPSHOT = REPO / "tests" / "snapshots" / "asset_specs.json"


def describe_definitions(catalog_dir) -> dict:
    definitions = build_definitions(load_catalog(catalog_dir), PlatformSettings())
    graph = definitions.resolve_asset_graph()
    described = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        partitions = node.partitions_def
        described[key.to_user_string()] = {
            "group": node.group_name,
            "deps": sorted(dep.to_user_string() for dep in node.parent_keys),
            "partitions": f"{type(partitions).__name__} from {partitions.start.isoformat()} {partitions.timezone}"
            if partitions else None,
            "checks": sorted(check.name for check in node.check_keys),
            "kinds": sorted(node.kinds),
            "pools": sorted(node.pools or []),
            "backfill": str(node.backfill_policy) if node.backfill_policy else None,
            "freshness": repr(node.freshness_policy) if node.freshness_policy else None,
            "layer": node.tags.get("layer"),
            "owners": sorted(node.owners),
            "partitioned_checks": sorted(check.name for check in node.check_keys
                                         if graph.get_check_spec(check).partitions_def is not None),
        }
    described["jobs"] = sorted(job.name for job in definitions.get_repository_def().get_all_jobs())
    described["sensors"] = sorted(s.name for s in definitions.sensors)
    described["schedules"] = sorted(f"{s.name} {s.cron_schedule}" for s in definitions.schedules)
    return described


def test_the_asset_specs_match_the_reviewed_snapshot():
    described = describe_definitions(REPO / "schema_catalog")
    reviewed = json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else None
    if described != reviewed and os.environ.get("UPDATE_SNAPSHOTS"):
        # Rewriting is not passing: the run that rewrites fails, and the next run compares against the review.
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(described, indent=2, sort_keys=True) + "\n")
        pytest.fail(f"{SNAPSHOT} rewritten: review it with `git diff`, then rerun without UPDATE_SNAPSHOTS")
    assert described == reviewed, snapshot_differs(described, reviewed or {})


def snapshot_differs(described: dict, reviewed: dict) -> str:
    """What changed against the reviewed snapshot, and how to record it when it changed on purpose (a catalog entry
    added by the README's four steps changes it)."""
    added = sorted(described.keys() - reviewed.keys())
    removed = sorted(reviewed.keys() - described.keys())
    changed = sorted(key for key in described.keys() & reviewed.keys() if described[key] != reviewed[key])
    listed = "; ".join(f"{what}: {', '.join(keys[:8])}{' …' if len(keys) > 8 else ''}"
                       for what, keys in (("added", added), ("removed", removed), ("changed", changed)) if keys)
    return (f"the asset specs differ from the reviewed {SNAPSHOT.relative_to(REPO)} ({listed}). If you changed the "
            "catalog or the assets on purpose (a new topic, say), record them: `make test-fast UPDATE_SNAPSHOTS=1` "
            "(or `UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/test_definitions.py`), which rewrites the file "
            "and fails once; review `git diff tests/snapshots/` and commit it with your change")


def test_spark_ui_port_is_the_first_port_every_runs_spark_ui_tries():
    """Spark's UI takes 4040 (and the next free ones) unless told: SPARK_UI_PORT moves it, for a machine where another
    user's runs hold those ports; a value that is no port is refused naming the variable."""
    from platform_assets.definitions import platform_resources

    unset = platform_resources(PlatformSettings.from_env({}))["pyspark"].spark_config
    moved = platform_resources(PlatformSettings.from_env({"SPARK_UI_PORT": "4141"}))["pyspark"].spark_config

    assert "spark.ui.port" not in unset and moved["spark.ui.port"] == "4141"
    with pytest.raises(ValueError, match="SPARK_UI_PORT is 'ui'; it must be a port number"):
        PlatformSettings.from_env({"SPARK_UI_PORT": "ui"})


def test_adding_a_topic_is_adding_a_folder(catalog_copy):
    shutil.copytree(catalog_copy / "shop" / "page_views", catalog_copy / "shop" / "checkouts")
    topic_file = catalog_copy / "shop" / "checkouts" / "topic.yaml"
    text = topic_file.read_text().replace("topic: shop.page_views", "topic: shop.checkouts")
    topic_file.write_text(text.replace("registry_id: 100", "registry_id: 500"))

    keys = build_definitions(load_catalog(catalog_copy), PlatformSettings()).resolve_asset_graph().get_all_asset_keys()

    assert AssetKey(["raw", "shop", "checkouts"]) in keys
    assert AssetKey(["dead_letters", "shop", "checkouts"]) in keys


def test_a_broken_catalog_entry_costs_only_its_topic_and_is_shown_as_rejected(catalog_copy):
    broken = catalog_copy / "shop" / "checkouts"
    shutil.copytree(catalog_copy / "shop" / "page_views", broken)
    (broken / "topic.yaml").write_text((broken / "topic.yaml").read_text().replace("owner: team-web\n", ""))

    definitions = build_definitions(load_catalog(catalog_copy, tolerant=True), PlatformSettings())

    graph = definitions.resolve_asset_graph()
    assert AssetKey(["raw", "shop", "page_views"]) in graph.get_all_asset_keys(), "the good topics still land"
    assert AssetKey(["compacted", "payments", "transactions"]) in graph.get_all_asset_keys()
    rejected = graph.get(AssetKey(["raw", "shop", "checkouts"]))
    assert rejected.tags["catalog"] == "rejected", "executable only to fail saying why (a run queued for it before)"
    assert f"{broken / 'topic.yaml'}" in rejected.description and "owner" in rejected.description
    metadata = definitions.get_repository_def().metadata
    assert metadata["catalog_entries_rejected"].value == 1 and "checkouts/topic.yaml" in metadata["catalog_errors"].value
    [sensor] = [s for s in definitions.sensors if s.name == "catalog_entries_rejected"]
    [(alerts, _)] = _tick_alerts(sensor)
    [alert_line] = [line for line in alerts if "checkouts/topic.yaml" in line]
    assert "owner" in alert_line


def test_every_asset_of_a_rejected_entry_shows_a_failed_check_saying_why_and_its_topic_is_not_missing(catalog_copy):
    """Given a typo in one entry: its table's five assets, each with the check `catalog_entry_loads`, which the sensor
    records failed (once, not at every tick) and which fails when executed; its topic is rejected, not missing."""
    from dagster import AssetCheckKey, AssetSelection, Definitions, define_asset_job

    from kafka_lake.automation import topics_missing_from_catalog

    topic_file = catalog_copy / "payments" / "transactions" / "topic.yaml"
    topic_file.write_text(topic_file.read_text().replace("owner:", "ownr:"))
    catalog = load_catalog(catalog_copy, tolerant=True)
    definitions = build_definitions(catalog, PlatformSettings())
    graph = definitions.resolve_asset_graph()
    keys = [AssetKey([layer, "payments", "transactions"]) for layer in ("raw", "dead_letters", "compacted", "catalog",
                                                                         "retention")]
    checks = [AssetCheckKey(key, "catalog_entry_loads") for key in keys]
    [sensor] = [s for s in definitions.sensors if s.name == "catalog_entries_rejected"]

    (_, first_tick), (_, second_tick) = _tick_alerts(sensor, ticks=2)
    executing = Definitions.merge(definitions, Definitions(jobs=[define_asset_job("execute", AssetSelection.checks(checks[0]))]))
    executed = executing.resolve_job_def("execute").execute_in_process(raise_on_error=False).get_asset_check_evaluations()

    assert all({c.name for c in graph.get(key).check_keys} == {"catalog_entry_loads"} for key in keys[1:])
    assert {c.name for c in graph.get(keys[0]).check_keys} > {"catalog_entry_loads", "slices_contiguous", "freshness"}
    assert sorted(e.asset_key for e in first_tick) == sorted(keys) and not second_tick, "recorded once, until a reload"
    assert all(not e.passed and str(topic_file) in e.description and "ownr" in e.description for e in first_tick)
    assert [(e.passed, str(topic_file) in e.description) for e in executed] == [(False, True)]
    assert "payments.transactions" not in topics_missing_from_catalog(["payments.transactions", "shop.page_views"], catalog)


def test_a_run_queued_before_its_catalog_entry_was_rejected_fails_saying_so_while_its_other_topics_go_on(catalog_copy,
                                                                                                         tmp_path):
    """Given runs the sensors queued (a compaction of two tables, a landing of one) and then a typo in one of their
    entries and a reload: each run starts on the reloaded code location. Dagster refused such a run whole before any
    step ("Selected keys must be a subset of existing executable asset keys": a framework error, a failed retry, an
    alert "marked as failed from outside the execution context"). Now the rejected table's step fails for good, naming
    the file and the error, and the other table's step does its work (here: skips an hour not due). The runs execute in
    this process, as the run worker executes them (the code location's in-process executor)."""
    from dagster import DagsterEventType, instance_for_test
    from dagster._core.events import RunFailureReason
    from dagster._core.execution.retries import auto_reexecution_should_retry_run

    from kafka_lake.hours import KafkaHour
    from platform_assets.jobs import compaction_run
    from platform_assets.sensors import failed_run_alert, landing_requests, table_requests

    settings = PlatformSettings(lake_root=str(tmp_path / "lake"))
    catalog = load_catalog(catalog_copy)
    hour = KafkaHour.from_partition_key("2026-11-20-10:00")
    page_views, transactions = catalog.by_name("shop", "page_views"), catalog.by_name("payments", "transactions")
    [compaction] = table_requests(compaction_run, {page_views: {hour}, transactions: {hour}}, 250)
    [landing] = landing_requests({transactions: [hour]})
    topic_file = catalog_copy / "payments" / "transactions" / "topic.yaml"
    topic_file.write_text(topic_file.read_text().replace("owner:", "ownr:"))
    reloaded = build_definitions(load_catalog(catalog_copy, tolerant=True), settings)

    with instance_for_test() as instance:
        runs = {}
        for request in (compaction, landing):
            job = reloaded.resolve_job_def(request.job_name).get_subset(
                asset_selection=set(request.asset_selection),
                asset_check_selection=set(request.asset_check_keys) if request.asset_check_keys is not None else None)
            result = job.execute_in_process(instance=instance, tags=request.tags, raise_on_error=False)
            failures = [e.dagster_event.step_failure_data
                        for e in instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_FAILURE)]
            runs[request.job_name] = instance.get_run_by_id(result.run_id), failures, result

        run, failures, result = runs["compaction"]
        [failure] = failures
        alert = failed_run_alert(run, failures, None)
        assert f"CatalogError: catalog entry rejected, payments.transactions is not landed: {topic_file}" in (
            failure.user_failure_data.description), failure.user_failure_data.description
        assert alert.startswith(f"[FAILED] run {run.run_id[:8]} of compaction of 2 topics {hour}: 1 failed, the others "
                                f"committed:\n- payments.transactions {hour}: CatalogError: catalog entry rejected, "), alert
        assert "ownr" in alert and str(topic_file) in alert
        assert [e.asset_key.to_user_string() for e in result.get_asset_observation_events()] == ["compacted/shop/page_views"]
        assert not auto_reexecution_should_retry_run(instance, run, RunFailureReason.STEP_FAILURE), "a retry cannot help"

        run, [failure], _ = runs["landing"]  # a run that selected the raw asset's landing checks too
        alert = failed_run_alert(run, [failure], None)
        assert alert.startswith(f"[FAILED] run {run.run_id[:8]} of ") and (
            f"{hour}: CatalogError: catalog entry rejected, payments.transactions is not landed: {topic_file}") in alert


def _tick_alerts(sensor, ticks: int = 1) -> list[tuple[list[str], list]]:
    """Each tick's alerts (to its log; no webhook is set here) and the check results it records, the daemon's part
    (recording them) done between ticks."""
    from dagster import build_sensor_context, instance_for_test

    from resources import AlertWebhookResource

    done, cursor = [], None
    with instance_for_test() as instance:
        for _ in range(ticks):
            context = build_sensor_context(instance=instance, cursor=cursor, resources={"alerts": AlertWebhookResource()})
            lines: list[str] = []
            context.log.addHandler(_ListHandler(lines))
            result = sensor(context)
            assert "1 catalog entry rejected" in result.skip_reason.skip_message
            for event in result.asset_events:
                instance.report_runless_asset_event(event)
            done.append(([line for line in lines if line.startswith("ALERT")], list(result.asset_events)))
            cursor = result.cursor
    return done


class _ListHandler(logging.Handler):
    def __init__(self, lines: list[str]):
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_check_catalog_exits_non_zero_naming_the_file_and_the_problem(catalog_copy):
    broken = catalog_copy / "payments" / "refunds"
    shutil.copytree(catalog_copy / "payments" / "transactions", broken)  # the same topic and registry id twice

    failed = subprocess.run([sys.executable, "-m", "deploy.check_catalog", str(catalog_copy)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    passed = subprocess.run([sys.executable, "-m", "deploy.check_catalog", str(REPO / "schema_catalog")], cwd=REPO,
                            capture_output=True, text=True, timeout=120)

    assert failed.returncode == 1
    original = catalog_copy / "payments" / "transactions" / "topic.yaml"
    assert f"{original}: Kafka topic 'payments.transactions' is already landed by {broken / 'topic.yaml'} in the same way" in failed.stderr
    assert f"{broken / 'topic.yaml'}: Kafka topic 'payments.transactions' is also landed by {original} in the same way" in failed.stderr
    samples = len(load_catalog(REPO / "schema_catalog").topics)
    assert f"{samples - 1} topic(s) load, 2 broken" in failed.stdout, "both entries of a clash are set aside; the rest loads"
    assert passed.returncode == 0, passed.stderr


def test_the_dagster_cli_materializes_one_topic_hour(broker, tmp_path):
    kafka_topic = unique_topic_name()
    topic = write_test_topic(tmp_path / "catalog", kafka_topic)
    broker.create_topic(kafka_topic, PARTITIONS)
    traffic = build_traffic(topic, per_partition_per_hour=4)
    produce(broker.bootstrap_servers, traffic)
    lake = tmp_path / "lake"
    (tmp_path / "home").mkdir()
    env = {
        **os.environ,
        "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"),
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "LAKE_ROOT": str(lake),
        "PII_HMAC_KEY": PII_TEST_KEY,
        "SPARK_MASTER": "local[1]",
        "DAGSTER_HOME": str(tmp_path / "home"),
    }
    partition = HOURS[1].strftime("%Y-%m-%d-%H:00")

    completed = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize", "--select", "raw/e2e/orders",
         "--partition", partition, "-m", "platform_assets.definitions"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    # The run's step ran in the run's own process (the code location's executor), not in a process of its own.
    assert "Executing steps in process" in completed.stderr, completed.stderr[-3000:]
    [manifest] = ManifestStore(LakeStorage(str(lake)), "e2e", "orders").all()
    assert manifest.hour == partition
    assert manifest.counts.rows == len(traffic.in_hours([HOURS[1]]).rows())


def test_the_dagster_cli_materializes_a_partition_range_of_every_layer_each_hour_with_its_own_metadata(broker, tmp_path):
    """`--partition-range` on raw, then compacted, then catalog: each layer takes the range as one run, and records each
    hour with its own metadata. Before, compaction's multi-run backfill policy made the CLI refuse its range
    (`CheckError`: a range needs a single-run policy). The runs start in a folder of their own, where the embedded
    metastore of the registration lives."""
    kafka_topic = unique_topic_name()
    topic = write_test_topic(tmp_path / "catalog", kafka_topic, allowed_lateness_hours=1)
    broker.create_topic(kafka_topic, PARTITIONS)
    traffic = build_traffic(topic, per_partition_per_hour=4)
    produce(broker.bootstrap_servers, traffic)
    lake, home, workdir = tmp_path / "lake", tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    env = {**os.environ, "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"), "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "LAKE_ROOT": str(lake), "PII_HMAC_KEY": PII_TEST_KEY, "SPARK_MASTER": "local[1]", "DAGSTER_HOME": str(home)}

    def materialize_range(layer: str, hours) -> None:
        first, last = (hour.strftime("%Y-%m-%d-%H:00") for hour in (hours[0], hours[-1]))
        completed = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize", "--select",
             f"{layer}/e2e/orders", "--partition-range", f"{first}...{last}", "-m", "platform_assets.definitions"],
            env=env, cwd=workdir, capture_output=True, text=True, timeout=300,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]

    materialize_range("raw", RAW_HOURS)
    materialize_range("compacted", HOURS)  # each placement hour is due once the raw hour after it has landed
    materialize_range("catalog", HOURS)

    manifests = {m.hour: m for m in ManifestStore(LakeStorage(str(lake)), "e2e", "orders").all()}
    assert sorted(manifests) == [hour.strftime("%Y-%m-%d-%H:00") for hour in RAW_HOURS]
    from dagster import AssetRecordsFilter, DagsterInstance

    def materialized(layer: str, hour: str):
        [record] = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey([layer, "e2e", "orders"]), asset_partitions=[hour]), limit=1).records
        return record.asset_materialization.metadata

    with DagsterInstance.from_config(str(home)) as instance:
        for hour, manifest in manifests.items():
            metadata = materialized("raw", hour)
            assert metadata["rows"].value == manifest.counts.rows == len(traffic.in_hours([manifest.kafka_hour.start]).rows())
            assert metadata["offset_ranges"].value == {str(p.partition): [p.start, p.end] for p in manifest.partitions}
        storage = LakeStorage(str(lake))
        for hour in HOURS:
            key = hour.strftime("%Y-%m-%d-%H:00")
            compacted = [p for p in storage_partitions(storage, "e2e", "orders") if p.hour == hour]
            assert compacted and all(read_compaction(storage, "e2e", "orders", p) for p in compacted), key
            assert materialized("compacted", key)["partitions_rewritten"].value == len(compacted)
        assert instance.get_latest_materialization_event(AssetKey(["catalog", "e2e", "orders"])) is not None


def test_every_hourly_layer_takes_a_range_as_one_run(monkeypatch):
    """What `--partition-range` on the CLI needs, and what a backfill from the UI then does, for every partitioned asset
    alike: a single-run backfill policy."""
    monkeypatch.setenv("SCHEMA_CATALOG_DIR", str(REPO / "schema_catalog"))
    from dagster import BackfillPolicy

    from platform_assets.definitions import load_definitions

    graph = load_definitions().resolve_asset_graph()
    partitioned = [graph.get(key) for key in graph.get_all_asset_keys() if graph.get(key).partitions_def is not None]
    assert {node.key.path[0] for node in partitioned} >= {"raw", "compacted", "catalog"}
    assert [node.key.to_user_string() for node in partitioned
            if node.backfill_policy != BackfillPolicy.single_run()] == []


def test_with_table_format_iceberg_every_topic_is_an_iceberg_table_whose_assets_check_the_table(monkeypatch):
    """`TABLE_FORMAT=iceberg` as the code location loads it: the same asset keys, partitions and jobs as the Hive
    layout; the table assets carry the `iceberg` kind, and landing and registration check the table."""
    monkeypatch.setenv("SCHEMA_CATALOG_DIR", str(REPO / "schema_catalog"))
    monkeypatch.setenv("TABLE_FORMAT", "iceberg")
    from platform_assets.definitions import load_definitions

    graph = load_definitions().resolve_asset_graph()
    hive = describe_definitions(REPO / "schema_catalog")
    assert sorted(k.to_user_string() for k in graph.get_all_asset_keys()) == sorted(k for k in hive if "/" in k)
    # A raw archive has no schema versions to fold into an Iceberg schema: it stays in the Hive layout.
    formats = {t.name: t.table_format for t in load_catalog(REPO / "schema_catalog", table_format="iceberg").topics}
    assert formats.pop("archive/shop_cart_events") == "hive" and set(formats.values()) == {"iceberg"}
    for name in hive:
        if not name.startswith(("raw/", "catalog/", "compacted/", "retention/")) or name.split("/", 1)[1] not in formats:
            continue
        node = graph.get(AssetKey(name.split("/")))
        checks = {check.name for check in node.check_keys}
        assert ("iceberg" in node.kinds) == (not name.startswith("raw/")), name
        if name.startswith(("raw/", "catalog/")):
            assert "table_matches_landing" in checks and "catalog_matches_storage" not in checks, (name, checks)


def test_secrets_reach_their_resources_as_the_names_of_their_variables(monkeypatch):
    """What the UI's resource page shows is the variable's name; the value is read when the resource is used."""
    from dagster import EnvVar

    from kafka_lake.settings import PlatformSettings
    from platform_assets.definitions import platform_resources

    monkeypatch.setenv("PII_HMAC_KEY", "a-pii-secret")
    monkeypatch.setenv("ALERT_WEBHOOK_URL", "https://hooks.example/a-webhook-secret")
    monkeypatch.delenv("DEAD_LETTER_KEY", raising=False)
    resources = platform_resources(PlatformSettings.from_env())
    pii, alerts = resources["pii"], resources["alerts"]

    assert isinstance(pii.hmac_key, EnvVar) and pii.hmac_key == "PII_HMAC_KEY"
    assert isinstance(alerts.webhook_url, EnvVar) and alerts.webhook_url == "ALERT_WEBHOOK_URL"
    assert pii.dead_letter_key_base64 is None, "an unset variable is no EnvVar: Dagster would fail every run on it"
    assert "secret" not in repr(pii) + repr(alerts)
    assert pii.key() == b"a-pii-secret"


@pytest.mark.services  # runs pytest in subprocesses, on a clone of the repository
def test_a_newcomers_own_entry_fails_no_fast_test_but_the_snapshot_which_says_how_to_record_it(tmp_path):
    """Given a clone whose catalog holds the README's example entry, added by its four steps; then the fast tests that
    read the repository's catalog pass, but the asset snapshot, which fails naming the new assets and the command that
    records them; run so, it rewrites the snapshot and fails once, and the next run passes."""
    from tests.readme_entry import write_readme_entry

    clone = tmp_path / "clone"
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, clone / name)
    write_readme_entry(clone / "schema_catalog")

    def fast_tests(*selected: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not services and not faults and not ui",
             *selected], cwd=clone, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)

    first = fast_tests("tests/test_automation.py", "tests/test_catalog.py", "tests/test_definitions.py")
    snapshot = "tests/test_definitions.py::test_the_asset_specs_match_the_reviewed_snapshot"
    recorded = fast_tests(snapshot, UPDATE_SNAPSHOTS="1")
    again = fast_tests(snapshot)

    failed = [line for line in first.stdout.splitlines() if line.startswith("FAILED")]
    assert [line.split(" ")[1] for line in failed] == [snapshot], first.stdout[-3000:]
    assert "added: catalog/billing/invoices, compacted/billing/invoices" in first.stdout
    assert "`make test-fast UPDATE_SNAPSHOTS=1`" in first.stdout
    assert recorded.returncode == 1 and "rewritten" in recorded.stdout
    assert again.returncode == 0, again.stdout[-2000:]


def test_a_topics_raw_asset_says_what_its_values_are_in_its_kinds_and_description():
    """Nothing in the UI said a topic is Protobuf: its raw asset shows the payload format as a kind (a tag under its
    node) and its description names the format and the record its values are read as."""
    catalog = load_catalog(REPO / "schema_catalog")
    graph = build_definitions(catalog, PlatformSettings()).resolve_asset_graph()

    orders = graph.get(AssetKey(["raw", "shop", "orders"]))
    shown = {topic.name: (graph.get(AssetKey(["raw", topic.database, topic.table])).kinds - {"raw", "kafka", "spark",
                                                                                            "parquet"})
             for topic in catalog.topics}

    assert orders.description.startswith("Raw layer: Kafka topic `shop.orders`, Protobuf messages acme.shop.Order, "), (
        orders.description)
    assert shown["shop/orders"] == {"protobuf"} and shown["shop/page_views"] == {"avro"}, shown
    assert shown["shop/cart_opens"] == {"json"} and shown["archive/shop_cart_events"] == {"bytes"}, shown


def test_a_run_over_a_range_of_hours_names_them_in_a_tag_the_runs_list_shows():
    """The Runs list shows a run's `dagster/partition` and hides Dagster's tags of a range: a sensor's run of three
    hours (of one topic or many) read as a run of no hour at all."""
    from kafka_lake.hours import KafkaHour
    from platform_assets.sensors import landing_requests

    catalog = load_catalog(REPO / "schema_catalog")
    first = KafkaHour.from_partition_key("2026-11-20-10:00")
    hours = [first, first.next(), first.next().next()]
    one, many = catalog.by_name("shop", "page_views"), [catalog.by_name("payments", "transactions"), catalog.by_name(
        "shop", "page_views")]

    [of_one] = landing_requests({one: hours})
    [of_many] = landing_requests(dict.fromkeys(many, hours))
    [of_an_hour] = landing_requests({one: hours[:1]})

    for request in (of_one, of_many):
        assert request.tags["hours"] == "2026-11-20-10:00...2026-11-20-12:00", request.tags
    assert "hours" not in of_an_hour.tags and of_an_hour.tags["dagster/partition"] == "2026-11-20-10:00"
