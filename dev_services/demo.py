"""`make demo`: the platform end to end on the embedded defaults, with a summary a person can read.

Starts a fresh local broker, produces several hours of sample traffic, lands every closed hour
of every catalog topic through Dagster on Spark, and reads the lake back: by table name with Spark SQL over the
Hive metastore, or with `TABLE_FORMAT=iceberg` (`make demo TABLE_FORMAT=iceberg`) the Iceberg tables with DuckDB.
"""


from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from kafka_lake.upkeep.compaction import missing_raw_hours

if TYPE_CHECKING:
    from kafka_lake.table_spec import TableSpec

DEMO_HOURS = 6
DEMO_PII_KEY = "demo-only-pii-key: set PII_HMAC_KEY in production"
STATE_DIR = Path(".lake")
# The settings the demo ran with, for `make ui` (dev_services/ui.py) to land and re-land the same topics.
DEMO_ENV_FILE = STATE_DIR / "demo.env"
# The demo's copy of the catalog, its topics starting where the demo's traffic starts.
DEMO_CATALOG_DIR = STATE_DIR / "demo_catalog"
# The runs' event logs stay in Dagster (see `make ui`); the terminal shows the summary.
QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# The code location `make ui` serves: the demo's runs are recorded as runs of its jobs.
WORKSPACE_FILE = Path(__file__).resolve().parent.parent / "workspace.yaml"
# Where the demo records its runs when DAGSTER_HOME is unset, as the Makefile sets it: `make ui` serves the same.
DEFAULT_DAGSTER_HOME = Path(".dagster_home")


def dagster_home(environ) -> Path:
    """The Dagster home the demo records into and `make ui` serves: $DAGSTER_HOME, else `.dagster_home`, absolute."""
    return Path(environ.get("DAGSTER_HOME") or DEFAULT_DAGSTER_HOME).resolve()


def main() -> int:
    os.environ.setdefault("PII_HMAC_KEY", DEMO_PII_KEY)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from dagster import DagsterInstance

    from dev_services import tansu
    from dev_services.demo_traffic import produce_demo_traffic
    from kafka_lake.hours import floor_hour
    from kafka_lake.settings import DEFAULT_TABLE_FORMAT, PlatformSettings
    from kafka_lake.topics.loader import load_catalog
    from platform_assets.definitions import build_definitions

    home = dagster_home(os.environ)
    if not (home / "dagster.yaml").exists():
        from deploy.instance import write_instance

        write_instance(home)  # as `make setup` renders it: SQLite under the home, the repository's limits
    os.environ["DAGSTER_HOME"] = str(home)
    samples = PlatformSettings.from_env()
    print("Starting a fresh local Kafka broker (Tansu) and an empty lake and metastore…", flush=True)
    tansu.stop_detached(STATE_DIR / "broker" / "tansu.pid")
    _reset_state(samples.lake_root)
    broker = tansu.start_detached(STATE_DIR / "broker" / "tansu.pid", STATE_DIR / "broker" / "tansu.log",
                                  port=int(samples.kafka_bootstrap_servers.rsplit(":", 1)[1]))
    # Hours that the wall clock has closed (end + grace), so every one of them can land now.
    last = floor_hour(datetime.now(timezone.utc)) - timedelta(hours=2)
    hours = [last - timedelta(hours=n) for n in reversed(range(DEMO_HOURS))]
    print(f"Producing {DEMO_HOURS} hours of sample traffic ({hours[0]:%Y-%m-%d %H:00} to {hours[-1]:%H:59} UTC)…", flush=True)
    # Tolerant, as the code location loads it: an entry of the user's that does not load costs only its own table.
    traffic = produce_demo_traffic(broker.bootstrap_servers, load_catalog(samples.schema_catalog_dir, tolerant=True), hours)
    print(traffic)
    starts = {topic: min([*counts.valid_by_kafka_hour, *counts.valid_by_event_hour]) for topic, counts in traffic.topics.items()}
    os.environ["SCHEMA_CATALOG_DIR"] = str(write_demo_catalog(Path(samples.schema_catalog_dir), DEMO_CATALOG_DIR, starts,
                                                              hours[0]))
    settings = PlatformSettings.from_env()
    catalog = load_catalog(settings.schema_catalog_dir, tolerant=True, table_format=settings.table_format)
    write_demo_env(DEMO_ENV_FILE, {"DAGSTER_HOME": str(home), "PII_HMAC_KEY": os.environ["PII_HMAC_KEY"],
                                   "SCHEMA_CATALOG_DIR": settings.schema_catalog_dir,
                                   "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
                                   "LAKE_ROOT": settings.lake_root if "://" in settings.lake_root
                                   else str(Path(settings.lake_root).resolve()),
                                   **({"TABLE_FORMAT": settings.table_format} if settings.table_format != DEFAULT_TABLE_FORMAT else {})})
    # The demo produces records for its sample topics only: the catalog's other tables (a user's own) are served by
    # `make ui` but not landed here, and said so.
    tables = [topic for topic in catalog.topics if topic.topic in traffic.topics]
    without_traffic = [topic for topic in catalog.topics if topic.topic not in traffic.topics]
    _print_set_aside(catalog.broken, without_traffic)

    demo = _Demo(DagsterInstance.get(), build_definitions(catalog, settings), settings.topics_per_run)
    started = time.monotonic()
    # Each layer as the sensors run it: runs of many tables, one per stretch of hours. From each table's first hour:
    # late page views reach event hours before the first Kafka hour, whose Kafka hours land empty, so no hour of the
    # topic reads missing.
    landed = demo.land({topic: hour_range(topic.start_hour, hours[-1]) for topic in tables})
    # What the sensor apply_landed_hours_to_current_state does after the landings.
    applied = demo.apply_current_state({topic: hour_range(topic.start_hour, hours[-1]) for topic in tables
                                        if topic.current_state is not None})
    compacted = demo.compact_due_hours(tables, settings.lake_root)
    registered = demo.register(tables, settings.lake_root)
    retained = demo.retain(tables)
    elapsed = time.monotonic() - started
    failed = demo.failed
    _print_summary(landed, [topic for topic in tables if topic.name not in failed], settings.lake_root, elapsed)
    _print_current_state(applied)
    _print_downstream(compacted, registered, retained)
    queried = [topic for topic, _, _ in registered]
    _print_sample_queries([topic for topic in queried if not _is_iceberg(topic)])
    _print_iceberg_queries([(topic, metadata) for topic, metadata, _ in registered if _is_iceberg(topic)])
    _print_current_state_queries(applied, settings)
    _print_set_aside(catalog.broken, without_traffic, failed)
    print(f"\n`make ui` serves this state with the demo's settings ({DEMO_ENV_FILE}): http://127.0.0.1:3000, or the "
          "port of `make ui PORT=…`")
    return 1 if failed else 0


def _print_set_aside(broken, without_traffic, failed: dict[str, str] | None = None) -> None:
    """The catalog's tables the demo did not land, and why: rejected entries, tables of topics it has no traffic for
    (a user's own: `make produce` makes some), and at the end the tables whose steps failed."""
    if not broken and not without_traffic and not failed:
        return
    print("\n=== Not landed by the demo ===")
    for entry in broken:
        print(f"{entry.database}/{entry.table}: its entry is rejected, {entry.error}")
    for topic in without_traffic:
        print(f"{topic.name}: the demo produces traffic for its sample topics only, not {topic.topic}; "
              f"`make produce TABLE={topic.name}` produces test records for it, then land them from `make ui`")
    for name, why in (failed or {}).items():
        print(f"{name}: FAILED at {why}")


def _is_iceberg(topic: TableSpec) -> bool:
    """Whether the topic is kept as an Iceberg table, whose results the demo shows with its snapshots and DuckDB."""
    from kafka_lake.tables.formats import table_format_type
    from kafka_lake.tables.iceberg.tables import IcebergTables

    return table_format_type(topic) is IcebergTables


def write_demo_catalog(samples: Path, target: Path, starts: dict[str, datetime], first_hour: datetime) -> Path:
    """The catalog, each sample topic starting at the first hour its demo records are placed in, and every other
    topic (a user's own) at the demo's first hour: the UI then counts a missing hour only where the demo's data has a
    real gap. The catalog itself stays as it is."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(samples, target)
    for topic_file in sorted(target.glob("*/*/topic.yaml")):
        text = topic_file.read_text()
        try:
            topic = yaml.safe_load(text)["topic"]
        except (yaml.YAMLError, TypeError, KeyError):
            continue  # a broken entry: the catalog's load names it
        start = f'start_hour: "{starts.get(topic, first_hour):%Y-%m-%dT%H:00Z}"'
        replaced, count = re.subn(r"(?m)^start_hour:.*$", start, text)
        topic_file.write_text(replaced if count else text.rstrip("\n") + "\n" + start + "\n")
    return target.resolve()


def hour_range(first: datetime, last: datetime) -> list[datetime]:
    return [first + timedelta(hours=n) for n in range(int((last - first) / timedelta(hours=1)) + 1)]


def write_demo_env(path: Path, settings: dict[str, str]) -> None:
    """`KEY='value'` lines, readable by a shell and by `dev_services.ui`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Written by `make demo`: the settings its topics were landed with.\n"
                    + "".join(f"{name}={shlex.quote(value)}\n" for name, value in settings.items()))


@dataclass
class _RunEvents:
    """What one run recorded: its materializations and check results in order, and the subjects (a Kafka topic for a
    landing, else a table) of the steps that failed, each with its cause."""

    materializations: list = field(default_factory=list)  # (asset key text, partition, metadata)
    checks: list = field(default_factory=list)  # AssetCheckEvaluation
    failed: dict[str, str] = field(default_factory=dict)

    def checks_of(self, asset: str, partition: str | None = None) -> dict:
        """The check results of the asset: of the partition, and those of no partition (a check of the whole run)."""
        return {c.check_name: c for c in self.checks
                if c.asset_key.to_user_string() == asset and c.partition in (partition, None)}

    def materialized(self, asset: str) -> list[tuple[str | None, dict]]:
        return [(partition, metadata) for key, partition, metadata in self.materializations if key == asset]


def code_location_job(job_name: str):
    """The job as a run of the code location `make ui` serves (workspace.yaml): the UI lists a job's runs by its name and
    by the code location the run records, which a run executed in this process has none of."""
    from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
    from dagster._core.remote_origin import (
        ManagedGrpcPythonEnvCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    [location] = yaml.safe_load(WORKSPACE_FILE.read_text())["load_from"]
    module = location["python_module"]
    target = LoadableTargetOrigin(executable_path=sys.executable, module_name=module["module_name"],
                                  working_directory=str(WORKSPACE_FILE.parent))
    repository = RemoteRepositoryOrigin(ManagedGrpcPythonEnvCodeLocationOrigin(target, module["location_name"]),
                                        SINGLETON_REPOSITORY_NAME)
    return RemoteJobOrigin(repository, job_name)


class _Demo:
    """Runs the platform's layer jobs as the sensors request them (`sensors.landing_requests`, `table_requests`): runs
    of many tables, one per layer and stretch of hours, each with the tags a sensor's run has, recorded as runs of the
    code location's jobs. A table whose step fails is named with its cause and left out of the later layers; the
    other tables go on."""

    def __init__(self, instance, definitions, topics_per_run: int):
        self.instance, self.definitions, self.topics_per_run = instance, definitions, topics_per_run
        self.failed: dict[str, str] = {}  # table name → the layer and cause of its failed step

    def _execute(self, request, tables, what: str) -> _RunEvents:
        """One run of `request` (its job, selection and tags), in this process, as the run worker executes it."""
        from dagster import DagsterEventType
        from dagster._core.definitions.job_base import InMemoryJob
        from dagster._core.execution.api import execute_run

        hours = request.tags.get("hours") or request.tags.get("dagster/partition")
        assets = ", ".join(key.to_user_string() for key in request.asset_selection if key.path[0] != "dead_letters")
        print(f"{what} {assets}{' ' + hours if hours else ''}, in one run of the {request.job_name} job …", flush=True)
        job = self.definitions.resolve_job_def(request.job_name).get_subset(
            asset_selection=set(request.asset_selection),
            asset_check_selection=set(request.asset_check_keys) if request.asset_check_keys is not None else None)
        run = self.instance.create_run_for_job(job_def=job, run_config=QUIET_RUN, tags={**job.run_tags, **request.tags},
                                               asset_selection=frozenset(request.asset_selection),
                                               remote_job_origin=code_location_job(request.job_name))
        execute_run(InMemoryJob(job), run, self.instance)
        events = _RunEvents()
        for record in self.instance.all_logs(run.run_id):
            event = record.dagster_event
            if event is None:
                continue
            if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
                materialization = event.event_specific_data.materialization
                events.materializations.append((materialization.asset_key.to_user_string(), materialization.partition,
                                                materialization.metadata))
            elif event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
                events.checks.append(event.event_specific_data)
            elif event.event_type == DagsterEventType.STEP_FAILURE:
                failure = event.step_failure_data
                data = failure.user_failure_data
                subject = data.metadata["subject"].value if data is not None and "subject" in data.metadata else ""
                cause = (data.description if data is not None and data.description else failure.error.message
                         if failure.error else "no message")
                events.failed[subject] = cause.strip().splitlines()[0]
        if not self.instance.get_run_by_id(run.run_id).is_success and not events.failed:
            events.failed.update({t.name: f"run {run.run_id[:8]} failed before its steps" for t in tables})
        for table in tables:
            cause = events.failed.get(table.name) or events.failed.get(table.topic)
            if cause is not None and table.name not in self.failed:
                self.failed[table.name] = f"{what.lower()}: {cause}"
                print(f"FAILED {table.name}, {self.failed[table.name]}", flush=True)
        return events

    def going_on(self, tables):
        return [table for table in tables if table.name not in self.failed]

    def land(self, due: dict) -> list:
        """Each table's hours, landed: (table, hour, raw metadata, checks) per hour."""
        from kafka_lake.hours import KafkaHour
        from platform_assets.sensors import landing_requests

        landed = []
        requests = landing_requests({t: [KafkaHour(hour) for hour in hours] for t, hours in due.items()},
                                    self.topics_per_run)
        for request in requests:
            tables = [t for t in due if raw_asset(t) in {k.to_user_string() for k in request.asset_selection}]
            events = self._execute(request, tables, "Landing")
            for table in tables:
                landed += [(table, partition, metadata, events.checks_of(raw_asset(table), partition))
                           for partition, metadata in events.materialized(raw_asset(table))]
        return sorted(landed, key=lambda row: (row[0].name, row[1]))

    def _table_runs(self, layer_run, due: dict, what: str) -> list[tuple[list, _RunEvents]]:
        from kafka_lake.hours import KafkaHour
        from platform_assets.sensors import table_requests

        runs = []
        wanted = {t: {KafkaHour(hour) for hour in hours} for t, hours in due.items() if hours}
        for request in table_requests(layer_run, wanted, self.topics_per_run):
            tables = [t for t in wanted if set(layer_run((t,)).assets) <= set(request.asset_selection)]
            runs.append((tables, self._execute(request, tables, what)))
        return runs

    def compact_due_hours(self, tables, lake_root) -> list:
        """Every due placement hour from each table's first hour, as the sensor compacts them (a table of a shared topic
        may have no rows in its topic's first hours, and would otherwise show them missing for good): per table, its
        compacted hours (hour, metadata, checks) and how many hours are not due yet."""
        from platform_assets.jobs import compaction_run

        due, not_due = {}, {}
        for table in self.going_on(tables):
            landed = _landed_hours(table, lake_root)
            hours = hour_range(table.start_hour, landed[-1].start)
            due[table] = [hour for hour in hours if not missing_raw_hours(table, hour, landed)]
            not_due[table.name] = len(hours) - len(due[table])
        rows: dict[str, list] = {table.name: [] for table in due}
        for run_tables, events in self._table_runs(compaction_run, due, "Compacting"):
            for table in run_tables:
                asset = f"compacted/{table.name}"
                rows[table.name] += [(partition, metadata, events.checks_of(asset, partition))
                                     for partition, metadata in events.materialized(asset)]
        return [(table, sorted(rows[table.name], key=lambda row: row[0]), not_due[table.name])
                for table in self.going_on(due)]

    def apply_current_state(self, due: dict) -> list:
        """Every landed hour of each change topic applied to its current-state table, in order."""
        from platform_assets.jobs import current_state_run

        applied = []
        for run_tables, events in self._table_runs(current_state_run, {t: h for t, h in due.items()
                                                                        if t in self.going_on(due)}, "Applying"):
            for table in self.going_on(run_tables):
                asset = f"current/{table.name}"
                applied.append((table, [(partition, metadata, events.checks_of(asset, partition).get(
                    "current_state_matches_landing")) for partition, metadata in events.materialized(asset)]))
        return applied

    def register(self, tables, lake_root) -> list:
        """Each table registered from its first hour to its last landed one, hours without rows included (they get no
        partitions): per table, the run's metadata (the same for every hour) and checks."""
        from kafka_lake.hours import KafkaHour
        from platform_assets.jobs import registration_run

        due = {table: hour_range(table.start_hour, _landed_hours(table, lake_root)[-1].start)
               for table in self.going_on(tables)}
        registered = []
        for run_tables, events in self._table_runs(registration_run, due, "Registering"):
            for table in self.going_on(run_tables):
                asset = f"catalog/{table.name}"
                last = KafkaHour(due[table][-1]).partition_key
                [(_, metadata)] = [(p, m) for p, m in events.materialized(asset) if p == last]
                registered.append((table, metadata, events.checks_of(asset)))
        return registered

    def retain(self, tables) -> list:
        """Retention applied once to every table, in one run of the retention job."""
        from dagster import RunRequest

        from platform_assets.jobs import retention_run

        going_on = self.going_on(tables)
        if not going_on:
            return []
        layer_run = retention_run(going_on)
        events = self._execute(RunRequest(job_name=layer_run.job_name, asset_selection=list(layer_run.assets),
                                          tags=layer_run.tags), going_on, "Applying retention to")
        retained = []
        for table in self.going_on(going_on):
            asset = f"retention/{table.name}"
            [(_, metadata)] = events.materialized(asset)
            retained.append((table, metadata, events.checks_of(asset)))
        return retained


def raw_asset(table) -> str:
    return f"raw/{table.name}"


def _landed_hours(topic, lake_root: str) -> list:
    from kafka_lake.lake.manifests import ManifestStore
    from kafka_lake.lake.storage import LakeStorage

    return ManifestStore(LakeStorage(lake_root), topic.database, topic.table).landed_hours()


def _reset_state(lake_root: str) -> None:
    """The broker starts empty, so the lake, its manifests and the metastore start empty too."""
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR)
    if not lake_root.startswith("s3://") and Path(lake_root).exists():
        shutil.rmtree(lake_root)


def verdict_of(checks: dict, passed: str) -> str:
    """`passed` when every check passed, else each check that did not, with its severity and why: the check's own
    description, never a bare FAILED."""
    from dagster import AssetCheckSeverity

    failed = [f"{name} {'warns' if check.severity == AssetCheckSeverity.WARN else 'FAILED'}: "
              f"{check.description or '(no description)'}" for name, check in checks.items() if not check.passed]
    return passed if not failed else "; ".join(failed)


def _print_current_state(applied) -> None:
    for topic, hourly in applied:
        print(f"\n=== Current state: {topic.database}.{topic.current_state.table}, each landed hour of {topic.topic} "
              f"applied ===")
        print(f"{'hour':17} {'inserts':>8} {'updates':>8} {'deletes':>8} {'unchanged':>9} {'rows':>6} {'rewritten':>9} "
              f"{'snapshot':>20}  check")
        for hour, metadata, check in hourly:
            value = lambda name: metadata[name].value
            verdict = verdict_of({check.check_name: check} if check is not None else {}, "passed")
            print(f"{hour:17} {value('inserts'):>8} {value('updates'):>8} {value('deletes'):>8} {value('unchanged'):>9} "
                  f"{value('dagster/row_count'):>6} {value('files_rewritten'):>9} {value('iceberg_snapshot_id'):>20}  {verdict}")


# The demo's question to each current-state table; `{table}` is DuckDB's `iceberg_scan(…)` of it.
CURRENT_STATE_QUERIES = {
    "crm.public.customers": "SELECT tier, count(*) AS customers, count(marketing_opt_in) AS answered_opt_in, "
    "max(updated_at) AS last_change FROM {table} GROUP BY tier ORDER BY tier",
}


def _print_current_state_queries(applied, settings) -> None:
    """The current-state tables read from their metadata files by DuckDB, as any Iceberg reader would."""
    if not applied:
        return
    from kafka_lake.tables.iceberg.catalog import IcebergCatalogConfig, open_catalog
    from kafka_lake.tables.iceberg.duckdb_reader import duckdb_connection

    catalog = open_catalog(IcebergCatalogConfig.from_settings(settings))
    connection = duckdb_connection()
    print("\n=== Querying the current-state tables (DuckDB's iceberg extension, from each table's metadata file) ===")
    for topic, _ in applied:
        table = catalog.load_table((topic.database, topic.current_state.table))
        query = CURRENT_STATE_QUERIES.get(topic.topic, "SELECT count(*) AS rows FROM {table}").format(
            table=f"iceberg_scan('{table.metadata_location}')")
        print(f"duckdb> {query};")
        print(connection.sql(query))


def _print_downstream(compacted, registered, retained) -> None:
    print("\n=== Compaction: each due placement hour rewritten, rows unchanged ===")
    print(f"{'asset':34} {'hour':17} {'files before':>12} {'after':>6} {'rows':>6}  checks")
    for topic, rows, not_due in compacted:
        for key, metadata, checks in rows:
            verdict = verdict_of(checks, "all passed")
            print(f"{'compacted/' + topic.name:34} {key:17} {metadata['files_before'].value:>12} "
                  f"{metadata['files_after'].value:>6} {metadata['rows'].value:>6}  {verdict}")
        print(f"{'compacted/' + topic.name:34} {not_due} placement hour(s) not due yet: later raw hours can still add rows")
    print("\n=== Table catalog ===")
    for topic, metadata, checks in registered:
        if _is_iceberg(topic):
            verdict = verdict_of(checks, "the table holds every landed hour")
            print(f"{metadata['table'].value} ({metadata['catalog'].value}): {metadata['columns'].value} columns, "
                  f"snapshot {metadata['iceberg_snapshot_id'].value} of {metadata['snapshots'].value}: {verdict}")
            continue
        verdict = verdict_of(checks, "catalog matches storage")
        print(f"{metadata['table'].value}: {metadata['columns'].value} columns, "
              f"{len(metadata['partitions'].value)} partitions in the catalog "
              f"(compaction published its generations; this run added {metadata['partitions_added'].value}): {verdict}")
    print("\n=== Retention ===")
    for topic, metadata, checks in retained:
        verdict = verdict_of(checks, "nothing expired remains")
        print(f"retention/{topic.name}: kept {metadata['retention_days'].value} days, "
              f"{metadata['expired_partitions'].value} partition(s) expired, {metadata['erased_rows'].value} row(s) erased: {verdict}")


# What the demo asks of each sample table; `{table}` is its name, or DuckDB's `iceberg_scan(…)` of an Iceberg table.
SAMPLE_QUERIES = {
    "shop.page_views": "SELECT schema_version, count(*) AS views, count(DISTINCT user_id) AS visitors, "
    "max(duration_ms) AS longest_ms FROM {table} GROUP BY schema_version ORDER BY schema_version",
    "payments.transactions": "SELECT currency, status, count(*) AS payments, sum(amount) AS total "
    "FROM {table} GROUP BY currency, status ORDER BY currency, status LIMIT 8",
}


def _sample_query(topic, table: str) -> str:
    return SAMPLE_QUERIES.get(f"{topic.database}.{topic.table}", "SELECT count(*) FROM {table}").format(table=table)


def _print_sample_queries(topics) -> None:
    if not topics:
        return
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    print("\n=== Querying the tables by name (Spark SQL over the Hive metastore) ===")
    for topic in topics:
        query = _sample_query(topic, f"{topic.database}.{topic.table}")
        print(f"spark-sql> {query};")
        spark.sql(query).show(truncate=False)


def _print_iceberg_queries(tables) -> None:
    """The Iceberg tables read by a reader that needs no catalog: DuckDB, from each table's current metadata file."""
    if not tables:
        return
    from kafka_lake.tables.iceberg.duckdb_reader import duckdb_connection

    connection = duckdb_connection()
    print("\n=== Querying the Iceberg tables (DuckDB's iceberg extension, from each table's metadata file) ===")
    for topic, metadata in tables:
        query = _sample_query(topic, f"iceberg_scan('{metadata['metadata_location'].value}')")
        print(f"duckdb> {query};")
        print(connection.sql(query))


def _print_summary(landed, tables, lake_root: str, elapsed: float) -> None:
    from kafka_lake.lake import layout
    from kafka_lake.lake.storage import LakeStorage

    print("\n=== Raw landing: what each Kafka hour produced ===")
    header = (f"{'asset':28} {'hour':17} {'rows':>6} {'dead':>5} {'tomb':>5} {'unrouted':>8} {'late':>5} {'files':>5} "
              f"{'slices':>6}  checks")
    print(header)
    print("-" * len(header))
    for topic, key, metadata, checks in landed:
        value = lambda name: metadata[name].value
        verdict = verdict_of(checks, "all passed")
        unrouted = metadata["unrouted"].value if "unrouted" in metadata else "-"  # routed tables' records no table takes
        print(f"{'raw/' + topic.name:28} {key:17} {value('rows'):>6} {value('dead_letters'):>5} {value('tombstones'):>5} "
              f"{unrouted:>8} {value('late_events'):>5} {value('files'):>5} {value('slices'):>6}  {verdict}")
    storage = LakeStorage(lake_root)
    print(f"\n=== The lake at {storage.root} ===")
    for topic in tables:
        per_folder: Counter = Counter()
        for stored in storage.list_files(layout.table_prefix(topic.database, topic.table)):
            if layout.parse_data_file_name(stored.path) is None and _is_iceberg(topic):
                continue  # the table's metadata, beside its data folders
            folder = stored.path.rsplit("/", 1)[0].split("/", 2)[2]
            per_folder[folder] += 1
        dead = len(storage.list_files(layout.dead_letter_prefix(topic.database, topic.table)))
        print(f"{topic.name}: {sum(per_folder.values())} Parquet files in {len(per_folder)} "
              f"schema_version/date/hour folders, {dead} dead-letter files")
        for folder, files in sorted(per_folder.items()):
            print(f"    {folder}: {files} file(s)")
    print(f"\nLanded, compacted and registered in {elapsed:.0f}s. Browse it all with `make ui` (http://127.0.0.1:3000, "
          "or `make ui PORT=…`).")


if __name__ == "__main__":
    sys.exit(main())
