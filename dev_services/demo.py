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
    traffic = produce_demo_traffic(broker.bootstrap_servers, load_catalog(samples.schema_catalog_dir), hours)
    print(traffic)
    starts = {topic: min([*counts.valid_by_kafka_hour, *counts.valid_by_event_hour]) for topic, counts in traffic.topics.items()}
    os.environ["SCHEMA_CATALOG_DIR"] = str(write_demo_catalog(Path(samples.schema_catalog_dir), DEMO_CATALOG_DIR, starts))
    settings = PlatformSettings.from_env()
    catalog = load_catalog(settings.schema_catalog_dir, table_format=settings.table_format)
    write_demo_env(DEMO_ENV_FILE, {"PII_HMAC_KEY": os.environ["PII_HMAC_KEY"], "SCHEMA_CATALOG_DIR": settings.schema_catalog_dir,
                                   "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
                                   "LAKE_ROOT": settings.lake_root if "://" in settings.lake_root
                                   else str(Path(settings.lake_root).resolve()),
                                   **({"TABLE_FORMAT": settings.table_format} if settings.table_format != DEFAULT_TABLE_FORMAT else {})})

    demo = _Demo(DagsterInstance.get(), build_definitions(catalog, settings))
    started = time.monotonic()
    # From the topic's first hour: late page views reach event hours before the first Kafka hour, whose
    # Kafka hours land empty, so no hour of the topic reads missing.
    landed = [demo.land(topic, hour) for topic in catalog.topics
              for hour in hour_range(topic.start_hour, hours[-1])]
    # What the sensor apply_landed_hours_to_current_state does after each landing, as one run per change topic.
    applied = [demo.apply_current_state(topic, hour_range(topic.start_hour, hours[-1]))
               for topic in catalog.topics if topic.current_state is not None]
    compacted = [demo.compact_due_hours(topic, settings.lake_root) for topic in catalog.topics]
    registered = [demo.register(topic, settings.lake_root) for topic in catalog.topics]
    retained = [demo.retain(topic) for topic in catalog.topics]
    elapsed = time.monotonic() - started
    _print_summary(landed, catalog, settings.lake_root, elapsed)
    _print_current_state(applied)
    _print_downstream(compacted, registered, retained)
    _print_sample_queries([topic for topic in catalog.topics if not _is_iceberg(topic)])
    _print_iceberg_queries([(topic, metadata) for topic, metadata, _ in registered if _is_iceberg(topic)])
    _print_current_state_queries(applied, settings)
    print(f"\n`make ui` serves this state with the demo's settings ({DEMO_ENV_FILE}): http://127.0.0.1:3000")
    return 0


def _is_iceberg(topic: TableSpec) -> bool:
    """Whether the topic is kept as an Iceberg table, whose results the demo shows with its snapshots and DuckDB."""
    from kafka_lake.tables.formats import table_format_type
    from kafka_lake.tables.iceberg.tables import IcebergTables

    return table_format_type(topic) is IcebergTables


def write_demo_catalog(samples: Path, target: Path, starts: dict[str, datetime]) -> Path:
    """The sample catalog, each topic starting at the first hour its demo records are placed in: the UI then
    counts a missing hour only where the demo's data has a real gap. The samples stay as they are."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(samples, target)
    for topic_file in sorted(target.glob("*/*/topic.yaml")):
        text = topic_file.read_text()
        topic = yaml.safe_load(text)["topic"]
        if topic not in starts:
            continue
        start = f'start_hour: "{starts[topic]:%Y-%m-%dT%H:00Z}"'
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


class _Demo:
    """Runs the platform's jobs through Dagster, as a sensor would: each run is found under its layer's job and its
    topic's tags."""

    def __init__(self, instance, definitions):
        self.instance, self.definitions = instance, definitions

    def _run(self, layer_run, asset_key, partition_key=None, tags=None):
        """One run of the layer's job selecting what `layer_run` selects, tagged as a sensor's run would be."""
        job = self.definitions.resolve_job_def(layer_run.job_name).get_subset(
            asset_selection=set(layer_run.assets),
            asset_check_selection=set(layer_run.checks) if layer_run.checks is not None else None)
        result = job.execute_in_process(partition_key=partition_key, instance=self.instance, run_config=QUIET_RUN,
                                        tags={**layer_run.tags, **(tags or {})}, raise_on_error=True)
        checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations() if c.asset_key == asset_key}
        materializations = [e.materialization for e in result.get_asset_materialization_events() if e.asset_key == asset_key]
        return materializations, checks

    def land(self, topic, hour):
        from kafka_lake.hours import KafkaHour
        from platform_assets.jobs import landing_run
        from platform_assets.keys import raw_key

        key = KafkaHour(hour).partition_key
        print(f"Landing raw/{topic.name} {key} …", flush=True)
        [raw], checks = self._run(landing_run(((topic,),)), raw_key(topic), key)
        return topic, key, raw.metadata, checks

    def compact_due_hours(self, topic, lake_root):
        from kafka_lake.hours import KafkaHour
        from platform_assets.jobs import compaction_run
        from platform_assets.keys import asset_key

        # Every hour from the topic's first, as the sensor compacts them: a table of a shared topic may have no rows
        # in the first hours of its topic, and would otherwise show them missing for good.
        landed = _landed_hours(topic, lake_root)
        hours = hour_range(topic.start_hour, landed[-1].start)
        due = [hour for hour in hours if not missing_raw_hours(topic, hour, landed)]
        rows = []
        for hour in due:
            key = KafkaHour(hour).partition_key
            print(f"Compacting compacted/{topic.name} {key} …", flush=True)
            [materialization], checks = self._run(compaction_run((topic,)), asset_key("compacted", topic), key)
            rows.append((key, materialization.metadata, checks))
        return topic, rows, len(hours) - len(due)

    def apply_current_state(self, topic, hours):
        """Every landed hour applied to the topic's current-state table, in order, in one run of its job."""
        from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

        from kafka_lake.hours import KafkaHour
        from platform_assets.current_state_assets import current_key
        from platform_assets.jobs import current_state_job

        first, last = KafkaHour(hours[0]).partition_key, KafkaHour(hours[-1]).partition_key
        print(f"Applying current/{topic.name} {first} … {last} in one run …", flush=True)
        job = self.definitions.resolve_job_def(current_state_job([topic]).name)
        result = job.execute_in_process(instance=self.instance, run_config=QUIET_RUN, raise_on_error=True, tags={
            ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last})
        checks = {c.partition: c.passed for c in result.get_asset_check_evaluations()}
        hourly = [(e.materialization.partition, e.materialization.metadata, checks.get(e.materialization.partition))
                  for e in result.get_asset_materialization_events() if e.asset_key == current_key(topic)]
        return topic, hourly

    def retain(self, topic):
        from platform_assets.jobs import retention_run
        from platform_assets.keys import asset_key

        print(f"Applying retention to retention/{topic.name} …", flush=True)
        [materialization], checks = self._run(retention_run((topic,)), asset_key("retention", topic))
        return topic, materialization.metadata, checks

    def register(self, topic, lake_root):
        from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

        from kafka_lake.hours import KafkaHour
        from platform_assets.jobs import registration_run
        from platform_assets.keys import asset_key

        # From the topic's first hour to its last landed one, hours without rows included (they get no partitions).
        first, last = KafkaHour(topic.start_hour).partition_key, _landed_hours(topic, lake_root)[-1].partition_key
        print(f"Registering catalog/{topic.name} {first} … {last} in one run …", flush=True)
        materializations, checks = self._run(registration_run((topic,)), asset_key("catalog", topic), tags={
            ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last})
        return topic, materializations[-1].metadata, checks  # one run, the same metadata for every hour


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


def _print_current_state(applied) -> None:
    for topic, hourly in applied:
        print(f"\n=== Current state: {topic.database}.{topic.current_state.table}, each landed hour of {topic.topic} "
              f"applied ===")
        print(f"{'hour':17} {'inserts':>8} {'updates':>8} {'deletes':>8} {'unchanged':>9} {'rows':>6} {'rewritten':>9} "
              f"{'snapshot':>20}  check")
        for hour, metadata, passed in hourly:
            value = lambda name: metadata[name].value
            verdict = "passed" if passed else "FAILED"
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
            verdict = "all passed" if all(checks.values()) else "FAILED"
            print(f"{'compacted/' + topic.name:34} {key:17} {metadata['files_before'].value:>12} "
                  f"{metadata['files_after'].value:>6} {metadata['rows'].value:>6}  {verdict}")
        print(f"{'compacted/' + topic.name:34} {not_due} placement hour(s) not due yet: later raw hours can still add rows")
    print("\n=== Table catalog ===")
    for topic, metadata, checks in registered:
        if _is_iceberg(topic):
            verdict = "the table holds every landed hour" if all(checks.values()) else "FAILED: the table differs from the landings"
            print(f"{metadata['table'].value} ({metadata['catalog'].value}): {metadata['columns'].value} columns, "
                  f"snapshot {metadata['iceberg_snapshot_id'].value} of {metadata['snapshots'].value}: {verdict}")
            continue
        verdict = "catalog matches storage" if all(checks.values()) else "FAILED: catalog differs from storage"
        print(f"{metadata['table'].value}: {metadata['columns'].value} columns, "
              f"{len(metadata['partitions'].value)} partitions in the catalog "
              f"(compaction published its generations; this run added {metadata['partitions_added'].value}): {verdict}")
    print("\n=== Retention ===")
    for topic, metadata, checks in retained:
        verdict = "nothing expired remains" if all(checks.values()) else "FAILED: expired partitions remain"
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


def _print_summary(landed, catalog, lake_root: str, elapsed: float) -> None:
    from kafka_lake.lake import layout
    from kafka_lake.lake.storage import LakeStorage

    print("\n=== Raw landing: what each Kafka hour produced ===")
    header = (f"{'asset':28} {'hour':17} {'rows':>6} {'dead':>5} {'tomb':>5} {'unrouted':>8} {'late':>5} {'files':>5} "
              f"{'slices':>6}  checks")
    print(header)
    print("-" * len(header))
    for topic, key, metadata, checks in landed:
        value = lambda name: metadata[name].value
        verdict = "all passed" if all(checks.values()) else "FAILED: " + ", ".join(n for n, ok in checks.items() if not ok)
        unrouted = metadata["unrouted"].value if "unrouted" in metadata else "-"  # routed tables' records no table takes
        print(f"{'raw/' + topic.name:28} {key:17} {value('rows'):>6} {value('dead_letters'):>5} {value('tombstones'):>5} "
              f"{unrouted:>8} {value('late_events'):>5} {value('files'):>5} {value('slices'):>6}  {verdict}")
    storage = LakeStorage(lake_root)
    print(f"\n=== The lake at {storage.root} ===")
    for topic in catalog.topics:
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
    print(f"\nLanded, compacted and registered in {elapsed:.0f}s. Browse it all with `make ui` (http://127.0.0.1:3000).")


if __name__ == "__main__":
    sys.exit(main())
