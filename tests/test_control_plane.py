"""The control plane never drops an hour (SPEC "A control plane that never drops an hour"), tried on the real deployment:
`dagster dev` (webserver, daemon, code server) with the platform's landing sensor, a real broker, Spark and a SQLite
instance rendered from deploy/dagster.yaml. The run monitoring and sensor rules are tested in-process in test_sensors
(failed unqueued, cancelled, never created) and here the launcher's health check against real code servers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from bench.runs import SET_CURSOR, START_SENSOR, produce_hour, topic_name, write_catalog
from deploy.instance import write_instance
from deploy.run_launcher import WatchedRunLauncher
from dev_services.ports import LOOPBACK, free_port
from dev_services.processes import launch, stop_process
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from tests.dagster_servers import graphql, loaded_location, log_tail, serving

VENV_BIN = Path(sys.executable).parent
TOPICS, PARTITIONS, RECORDS = 2, 2, 40
PII_KEY = "control-plane-test-key-not-a-secret"
LOCATION = "platform_assets.definitions"
# Run monitoring asks about started runs this often here (60 s in deploy/dagster.yaml): the test waits less.
POLL_INTERVAL_S = 10
DEADLINE_S = 900

# `dagster dev`, code servers and the code location in subprocesses.
pytestmark = pytest.mark.services


def _instance_home(home: Path) -> None:
    write_instance(home, environ={})
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    settings["run_monitoring"]["poll_interval_seconds"] = POLL_INTERVAL_S
    # Without the daemon's run retries, which would re-execute the killed run first: what lands it is the sensor.
    settings["run_retries"]["enabled"] = False
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))


def _wait(what: str, done, log: Path, timeout: float = DEADLINE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = done()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{log_tail(log, 60)}")


def test_given_the_whole_deployment_killed_mid_landing_when_started_again_then_every_due_hour_lands_once(
        broker, tmp_path):
    """Given `dagster dev` landing a closed hour of two topics, killed -9 as a whole (webserver, daemon, code server,
    run worker) while its landing run is STARTED; when it is started again, then run monitoring fails the run whose
    worker is gone (its pools released), the landing sensor asks for its hours again, and every due hour lands, each
    record once, none left to a person."""
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    hour = KafkaHour.containing(datetime.now(timezone.utc)).previous().previous()  # its closing records are past
    names = [topic_name(n) for n in range(TOPICS)]
    catalog, home, lake = tmp_path / "catalog", tmp_path / "home", tmp_path / "lake"
    write_catalog(catalog, TOPICS)
    _instance_home(home)
    for name in names:
        broker.create_topic(name, PARTITIONS)
    produce_hour(broker.bootstrap_servers, names, PARTITIONS, RECORDS, hour)
    env = {**os.environ, "DAGSTER_HOME": str(home), "SCHEMA_CATALOG_DIR": str(catalog), "LAKE_ROOT": str(lake),
           "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers, "PII_HMAC_KEY": PII_KEY, "SPARK_MASTER": "local[1]",
           "PLATFORM_AUTOMATION": "off", "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = tmp_path / "dagster_dev.log"
    instance = DagsterInstance.from_config(str(home))

    def dagster_dev(port: int) -> list[str]:
        return [str(VENV_BIN / "dagster"), "dev", "-m", LOCATION, "-h", LOOPBACK, "-p", str(port)]

    port = free_port()
    process = launch(dagster_dev(port), log, cwd=tmp_path, env=env)
    try:
        loaded_location(port, LOCATION, log, timeout=600)
        selector = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                    "sensorName": "land_closed_hours"}
        cursor = json.dumps({name: hour.partition_key for name in names})
        assert graphql(port, SET_CURSOR, {"selector": selector, "cursor": cursor})["setSensorCursor"][
            "__typename"] != "PythonError"
        assert graphql(port, START_SENSOR, {"selector": selector})["startSensor"]["__typename"] == "Sensor"
        [killed] = _wait("a landing run started", lambda: instance.get_runs(
            RunsFilter(job_name="landing", statuses=[DagsterRunStatus.STARTED])), log)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the whole deployment, its run worker and Spark with it
        process.wait(30)
    assert instance.get_run_by_id(killed.run_id).status == DagsterRunStatus.STARTED, "left STARTED, holding its pools"

    port = free_port()
    with serving(dagster_dev(port), port, log, env, tmp_path, "dagster dev, started again", start_timeout=600):
        failed = _wait("the killed run failed by run monitoring",
                       lambda: (run := instance.get_run_by_id(killed.run_id)).is_finished and run, log)
        assert failed.status == DagsterRunStatus.FAILURE
        landed = _wait("every due hour landed by a run asked again", lambda: _all_landed(instance, hour), log)
        assert all(run.tags.get("dagster/run_key", "").startswith(killed.tags["dagster/run_key"]) for run in landed)
        assert any(":again" in run.tags["dagster/run_key"] for run in landed), "asked again under a key of its own"
    reasons = [e.message for e in instance.all_logs(killed.run_id) if e.message]
    assert any("is gone" in reason for reason in reasons), reasons[-5:]
    alerted = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("- db_00000/page_views")]
    assert alerted and f"run {killed.run_id[:8]} failed" in alerted[0] and "is gone" in alerted[0], alerted

    storage = LakeStorage(str(lake))
    for n in range(TOPICS):
        manifest = ManifestStore(storage, f"db_{n:05d}", "page_views").read(hour)
        assert manifest is not None and manifest.counts.rows == RECORDS, (n, manifest)


def _all_landed(instance, hour: KafkaHour):
    """The successful landing runs once every landing run has ended and one succeeded for `hour`."""
    from dagster import DagsterRunStatus, RunsFilter

    runs = instance.get_runs(RunsFilter(job_name="landing"))
    if not runs or any(not run.is_finished for run in runs):
        return None
    succeeded = [run for run in runs if run.status == DagsterRunStatus.SUCCESS]
    return succeeded if succeeded else None


@pytest.fixture
def code_server(tmp_path):
    """A real code server (`dagster api grpc`) serving a module of one job."""
    module = tmp_path / "one_job.py"
    module.write_text("from dagster import job, op\n\n@op\ndef nothing():\n    pass\n\n@job\ndef one():\n    nothing()\n")
    port = free_port()
    log = tmp_path / "grpc.log"
    process = launch([str(VENV_BIN / "dagster"), "api", "grpc", "-f", str(module), "-h", LOOPBACK, "-p", str(port)],
                     log, cwd=tmp_path, env=dict(os.environ))
    try:
        from dagster._grpc.client import DagsterGrpcClient

        client = DagsterGrpcClient(port=port, host=LOOPBACK)
        _wait("the code server answering", lambda: _pings(client), log, timeout=120)
        yield port, process
    finally:
        stop_process(process, 10)


def _pings(client) -> bool:
    try:
        client.ping("")
        return True
    except Exception:  # not listening yet
        return False


def test_the_launchers_health_check_fails_a_run_only_when_its_worker_is_gone(code_server, tmp_path):
    """Given started runs whose code server is recorded: one the live server does not run (the server was restarted),
    one whose server is gone with its worker, one whose server is gone but whose worker (this process, a Python
    process of this host) still runs; then the first two are failed and the third is left running."""
    from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus, instance_for_test
    from dagster._core.events import EngineEventData
    from dagster._core.launcher.base import WorkerStatus
    from dagster._core.storage.tags import GRPC_INFO_TAG
    from dagster._core.test_utils import create_run_for_test

    port, _ = code_server
    with instance_for_test(overrides={"run_launcher": {"module": "deploy.run_launcher",
                                                       "class": "WatchedRunLauncher"}}) as instance:
        launcher = instance.run_launcher
        assert isinstance(launcher, WatchedRunLauncher)

        def started_on(server_port: int, pid: int | None = None):
            run = create_run_for_test(instance, job_name="landing", status=DagsterRunStatus.STARTED,
                                      tags={GRPC_INFO_TAG: json.dumps({"host": LOOPBACK, "port": server_port})})
            if pid is not None:
                instance.report_dagster_event(DagsterEvent(
                    DagsterEventType.ENGINE_EVENT.value, job_name="landing",
                    message=f"Started process for run (pid: {pid}).",
                    event_specific_data=EngineEventData.in_process(pid)), run_id=run.run_id)
            return run

        unknown_to_live_server = launcher.check_run_worker_health(started_on(port))
        assert unknown_to_live_server.status == WorkerStatus.FAILED
        assert "does not run it" in unknown_to_live_server.msg

        gone = free_port()  # nothing listens there: the server is gone
        dead_worker = subprocess.Popen([sys.executable, "-c", "pass"])
        dead_worker.wait()
        worker_gone = launcher.check_run_worker_health(started_on(gone, dead_worker.pid))
        assert worker_gone.status == WorkerStatus.FAILED and "is gone" in worker_gone.msg

        worker_alive = launcher.check_run_worker_health(started_on(gone, os.getpid()))
        assert worker_alive.status == WorkerStatus.RUNNING, worker_alive


def test_a_runs_process_is_handed_the_tables_it_carries_and_builds_only_their_topics(tmp_path, monkeypatch):
    """Given the rendered instance and a landing run of one table of two; when the launcher makes the reference the
    run's process is handed, then the instance made from it names that table, and the code location loaded in that
    process builds that table's topic alone, its landing job among them."""
    from dagster import DagsterInstance, DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    from deploy.run_launcher import run_instance_ref
    from kafka_lake.settings import RUN_TABLES_VARIABLE

    write_catalog(tmp_path / "catalog", TOPICS)
    write_instance(tmp_path / "home", environ={})
    monkeypatch.setenv(RUN_TABLES_VARIABLE, "")  # what the run's instance sets is undone after the test
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        from dagster import AssetKey

        one = create_run_for_test(instance, job_name="landing", status=DagsterRunStatus.NOT_STARTED,
                                  asset_selection=frozenset({AssetKey(["raw", "db_00001", "page_views"]),
                                                             AssetKey(["dead_letters", "db_00001", "page_views"])}))
        whole = create_run_for_test(instance, job_name="retention", status=DagsterRunStatus.NOT_STARTED)
        assert run_instance_ref(instance, whole) == instance.get_ref(), "no selection: the whole catalog"
        ref = run_instance_ref(instance, one)
    with DagsterInstance.from_ref(ref):
        assert os.environ[RUN_TABLES_VARIABLE] == "db_00001/page_views"

    loaded = subprocess.run(
        [sys.executable, "-c", "from platform_assets.definitions import defs; "
         "print(sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys())); "
         "print(defs.resolve_job_def('landing').name)"],
        env={**os.environ, "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"), "PLATFORM_AUTOMATION": "off",
             "LAKE_ROOT": str(tmp_path / "lake")},
        capture_output=True, text=True, timeout=300, check=True)
    keys, job = loaded.stdout.strip().splitlines()[-2:]
    assert "raw/db_00001/page_views" in keys and "db_00000" not in keys, keys
    assert job == "landing"
