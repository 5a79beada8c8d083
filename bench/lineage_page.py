"""`make bench-lineage`: what the UI's global lineage page asks of the webserver at hundreds of topics, per shape of the
catalog (topics per database, a Dagster asset group each), and what Dagster's own knob for its batches changes.

Each shape is a generated catalog (`catalog_scale.write_catalog`), served in-process as `make ui` serves it, on an
instance with no run; headless Chromium opens `/asset-groups` for `--seconds` (a visit), counting every GraphQL request
by operation, and notes when every group in view first showed its statuses. Beside the page: one
`AssetStaleStatusDataQuery` of ten keys of a layer sent to the webserver directly, its time (best of five).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.catalog_scale import CHROMIUM, CHROMIUM_FLAGS, LOAD_TIMEOUT_S, REPO, catalog_env, write_catalog

STALE_QUERY = "AssetStaleStatusDataQuery"
# The UI's query of an asset's staleness (dagster-webserver's AssetStaleStatusDataProvider), sent once per ten keys.
STALE_STATUS = """
query AssetStaleStatusDataQuery($assetKeys: [AssetKeyInput!]!) {
  assetNodes(assetKeys: $assetKeys) {
    id assetKey { path } staleStatus
    staleCauses { key { path } reason category dependency { path } }
  }
}
"""
# The batch the UI asks for by default is ten keys, two requests at a time; its URL parameters set both.
BIG_BATCHES = "?live-data-batch-size=250&live-data-parallel-fetches=4"


@dataclass
class PageVisit:
    shape: str
    requests: dict[str, int] = field(default_factory=dict)  # operation → requests
    stale_bytes: int = 0
    statuses_shown_s: float | None = None  # None: not within the visit
    server_ms: dict[str, float] = field(default_factory=dict)  # layer → one stale query of ten of its keys


def visit_global_lineage(url: str, seconds: float) -> tuple[dict[str, int], int, float | None]:
    """Opens the global lineage page for `seconds` (a visit: the page keeps polling while it is open), counting its
    GraphQL requests by operation and the bytes of the stale-status answers, and when every group in view first read
    its statuses (no "(fetching statuses)" left), in seconds from the start."""
    from playwright.sync_api import sync_playwright

    requests: dict[str, int] = {}
    stale_bytes = [0]

    def on_finished(request) -> None:
        if "/graphql" not in request.url or request.method != "POST":
            return
        try:
            operation = json.loads(request.post_data or "{}").get("operationName") or "(unnamed)"
        except json.JSONDecodeError:
            operation = "(unparsed)"
        requests[operation] = requests.get(operation, 0) + 1
        if operation == STALE_QUERY:
            try:
                stale_bytes[0] += request.sizes()["responseBodySize"]
            except Exception:  # an answer that finished as the visit closed: counted, not weighed
                pass

    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1600, "height": 1000})
        try:
            page = context.new_page()
            page.on("requestfinished", on_finished)
            started = time.perf_counter()
            page.goto(url)
            page.get_by_text("Global asset lineage").first.wait_for(timeout=120_000)
            shown = None
            while time.perf_counter() - started < seconds:
                page.wait_for_timeout(1000)
                if shown is None and requests.get(STALE_QUERY) and not page.get_by_text("(fetching statuses)").count():
                    shown = time.perf_counter() - started
        finally:
            context.close()
    return requests, stale_bytes[0], shown


def server_ms(port: int, keys: list[list[str]]) -> float:
    """The webserver's time for one stale-status query of `keys`, best of five."""
    body = json.dumps({"query": STALE_STATUS, "variables": {"assetKeys": [{"path": k} for k in keys]}}).encode()
    best = float("inf")
    for _ in range(5):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=body,
                                         headers={"Content-Type": "application/json"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def measure(topics: int, databases: int, seconds: float, params: str = "") -> PageVisit:
    from deploy.instance import write_instance
    from dev_services.ports import LOOPBACK, free_port
    from tests.dagster_servers import loaded_location, serving, webserver_command

    shape = f"{topics} topics in {databases} database(s)" + (" with bigger batches" if params else "")
    visit = PageVisit(shape)
    with tempfile.TemporaryDirectory(prefix=f"bench-lineage-{topics}-") as folder:
        work = Path(folder)
        write_catalog(work / "catalog", topics, databases=databases)
        write_instance(work / "home", environ={})
        workspace = work / "workspace.yaml"
        workspace.write_text("load_from:\n  - python_module:\n      module_name: platform_assets.definitions\n"
                             "      location_name: kafka_lake\n")
        port, log = free_port(), work / "webserver.log"
        with serving(webserver_command(workspace, port), port, log, catalog_env(work / "catalog", work / "home"), REPO,
                     "dagster-webserver", start_timeout=LOAD_TIMEOUT_S):
            loaded_location(port, "kafka_lake", log, timeout=LOAD_TIMEOUT_S)
            first = sorted((work / "catalog").glob("*/*/topic.yaml"))[:10]
            for layer in ("raw", "compacted", "retention"):
                keys = [[layer, path.parent.parent.name, path.parent.name] for path in first]
                visit.server_ms[layer] = server_ms(port, keys)
            visit.requests, visit.stale_bytes, visit.statuses_shown_s = visit_global_lineage(
                f"http://{LOOPBACK}:{port}/asset-groups{params}", seconds)
    return visit


def report(visits: list[PageVisit]) -> None:
    base = visits[0]
    print(f"\nThe global lineage page, against {base.shape}:")
    print(f"{'shape':48} {STALE_QUERY:>26} {'×':>6} {'KB':>7} {'other GraphQL':>14} {'statuses s':>11} | server ms "
          "per 10 keys (raw, compacted, retention)")
    for visit in visits:
        stale = visit.requests.get(STALE_QUERY, 0)
        other = sum(visit.requests.values()) - stale
        ratio = f"{stale / base.requests.get(STALE_QUERY, 1):.2f}×"
        shown = f"{visit.statuses_shown_s:.0f}" if visit.statuses_shown_s is not None else "not yet"
        print(f"{visit.shape:48} {stale:>26} {ratio:>6} {visit.stale_bytes / 1024:>7.0f} {other:>14} {shown:>11} | "
              + ", ".join(f"{ms:.0f}" for ms in visit.server_ms.values()))
    for visit in visits:
        print(f"{visit.shape}: " + ", ".join(f"{name} {count}" for name, count in sorted(visit.requests.items(),
                                                                                       key=lambda item: -item[1])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=400)
    parser.add_argument("--databases", type=int, nargs="+", default=[400, 20, 1],
                        help="shapes of the catalog: how many databases (asset groups) the topics are spread over")
    parser.add_argument("--seconds", type=float, default=120, help="how long a visit lasts")
    parser.add_argument("--big-batches", type=int, nargs="*", default=None,
                        help="the shapes (databases) to visit again with Dagster's bigger batches; by default the one "
                             "that asked most")
    args = parser.parse_args()
    visits = [measure(args.topics, databases, args.seconds) for databases in args.databases]
    most = max(zip(visits, args.databases), key=lambda pair: pair[0].requests.get(STALE_QUERY, 0))[1]
    for databases in (args.big_batches if args.big_batches is not None else [most]):
        visits.append(measure(args.topics, databases, args.seconds, BIG_BATCHES))
    report(visits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
