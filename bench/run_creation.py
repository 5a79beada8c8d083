"""`make bench-run-creation`: what the runs of one hour of N topics cost to create, every layer, done as Dagster's daemon
creates a sensor's runs: the job's subset for the run's assets and checks and its execution plan (the code server's
part), and `create_run` (the daemon's: the run, its snapshots and a planned event per asset and check it selects).

The code location is loaded in this process (as `make ui` loads it), so the code server's part and the daemon's are
both this process's CPU, without the gRPC between them; a fresh SQLite instance, or Postgres when DAGSTER_PG_* is set.
Copies of `shop/page_views` as `make bench-runs` makes them. Each size is measured twice on the one load: with the
platform's instance (deploy/dagster.yaml, its events stored in batches) and, as the baseline, with Dagster's own
(the same settings without `instance_class` and the batching event log). Prints CPU seconds per phase and layer, the
planned events stored, and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _cpu() -> float:
    return time.process_time()


def baseline_instance_file(home: Path) -> None:
    """The rendered instance without the platform's batching: Dagster's own instance and event log."""
    import yaml

    path = home / "dagster.yaml"
    settings = yaml.safe_load(path.read_text())
    settings.pop("instance_class", None)
    if settings["event_log_storage"]["class"] == "BatchingPostgresEventLogStorage":
        settings["event_log_storage"].update({"module": "dagster_postgres.event_log", "class": "PostgresEventLogStorage"})
    else:
        settings.pop("event_log_storage")  # Dagster's SQLite event log under the home
    path.write_text(yaml.safe_dump(settings))


def measure(topics: int, work: Path, topics_per_run: int | None) -> dict:
    from bench.runs import write_catalog

    catalog = work / "catalog"
    write_catalog(catalog, topics)
    os.environ.update({"SCHEMA_CATALOG_DIR": str(catalog), "LAKE_ROOT": str(work / "lake"),
                       "PLATFORM_AUTOMATION": "off"})
    if topics_per_run:
        os.environ["TOPICS_PER_RUN"] = str(topics_per_run)

    from dagster import DagsterInstance
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.remote_representation.code_location import InProcessCodeLocation
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    from deploy.instance import write_instance
    from kafka_lake.hours import KafkaHour
    from kafka_lake.settings import DEFAULT_TOPICS_PER_RUN
    from kafka_lake.topics.loader import load_catalog
    from platform_assets import sensors
    from platform_assets.jobs import compaction_run, registration_run

    homes = {"platform": work / "home", "dagster default": work / "baseline_home"}
    for home in homes.values():
        write_instance(home, environ=os.environ)
    baseline_instance_file(homes["dagster default"])
    started = _cpu()
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name="platform_assets.definitions",
                             working_directory=str(REPO)), location_name="platform_assets.definitions")
    location = InProcessCodeLocation(origin, instance=DagsterInstance.from_config(str(homes["platform"])))
    load_s = _cpu() - started
    tables = load_catalog(catalog).topics
    hour = KafkaHour.containing(datetime.now(timezone.utc)).previous()
    per_run = topics_per_run or DEFAULT_TOPICS_PER_RUN
    layers = {
        "landing": sensors.landing_requests({table: [hour] for table in tables}, per_run),
        "compaction": sensors.table_requests(compaction_run, {table: {hour} for table in tables}, per_run),
        "registration": sensors.table_requests(registration_run, {table: {hour} for table in tables}, per_run),
    }
    result: dict = {"topics": topics, "load_cpu_s": round(load_s, 1), "instances": {}}
    for name, home in homes.items():
        instance = DagsterInstance.from_config(str(home))
        result["instances"][name] = {layer: create_runs(location, instance, requests, topics)
                                     for layer, requests in layers.items()}
        for layer, measured in result["instances"][name].items():
            print(f"  {topics} topics, {name} instance, {layer}: {measured['runs']} runs, subset "
                  f"{measured['subset']} + plan {measured['plan']} + create {measured['create']} = "
                  f"{measured['total_cpu_s']} CPU s, {measured['planned_events']} planned events", flush=True)
    for layer in layers:
        ours, base = (result["instances"][name][layer]["total_cpu_s"] for name in homes)
        print(f"  {layer}: {ours} CPU s against {base} with Dagster's default instance ({ours / base:.2f}x)")
    first_run = layers["landing"][0]
    carried = sorted({"/".join(key.path[1:]) for key in first_run.asset_selection or []})
    whole, own = run_process_load(first_run, []), run_process_load(first_run, carried)
    result["run_process_load_cpu_s"] = {"whole catalog": whole, f"its {len(carried)} tables": own}
    print(f"  a landing run's process, loading the code location and its job: {own} CPU s with the {len(carried)} "
          f"tables it carries against {whole} with the whole catalog ({own / whole:.2f}x)", flush=True)
    return result


RUN_PROCESS = """
import json, sys
from dagster import AssetKey
from platform_assets.definitions import defs
selection = {AssetKey(path) for path in json.loads(sys.argv[1])}
defs.get_repository_def().get_job("landing").get_subset(asset_selection=selection)
"""


def run_process_load(request, tables: list[str]) -> float:
    """The CPU a run's process spends before its first step, as the code server's worker does it: the code location
    imported and the run's job resolved and subset to its assets; with `tables`, as the run launcher hands them."""
    import resource
    import subprocess

    from kafka_lake.settings import RUN_TABLES_VARIABLE

    env = {**os.environ, RUN_TABLES_VARIABLE: ",".join(tables)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", RUN_PROCESS, json.dumps([key.path for key in request.asset_selection])],
                   env=env, check=True, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1)


def create_runs(location, instance, requests, topics: int) -> dict:
    """The runs of `requests`, created as the daemon creates a sensor's runs; CPU seconds by phase."""
    from dagster import DagsterEventType, DagsterRunStatus
    from dagster._core.definitions.selector import JobSubsetSelector

    repository = location.get_repository("__repository__")
    phases = {"subset": 0.0, "plan": 0.0, "create": 0.0}
    planned = 0
    for request in requests:
        at = _cpu()
        remote_job = location.get_job(JobSubsetSelector(
            location_name=location.name, repository_name=repository.name, job_name=request.job_name,
            op_selection=None, asset_selection=request.asset_selection, asset_check_selection=request.asset_check_keys))
        phases["subset"] += _cpu() - at
        at = _cpu()
        plan = location.get_execution_plan(remote_job, request.run_config, step_keys_to_execute=None,
                                           known_state=None, instance=instance)
        phases["plan"] += _cpu() - at
        at = _cpu()
        run = instance.create_run(
            job_name=request.job_name, run_id=None, run_config=request.run_config,
            resolved_op_selection=remote_job.resolved_op_selection, step_keys_to_execute=None,
            status=DagsterRunStatus.NOT_STARTED, op_selection=None, root_run_id=None, parent_run_id=None,
            tags={**request.tags, "dagster/run_key": request.run_key}, job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot, parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(), job_code_origin=remote_job.get_python_origin(),
            asset_selection=frozenset(request.asset_selection or []),
            asset_check_selection=(frozenset(request.asset_check_keys) if request.asset_check_keys is not None
                                   else None),
            asset_graph=repository.asset_graph)
        phases["create"] += _cpu() - at
        planned += len(instance.get_records_for_run(run.run_id, of_type={
            DagsterEventType.ASSET_MATERIALIZATION_PLANNED, DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED},
            limit=100_000).records)
    total = sum(phases.values())
    return {"runs": len(requests), **{k: round(v, 1) for k, v in phases.items()}, "total_cpu_s": round(total, 1),
            "planned_events": planned, "ms_a_topic": round(1000 * total / topics, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--topics-per-run", type=int, default=None)
    parser.add_argument("--postgres", action="store_true", help="the instance in a PostgreSQL server started for it")
    args = parser.parse_args(argv)
    storage = "Postgres" if args.postgres else "SQLite"
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; instance in {storage}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-run-creation-") as work, ExitStack() as services:
        if args.postgres:
            from dev_services.postgres import PostgresServer

            os.environ.update(services.enter_context(PostgresServer()).env())
        else:
            for name in [name for name in os.environ if name.startswith("DAGSTER_PG_")]:
                del os.environ[name]
        result = measure(args.topics, Path(work), args.topics_per_run)
    result["storage"] = storage
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
