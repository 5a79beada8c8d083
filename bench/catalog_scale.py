"""`make bench-catalog`: what a catalog of many topics costs the code location, the sensors and the UI, at several
sizes in one run, each cost with its growth against the smallest size's (linear growth is the ratio of the sizes).

Each size is a generated catalog in a temporary folder: copies of `shop/page_views`, each its own database, table and
Kafka topic (16 partitions on a fresh local broker, one record each stamped after the hour the sensors judge).
Measured per size: the CPU and peak RSS of `dagster definitions validate` (the code location's load, in a process
of its own); one tick of each sensor that asks the broker or the instance; the webserver's answer to the asset
catalog's GraphQL query (bytes and seconds); and, in headless Chromium, one topic's asset page and its lineage. At the
`--load-only` sizes (5,000 and 10,000 topics), the load alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
TEMPLATE = REPO / "schema_catalog" / "shop" / "page_views"
# The topic whose pages the browser opens: the first copy, present at every size.
PAGE_TOPIC = ("db_0000", "page_views")
CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOAD_TIMEOUT_S = 1200  # a guard against a hang: the 2,000-topic load took 316 s of wall before the shared jobs

# What the UI's asset catalog asks of every asset (`AssetCatalogTableQuery` and the workspace's asset nodes).
ASSET_CATALOG_QUERY = """
{
  assetsOrError {
    ... on AssetConnection {
      nodes {
        id
        key { path }
        definition {
          id groupName description kinds jobNames isPartitioned isMaterializable isObservable
          partitionDefinition { description }
          owners { ... on TeamAssetOwner { team } ... on UserAssetOwner { email } }
          tags { key value }
          repository { name location { name } }
          assetChecksOrError { ... on AssetChecks { checks { name } } }
        }
      }
    }
  }
}
"""


def topic_name(n: int) -> str:
    return f"bench.topic_{n:04d}"


def write_catalog(directory: Path, topics: int, databases: int | None = None) -> None:
    """`topics` copies of the page-view topic, each its own database (`db_NNNN`), table and Kafka topic; or spread over
    `databases` databases (a Dagster asset group each), tables `page_views_NNNN`."""
    for n in range(topics):
        folder = (directory / f"db_{n:04d}" / "page_views" if databases is None or databases >= topics
                  else directory / f"db_{n % databases:04d}" / f"page_views_{n:04d}")
        shutil.copytree(TEMPLATE, folder)
        text = (folder / "topic.yaml").read_text().replace("topic: shop.page_views", f"topic: {topic_name(n)}")
        text = text.replace("registry_id: 1001", f"registry_id: {100_000 + 2 * n}")
        (folder / "topic.yaml").write_text(text.replace("registry_id: 1002", f"registry_id: {100_001 + 2 * n}"))


def catalog_env(catalog: Path, home: Path) -> dict:
    return {**os.environ, "SCHEMA_CATALOG_DIR": str(catalog), "PLATFORM_AUTOMATION": "off", "DAGSTER_HOME": str(home),
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


@dataclass
class SizeResult:
    topics: int
    load_cpu_s: float = 0.0
    load_wall_s: float = 0.0
    load_rss_mb: float = 0.0
    ticks: dict[str, float] = field(default_factory=dict)
    unread_topics: int = 0  # not judged by the first tick of land_closed_hours
    unread_after_next: int = 0  # nor by the next
    requested: int = 0  # hours requested by both ticks: one a topic
    health_unjudged: int = 0  # topics topic_health did not judge in full in its tick
    webserver_ready_s: float = 0.0  # from its start until it serves the loaded code location
    graphql_bytes: int = 0
    graphql_s: float = 0.0
    ui: dict[str, float] = field(default_factory=dict)


def measure_load(catalog: Path, home: Path, result: SizeResult) -> None:
    """`dagster definitions validate` in a process of its own: its CPU (user + system) and peak RSS from wait4."""
    started = time.perf_counter()
    process = subprocess.Popen([str(VENV_BIN / "dagster"), "definitions", "validate", "-m", "platform_assets.definitions"],
                               cwd=REPO, env=catalog_env(catalog, home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = process.stdout.read().decode(errors="replace") if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    result.load_wall_s = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"`dagster definitions validate` failed at {result.topics} topics:\n{output[-3000:]}")
    result.load_cpu_s = usage.ru_utime + usage.ru_stime
    result.load_rss_mb = usage.ru_maxrss / 1024


def measure_ticks(catalog_dir: Path, work: Path, partitions: int, result: SizeResult) -> None:
    """One tick of each sensor that asks the broker, the lake or the instance, against a fresh broker."""
    from dagster import AssetMaterialization, build_sensor_context, instance_for_test

    from bench.sensor_ticks import create_topics, produce_closing_records
    from dev_services.tansu import TansuBroker
    from kafka_lake.hours import KafkaHour
    from kafka_lake.topics.loader import load_catalog
    from platform_assets import sensors
    from platform_assets.keys import raw_key
    from resources import AlertWebhookResource, KafkaResource, LakeStorageResource

    logging.getLogger("dagster").setLevel(logging.WARNING)  # each tick logs a line a topic: read by the bench, not shown
    names = [topic_name(n) for n in range(result.topics)]
    hour = KafkaHour.containing(datetime.now(timezone.utc)).previous()
    now = hour.end + timedelta(minutes=5)  # inside the window where closing an hour asks the broker
    catalog = load_catalog(catalog_dir)
    with TansuBroker(log_file=work / "tansu.log") as broker:
        create_topics(broker, names, partitions)
        produce_closing_records(broker, names, partitions, hour.end + timedelta(minutes=3))
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        lake = LakeStorageResource(root=str(work / "lake"))
        alerts = AlertWebhookResource()
        sensors._now = lambda: now
        with instance_for_test() as instance:
            def tick(sensor, cursor=None, **resources):
                started = time.perf_counter()
                outcome = sensor(build_sensor_context(instance=instance, cursor=cursor,
                                                    resources={"alerts": AlertWebhookResource(), **resources}))
                return outcome, time.perf_counter() - started

            landing_sensor = sensors.landing_sensor(catalog)
            first, result.ticks["land_closed_hours"] = tick(
                landing_sensor, json.dumps({name: hour.partition_key for name in names}), kafka=kafka)
            result.unread_topics = len(json.loads(first.cursor).get(sensors.UNREAD, []))
            # The topics the broker did not answer for within the first tick are judged first by the next.
            second, result.ticks["land_closed_hours, next tick"] = tick(landing_sensor, first.cursor, kafka=kafka)
            result.unread_after_next = len(json.loads(second.cursor).get(sensors.UNREAD, []))
            result.requested = len(first.run_requests) + len(second.run_requests)
            follow_up = sensors.follow_up_sensor(catalog)
            start, _ = tick(follow_up, lake=lake)
            for topic in catalog.topics:  # every topic's hour landed since the last tick
                instance.report_runless_asset_event(AssetMaterialization(raw_key(topic), partition=hour.previous().partition_key))
            _, result.ticks["compact_and_register_landed_hours"] = tick(follow_up, start.cursor, lake=lake)
            # A new sensor (no cursor) starts each topic after its newest landed hour, which it asks the instance.
            _, result.ticks["land_closed_hours, no cursor"] = tick(landing_sensor, kafka=kafka)
            health, result.ticks["topic_health"] = tick(sensors.health_sensor(catalog), kafka=kafka, lake=lake, alerts=alerts)
            result.health_unjudged = len(json.loads(health.cursor).get(sensors.UNREAD, []))
            _, result.ticks["topics_missing_from_catalog"] = tick(sensors.missing_topics_sensor(catalog), kafka=kafka,
                                                                  lake=lake, alerts=alerts)


def measure_webserver(catalog: Path, work: Path, result: SizeResult, browser: bool) -> None:
    """The webserver on the catalog: the asset catalog's GraphQL answer, and one topic's pages in Chromium."""
    from dev_services.ports import LOOPBACK, free_port
    from tests.dagster_servers import graphql, loaded_location, serving, webserver_command

    workspace = work / "workspace.yaml"  # in-process, as `make ui` loads the code location
    workspace.write_text("load_from:\n  - python_module:\n      module_name: platform_assets.definitions\n"
                         "      location_name: kafka_lake\n")
    port, log = free_port(), work / "webserver.log"
    started = time.perf_counter()
    # The webserver listens once it has loaded the code location's snapshot: minutes for thousands of topics.
    with serving(webserver_command(workspace, port), port, log, catalog_env(catalog, work / "home"), REPO,
                 "dagster-webserver", start_timeout=LOAD_TIMEOUT_S):
        loaded_location(port, "kafka_lake", log, timeout=LOAD_TIMEOUT_S)
        result.webserver_ready_s = time.perf_counter() - started
        graphql(port, "{ version }")
        started = time.perf_counter()
        answer = graphql(port, ASSET_CATALOG_QUERY)
        result.graphql_s = time.perf_counter() - started
        result.graphql_bytes = len(json.dumps(answer))
        nodes = answer["assetsOrError"]["nodes"]
        assert len(nodes) == 5 * result.topics, f"{len(nodes)} assets for {result.topics} topics"
        if browser:
            result.ui = measure_pages(f"http://{LOOPBACK}:{port}")


def measure_pages(url: str) -> dict[str, float]:
    """Seconds until one topic's asset page shows its description, and its lineage the topic's last node with its state,
    each the best of three loads in a fresh page (the first load also warms the webserver's caches)."""
    from playwright.sync_api import sync_playwright

    database, table = PAGE_TOPIC
    pages = {
        "asset page": (f"{url}/assets/raw/{database}/{table}", "Raw layer: Kafka topic"),
        # The last node downstream, the topic's retention, is the one of its five never materialized.
        "lineage": (f"{url}/assets/raw/{database}/{table}?view=lineage&lineageScope=downstream&lineageDepth=5",
                    "Never materialized"),
    }
    timings = {}
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1600, "height": 1000})
        context.set_default_timeout(120_000)
        try:
            for name, (address, shown) in pages.items():
                best = float("inf")
                for _ in range(3):
                    page = context.new_page()
                    started = time.perf_counter()
                    page.goto(address)
                    page.get_by_text(shown).first.wait_for()
                    best = min(best, time.perf_counter() - started)
                    page.close()
                timings[name] = best
        finally:
            context.close()
    return timings


def growth(value: float, base: float) -> str:
    return f"{value / base:.1f}×" if base else "–"


def report(results: list[SizeResult], base_topics: int) -> None:
    base = next(r for r in results if r.topics == base_topics)
    print(f"\nGrowth against {base.topics} topics (linear growth is the ratio of topics).")
    header = f"{'topics':>7} {'× topics':>9} | {'load CPU s':>10} {'×':>6} {'wall s':>7} {'RSS MB':>7} {'×':>6} |"
    ticks = list(base.ticks)
    header += "".join(f" {name[:18]:>18} {'×':>6}" for name in ticks)
    header += (f" | {'unread':>6} {'then':>5} {'landed':>6} {'health unjudged':>15} | {'web ready s':>11}"
               f" {'GraphQL KB':>10} {'s':>6} {'×':>6}")
    print(header)
    for r in results:
        line = (f"{r.topics:>7} {growth(r.topics, base.topics):>9} | {r.load_cpu_s:>10.1f} {growth(r.load_cpu_s, base.load_cpu_s):>6} "
                f"{r.load_wall_s:>7.1f} {r.load_rss_mb:>7.0f} {growth(r.load_rss_mb, base.load_rss_mb):>6} |")
        if not r.ticks or not ticks:
            print(line + " (the load alone)")
            continue
        line += "".join(f" {r.ticks.get(name, 0):>18.2f} {growth(r.ticks.get(name, 0), base.ticks[name]):>6}" for name in ticks)
        line += f" | {r.unread_topics:>6} {r.unread_after_next:>5} {r.requested:>6} {r.health_unjudged:>15} | {r.webserver_ready_s:>11.0f} {r.graphql_bytes / 1024:>10.0f} {r.graphql_s:>6.2f} {growth(r.graphql_bytes, base.graphql_bytes):>6}"
        print(line)
    shown = [r for r in results if r.ui]
    if shown:
        first = shown[0]
        print(f"\nOne topic's pages in Chromium, seconds (best of 3), against {first.topics} topics:")
        for r in shown:
            print(f"{r.topics:>7} topics: " + ", ".join(f"{name} {s:.2f} s ({growth(s, first.ui[name])})"
                                                      for name, s in r.ui.items()))
    print("RESULT loads " + " ".join(f"topics={r.topics} load_cpu_s={r.load_cpu_s:.1f} "
                                     f"per_topic_ms={r.load_cpu_s / r.topics * 1000:.1f}" for r in results))
    if not any(r.ticks for r in results):
        return
    largest, middle = [r for r in results if r.ticks][-1], next((r for r in results if r.topics == 500), None)
    print(f"RESULT topics={largest.topics} load_cpu_s={largest.load_cpu_s:.1f} load_rss_mb={largest.load_rss_mb:.0f}"
          + (f" load_cpu_vs_500={largest.load_cpu_s / middle.load_cpu_s:.1f}" if middle else "")
          + "".join(f" {name}_s={s:.2f}" for name, s in largest.ticks.items())
          + f" unread_topics={largest.unread_topics} unread_after_next_tick={largest.unread_after_next}"
          + f" requested={largest.requested} health_unjudged={largest.health_unjudged} graphql_kb={largest.graphql_bytes / 1024:.0f}"
          + "".join(f" ui_{name.replace(' ', '_')}_s={s:.2f}" for name, s in largest.ui.items()))


def main() -> int:
    from deploy.instance import write_instance

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[100, 500, 2000], help="catalog sizes, smallest first")
    parser.add_argument("--partitions", type=int, default=16, help="Kafka partitions of each topic")
    parser.add_argument("--ui-baseline", type=int, default=5,
                        help="the size whose pages in Chromium the others are held against (0: no browser)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["load", "ticks", "webserver"])
    parser.add_argument("--load-only", type=int, nargs="*", default=[5000, 10000],
                        help="larger catalog sizes whose load alone is measured (a tick and the UI there take hours)")
    args = parser.parse_args()
    sizes = sorted(set(args.topics) | set(args.load_only) | ({args.ui_baseline} if args.ui_baseline else set()))
    results = []
    for topics in sizes:
        result = SizeResult(topics)
        with tempfile.TemporaryDirectory(prefix=f"bench-catalog-{topics}-") as folder:
            work = Path(folder)
            write_catalog(work / "catalog", topics)
            write_instance(work / "home", environ={})  # deploy/dagster.yaml, in SQLite
            if "load" not in args.skip:
                measure_load(work / "catalog", work / "home", result)
                print(f"{topics} topics: load {result.load_cpu_s:.1f} s CPU ({result.load_wall_s:.0f} s wall, "
                      f"{result.load_rss_mb:.0f} MB)", flush=True)
            if topics in args.load_only and topics not in args.topics:
                results.append(result)
                continue
            if "ticks" not in args.skip:
                measure_ticks(work / "catalog", work, args.partitions, result)
                print(f"{topics} topics: ticks {json.dumps({k: round(v, 2) for k, v in result.ticks.items()})}", flush=True)
            if "webserver" not in args.skip:
                measure_webserver(work / "catalog", work, result, browser=bool(args.ui_baseline) and
                                  topics in (args.ui_baseline, sizes[-1]))
        print(f"{topics} topics: load {result.load_cpu_s:.1f} s CPU ({result.load_wall_s:.0f} s wall, "
              f"{result.load_rss_mb:.0f} MB), ticks {json.dumps({k: round(v, 2) for k, v in result.ticks.items()})}, "
              f"{result.unread_topics} topic(s) unread then {result.unread_after_next}, {result.requested} requested, "
              f"{result.health_unjudged} not judged by topic_health, webserver ready in {result.webserver_ready_s:.0f} s, "
              f"GraphQL {result.graphql_bytes / 1024:.0f} KB in {result.graphql_s:.2f} s, pages {json.dumps({k: round(v, 2) for k, v in result.ui.items()})}", flush=True)
        results.append(result)
    report(results, min(args.topics))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
