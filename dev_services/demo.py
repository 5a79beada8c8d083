"""`make demo`: the platform end to end on the embedded defaults, with a summary a person can read.

Starts a fresh local broker, produces several hours of sample traffic, lands every closed hour
of every catalog topic through Dagster on Spark, and reads the lake back.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

DEMO_HOURS = 4
DEMO_PII_KEY = "demo-only-pii-key: set PII_HMAC_KEY in production"
STATE_DIR = Path(".lake")
# The runs' event logs stay in Dagster (see `make ui`); the terminal shows the summary.
QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def main() -> int:
    os.environ.setdefault("PII_HMAC_KEY", DEMO_PII_KEY)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from dagster import DagsterInstance, materialize

    from dev_services import tansu
    from dev_services.demo_traffic import produce_demo_traffic
    from kafka_lake.catalog import load_catalog
    from kafka_lake.hours import KafkaHour, floor_hour
    from kafka_lake.settings import PlatformSettings
    from platform_assets.assets import raw_landing_asset
    from platform_assets.definitions import platform_resources

    settings = PlatformSettings.from_env()
    catalog = load_catalog(settings.schema_catalog_dir)
    _reset_lake(settings.lake_root)
    print("Starting a fresh local Kafka broker (Tansu)…", flush=True)
    tansu.stop_detached(STATE_DIR / "broker" / "tansu.pid")
    broker = tansu.start_detached(STATE_DIR / "broker" / "tansu.pid", STATE_DIR / "broker" / "tansu.log",
                                  port=int(settings.kafka_bootstrap_servers.rsplit(":", 1)[1]))
    # Hours that the wall clock has closed (end + grace), so every one of them can land now.
    last = floor_hour(datetime.now(timezone.utc)) - timedelta(hours=2)
    hours = [last - timedelta(hours=n) for n in reversed(range(DEMO_HOURS))]
    print(f"Producing {DEMO_HOURS} hours of sample traffic ({hours[0]:%Y-%m-%d %H:00} to {hours[-1]:%H:59} UTC)…", flush=True)
    traffic = produce_demo_traffic(broker.bootstrap_servers, catalog, hours)
    print(traffic)

    instance = DagsterInstance.get()
    resources = platform_resources(settings)
    landed = []
    started = time.monotonic()
    for topic in catalog.topics:
        asset = raw_landing_asset(topic)
        for hour in hours:
            key = KafkaHour(hour).partition_key
            print(f"Landing raw/{topic.name} {key} …", flush=True)
            result = materialize([asset], partition_key=key, resources=resources, instance=instance,
                                 run_config=QUIET_RUN, raise_on_error=True)
            [raw] = [m for m in result.asset_materializations_for_node(asset.node_def.name)
                     if m.asset_key.path[0] == "raw"]
            checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
            landed.append((topic, key, raw.metadata, checks))
    elapsed = time.monotonic() - started
    _print_summary(landed, catalog, settings.lake_root, elapsed)
    return 0


def _reset_lake(lake_root: str) -> None:
    if not lake_root.startswith("s3://") and Path(lake_root).exists():
        shutil.rmtree(lake_root)  # the broker starts empty, so old manifests would not match it


def _print_summary(landed, catalog, lake_root: str, elapsed: float) -> None:
    from kafka_lake import layout
    from kafka_lake.storage import LakeStorage

    print("\n=== Raw landing: what each Kafka hour produced ===")
    header = f"{'asset':28} {'hour':17} {'rows':>6} {'dead':>5} {'tomb':>5} {'late':>5} {'files':>5} {'slices':>6}  checks"
    print(header)
    print("-" * len(header))
    for topic, key, metadata, checks in landed:
        value = lambda name: metadata[name].value  # noqa: E731
        verdict = "all passed" if all(checks.values()) else "FAILED: " + ", ".join(n for n, ok in checks.items() if not ok)
        print(f"{'raw/' + topic.name:28} {key:17} {value('rows'):>6} {value('dead_letters'):>5} {value('tombstones'):>5} "
              f"{value('late_events'):>5} {value('files'):>5} {value('slices'):>6}  {verdict}")
    storage = LakeStorage(lake_root)
    print(f"\n=== The lake at {storage.root} ===")
    for topic in catalog.topics:
        per_folder: Counter = Counter()
        for stored in storage.list_files(layout.table_prefix(topic.database, topic.table)):
            folder = stored.path.rsplit("/", 1)[0].split("/", 2)[2]
            per_folder[folder] += 1
        dead = len(storage.list_files(layout.dead_letter_prefix(topic.database, topic.table)))
        print(f"{topic.name}: {sum(per_folder.values())} Parquet files in {len(per_folder)} "
              f"schema_version/date/hour folders, {dead} dead-letter files")
        for folder, files in sorted(per_folder.items()):
            print(f"    {folder}: {files} file(s)")
    print(f"\nLanded {len(landed)} topic-hours in {elapsed:.0f}s. Browse them with `make ui` (http://127.0.0.1:3000).")


if __name__ == "__main__":
    sys.exit(main())
