"""The deployment: the rendered Dagster instance (SQLite, or a real PostgreSQL server when DAGSTER_PG_* is
set), and the webserver loading the code location from the code server the Docker image runs.

No Docker engine runs here, so the test runs the image's ENTRYPOINT and CMD, read from the Dockerfile,
directly on this machine.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack

import psycopg2
import pytest
from dagster import AssetCheckKey, AssetKey, AssetMaterialization, DagsterInstance, DagsterRunStatus, asset, materialize

from deploy.instance import InstanceConfigError, render_instance, write_instance
from dev_services.ports import LOOPBACK, free_port
from dev_services.postgres import PostgresServer
from kafka_lake.topics.loader import load_catalog
from tests.constants import REPO
from tests.dagster_servers import VENV_BIN, asset_keys, graphql, loaded_location, serving, webserver_command

LOCATION = "kafka_lake"
LANDING_POOL = "landing/shop/page_views"

# A PostgreSQL server and the image's code server and webserver, as subprocesses.
pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def postgres():
    with PostgresServer() as server:
        yield server


@pytest.fixture
def postgres_env(postgres, monkeypatch):
    """DAGSTER_PG_* in this process's environment, where the instance resolves the `env:` references."""
    for name, value in postgres.env().items():
        monkeypatch.setenv(name, value)
    return postgres.env()


def dockerfile_instruction(name: str) -> list[str]:
    """The exec-form argv of a Dockerfile instruction (ENTRYPOINT, CMD)."""
    lines = [line for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith(f"{name} ")]
    assert len(lines) == 1, f"the Dockerfile must have one {name} in exec form, found {lines}"
    return json.loads(lines[0][len(name) + 1:])


def with_option(argv: list[str], option: str, value: str) -> list[str]:
    assert option in argv, f"the Dockerfile's CMD has no {option}: {argv}"
    at = argv.index(option) + 1
    return [*argv[:at], value, *argv[at + 1:]]


def test_without_dagster_pg_the_instance_keeps_runs_in_sqlite_with_the_limits_of_dagster_yaml(tmp_path):
    write_instance(tmp_path, environ={})

    instance = DagsterInstance.from_config(str(tmp_path))

    assert type(instance.run_storage).__name__ == "SqliteRunStorage"
    concurrency = instance.get_concurrency_config()
    assert concurrency.pool_config.default_pool_limit == 1
    assert concurrency.pool_config.pool_granularity.value == "run"
    assert concurrency.run_queue_config.max_concurrent_runs >= 1
    assert {"key": "dagster/backfill", "value": {"applyLimitPerUniqueValue": True}, "limit": 2} in \
        concurrency.run_queue_config.tag_concurrency_limits
    assert instance.run_retries_enabled and instance.run_retries_max_retries >= 1
    assert not instance.telemetry_enabled
    assert instance.code_server_process_startup_timeout >= 600, "a large catalog's code server has minutes to load"


def _planned_events(instance, run_id: str) -> int:
    from dagster import DagsterEventType

    return len(instance.get_records_for_run(run_id, of_type={DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
                                                             DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED}).records)


def _assets_with_checks(count: int) -> list:
    from dagster import AssetCheckResult, AssetCheckSpec, AssetSpec, multi_asset

    @multi_asset(specs=[AssetSpec(f"probe_{n}") for n in range(count)],
                 check_specs=[AssetCheckSpec("holds", asset=f"probe_{n}") for n in range(count)])
    def probes():
        for n in range(count):
            yield AssetCheckResult(asset_key=f"probe_{n}", check_name="holds", passed=True)
            yield AssetMaterialization(f"probe_{n}")

    return [probes]


def test_the_sqlite_instance_stores_a_new_runs_planned_events_as_one_batch_and_watches_its_run_workers(tmp_path):
    """Creating a run stores a planned event per asset and check it selects; the rendered SQLite instance stores them in
    one transaction (deploy/event_batches.py), every one of them there and the run's own events after them; run
    monitoring checks started runs' workers (deploy/run_launcher.py)."""
    from deploy.event_batches import BatchingInstance, BatchingSqliteEventLogStorage
    from deploy.run_launcher import WatchedRunLauncher

    write_instance(tmp_path, environ={})
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance, BatchingInstance) and instance._is_batch_writing_enabled()
        assert isinstance(instance.event_log_storage, BatchingSqliteEventLogStorage)
        assert isinstance(instance.run_launcher, WatchedRunLauncher)
        assert instance.run_monitoring_enabled and instance.run_monitoring_settings["max_resume_run_attempts"] == 0
        result = materialize(_assets_with_checks(30), instance=instance)
        assert result.success
        assert _planned_events(instance, result.run_id) == 60
        checks = instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey("probe_7"), "holds"), limit=5)
        assert [record.status.value for record in checks] == ["SUCCEEDED"], "planned, then evaluated"

    with DagsterInstance.from_config(str(tmp_path)) as another:
        assert another.get_latest_materialization_event(AssetKey("probe_29")) is not None


def test_a_partly_set_dagster_pg_is_refused_naming_the_missing_variables():
    with pytest.raises(InstanceConfigError) as refused:
        render_instance("telemetry:\n  enabled: false\n", {"DAGSTER_PG_HOST": "db", "DAGSTER_PG_USER": "dagster"})

    assert "DAGSTER_PG_PASSWORD" in str(refused.value) and "DAGSTER_PG_DB" in str(refused.value)
    assert "DAGSTER_PG_PORT" not in str(refused.value), "the port has Dagster's default"


def test_the_rendered_instance_records_runs_and_pools_in_postgres(postgres_env, tmp_path):
    """Given DAGSTER_PG_* pointing at a real PostgreSQL server, a run recorded through the rendered instance
    is in Postgres, seen by a second instance and by SQL, and a pool gets dagster.yaml's default limit."""
    path = write_instance(tmp_path / "home")
    assert postgres_env["DAGSTER_PG_PASSWORD"] not in path.read_text(), "the password stays in the environment"

    @asset(pool=LANDING_POOL)
    def deployment_probe():
        return 1

    with DagsterInstance.from_config(str(path.parent)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance).__name__ == "BatchingInstance" and instance._is_batch_writing_enabled()
        result = materialize([deployment_probe], instance=instance)
        assert result.success
        batched = materialize(_assets_with_checks(20), instance=instance)
        assert batched.success and _planned_events(instance, batched.run_id) == 40
        instance.event_log_storage.initialize_concurrency_limit_to_default(LANDING_POOL)

    with DagsterInstance.from_config(str(path.parent)) as another:
        run = another.get_run_by_id(result.run_id)
        assert run is not None and run.status == DagsterRunStatus.SUCCESS
        assert another.get_latest_materialization_event(AssetKey("deployment_probe")) is not None
        assert another.event_log_storage.get_concurrency_info(LANDING_POOL).slot_count == 1
    connection = psycopg2.connect(host=postgres_env["DAGSTER_PG_HOST"], port=postgres_env["DAGSTER_PG_PORT"],
                                  user=postgres_env["DAGSTER_PG_USER"], password=postgres_env["DAGSTER_PG_PASSWORD"],
                                  dbname=postgres_env["DAGSTER_PG_DB"])
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM runs WHERE run_id = %s", (result.run_id,))
            assert cursor.fetchone() == ("SUCCESS",)
    finally:
        connection.close()


def test_the_webserver_loads_the_code_location_from_the_images_code_server(postgres_env, tmp_path):
    """Given the image's command (ENTRYPOINT + CMD of the Dockerfile) serving the code location over gRPC
    and a webserver with deploy/workspace.yaml on the same Postgres-backed instance, the webserver lists
    every topic's raw asset, loaded from that code server."""
    code_port, web_port = free_port(), free_port()
    command = dockerfile_instruction("ENTRYPOINT") + with_option(
        with_option(dockerfile_instruction("CMD"), "-h", LOOPBACK), "-p", str(code_port))
    env = {**os.environ, **postgres_env, "DAGSTER_HOME": str(tmp_path / "home"),
           "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "KAFKA_LAKE_CODE_SERVER_HOST": LOOPBACK, "KAFKA_LAKE_CODE_SERVER_PORT": str(code_port)}
    expected = {f"raw/{topic.database}/{topic.table}" for topic in load_catalog(REPO / "schema_catalog").topics}

    with serving(command, code_port, tmp_path / "code-server.log", env, REPO, "the code server"):
        web_log = tmp_path / "webserver.log"
        with serving(webserver_command(REPO / "deploy" / "workspace.yaml", web_port), web_port, web_log, env,
                     REPO, "dagster-webserver"):
            entry = loaded_location(web_port, LOCATION, web_log)
            instance_info = graphql(web_port, "{ instance { info } }")["instance"]["info"]

    served_from = {item["key"]: item["value"] for item in entry["displayMetadata"]}
    assert served_from.get("port") == str(code_port), f"not loaded from the code server: {served_from}"
    assert expected <= asset_keys(entry), f"missing raw assets: {sorted(expected - asset_keys(entry))}"
    assert "PostgresRunStorage" in instance_info, "the webserver reads the instance the entrypoint rendered"


SLICES = {"kafka_lake_shop": ("SHOP", "shop"), "kafka_lake_payments": ("PAYMENTS", "payments,archive,crm")}


def test_the_webserver_serves_a_catalog_sliced_by_database_as_several_code_locations(tmp_path):
    """Given the image's command run twice, each code server with SCHEMA_CATALOG_DATABASES set to a slice of the
    catalog, and a webserver on deploy/workspace.slices.yaml; then each code location holds exactly its slice's
    topics, every topic is in one of them, and each has the platform's sensors and layer jobs."""
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "PLATFORM_AUTOMATION": "off",
           "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    write_instance(tmp_path / "home", environ={})
    ports = {location: free_port() for location in SLICES}
    for location, (variable, _) in SLICES.items():
        env[f"KAFKA_LAKE_{variable}_HOST"], env[f"KAFKA_LAKE_{variable}_PORT"] = LOOPBACK, str(ports[location])
    catalog = load_catalog(REPO / "schema_catalog")
    web_port, web_log = free_port(), tmp_path / "webserver.log"

    with ExitStack() as servers:
        for location, (_, databases) in SLICES.items():
            command = dockerfile_instruction("ENTRYPOINT") + with_option(with_option(with_option(
                dockerfile_instruction("CMD"), "-h", LOOPBACK), "-p", str(ports[location])), "--location-name", location)
            servers.enter_context(serving(command, ports[location], tmp_path / f"{location}.log",
                                          {**env, "SCHEMA_CATALOG_DATABASES": databases}, REPO, location))
        servers.enter_context(serving(webserver_command(REPO / "deploy" / "workspace.slices.yaml", web_port), web_port,
                                      web_log, env, REPO, "dagster-webserver"))
        entries = {location: loaded_location(web_port, location, web_log) for location in SLICES}
        served = {location: graphql(web_port, LOCATION_QUERY, {"location": location})["repositoryOrError"]
                  for location in SLICES}

    shop = {f"raw/{t.name}" for t in catalog.topics if t.database == "shop"}
    others = {f"raw/{t.name}" for t in catalog.topics if t.database != "shop"}
    raw = {location: {key for key in asset_keys(entry) if key.startswith("raw/")} for location, entry in entries.items()}
    assert raw == {"kafka_lake_shop": shop, "kafka_lake_payments": others}, "each slice lands its databases, and only those"
    for location, repository in served.items():
        assert {s["name"] for s in repository["sensors"]} >= {"land_closed_hours", "topic_health"}, location
        assert {j["name"] for j in repository["jobs"]} >= {"landing", "compaction", "registration", "retention"}, location


LOCATION_QUERY = """
query ($location: String!) {
  repositoryOrError(repositorySelector: {repositoryLocationName: $location, repositoryName: "__repository__"}) {
    ... on Repository {
      sensors { name }
      jobs { name }
    }
  }
}
"""


