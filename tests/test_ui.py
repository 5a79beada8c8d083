"""The Dagster UI as a person sees it: the demo's state in dagster-webserver, opened in headless Chromium.

One demo run (its own broker port, lake, metastore and Dagster home under a temp directory) serves three
pages: the global asset graph, one topic's lineage and a raw asset's partitions. Each page is saved as a
screenshot under $UI_SCREENSHOTS_DIR (default tests/artifacts/ui/) for a person to look at.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from deploy.instance import write_instance
from dev_services import tansu
from dev_services.ports import LOOPBACK, free_port
from kafka_lake.catalog import load_catalog
from kafka_lake.manifests import ManifestStore
from kafka_lake.storage import LakeStorage
from tests.conftest import REPO
from tests.dagster_servers import loaded_location, serving, webserver_command

pytestmark = pytest.mark.ui

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
# Without these, Chromium on a machine with no network stalls on its own background requests.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(os.environ.get("UI_SCREENSHOTS_DIR") or REPO / "tests" / "artifacts" / "ui")
PAGE_TIMEOUT_MS = 60_000
DEMO_TIMEOUT = 900
LAYERS = ("raw", "compacted", "catalog", "retention")  # one topic's lineage, in order
TOPIC = "shop.page_views"
# The platform's settings (kafka_lake/settings.py): the demo runs on its embedded defaults, whatever is set here.
PLATFORM_VARIABLES = ("LAKE_ROOT", "SCHEMA_CATALOG_DIR", "SCHEMA_REGISTRY_URL", "TABLE_CATALOG", "HIVE_METASTORE_URI",
                      "SPARK_MASTER", "KAFKA_BOOTSTRAP_SERVERS")


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory):
    """Given `python -m dev_services.demo` run in a directory of its own, with the broker it started stopped."""
    state = tmp_path_factory.mktemp("ui-demo")
    home = state / "dagster_home"
    write_instance(home, environ={})  # SQLite under the demo's own home, whatever DAGSTER_PG_* says
    env = {name: value for name, value in os.environ.items()
           if name not in PLATFORM_VARIABLES and not name.startswith(("KAFKA_CLIENT_", "DAGSTER_PG_"))}
    env.update({"DAGSTER_HOME": str(home), "SCHEMA_CATALOG_DIR": str(REPO / "schema_catalog"),
                "KAFKA_BOOTSTRAP_SERVERS": f"{LOOPBACK}:{free_port()}", "SPARK_LOCAL_IP": LOOPBACK})
    try:
        demo = subprocess.run([sys.executable, "-m", "dev_services.demo"], cwd=state, env=env,
                              capture_output=True, text=True, timeout=DEMO_TIMEOUT)
    finally:
        tansu.stop_detached(state / tansu.DEFAULT_STATE_DIR / tansu.PID_FILE_NAME)
    assert demo.returncode == 0, f"the demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
    return state, env


@pytest.fixture(scope="module")
def webserver(demo_state, tmp_path_factory):
    state, env = demo_state
    port = free_port()
    log_file = tmp_path_factory.mktemp("webserver") / "webserver.log"
    with serving(webserver_command(REPO / "workspace.yaml", port), port, log_file, env, state, "dagster-webserver"):
        loaded_location(port, "kafka_lake", log_file)
        yield f"http://{LOOPBACK}:{port}"


@pytest.fixture(scope="module")
def browser_page():
    """Asked for first by every test: a missing Chromium fails before the demo spends minutes."""
    if not CHROMIUM.exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: install it with 'sudo apt-get install -y chromium' "
                    "(make test does as root), or set CHROMIUM_PATH")
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1600, "height": 1000})
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        try:
            yield context.new_page()
        finally:
            context.close()


@pytest.fixture(scope="module")
def topic():
    return next(t for t in load_catalog(REPO / "schema_catalog").topics if t.topic == TOPIC)


def asset_path(layer: str, topic) -> str:
    return f"{layer}/{topic.database}/{topic.table}"


def graph_node_link(page, layer: str, topic):
    """A node of the asset graph links to its asset's pages: its key is in the link."""
    return page.locator(f'foreignObject a[href^="/assets/{asset_path(layer, topic)}?"]').first


def shown(locator, timeout_ms: int = 20_000) -> bool:
    """Whether the element appears in time; a bool, so one missing node does not hide the others."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        locator.wait_for(timeout=timeout_ms)
        return True
    except PlaywrightTimeout:
        return False


def test_the_global_asset_graph_shows_every_topics_assets(browser_page, webserver):
    catalog = load_catalog(REPO / "schema_catalog")
    groups = ",".join(f"global@global:{database}" for database in sorted({t.database for t in catalog.topics}))
    page = browser_page
    page.goto(f"{webserver}/asset-groups?expanded={groups}")

    missing = [asset_path(layer, every_topic) for every_topic in catalog.topics
               for layer in (*LAYERS, "dead_letters") if not shown(graph_node_link(page, layer, every_topic))]
    page.wait_for_load_state("networkidle")
    page.screenshot(path=SCREENSHOTS / "1-global-asset-graph.png")

    assert not missing, f"assets not shown in the global asset graph: {missing}"


def test_one_topics_lineage_runs_from_raw_through_compacted_and_catalog_to_retention(browser_page, webserver, topic):
    page = browser_page
    page.goto(f"{webserver}/assets/{asset_path('raw', topic)}?view=lineage&lineageScope=downstream&lineageDepth=3")

    nodes = [graph_node_link(page, layer, topic) for layer in LAYERS]
    for node in nodes:
        node.wait_for()
    page.wait_for_load_state("networkidle")
    page.screenshot(path=SCREENSHOTS / f"2-lineage-{topic.database}-{topic.table}.png")

    left_edges = [node.bounding_box()["x"] for node in nodes]
    assert left_edges == sorted(left_edges) and len(set(left_edges)) == len(LAYERS), (
        f"the graph does not run {' → '.join(LAYERS)} from left to right: x = {left_edges}")
    assert page.locator("foreignObject [data-tooltip]").count() == len(LAYERS), "only this topic's four assets"


def test_a_raw_assets_partitions_page_shows_the_landed_hours_with_their_rows(browser_page, webserver, topic, demo_state):
    state, _ = demo_state
    manifests = {m.kafka_hour.partition_key: m.totals()["rows"]
                 for m in ManifestStore(LakeStorage(str(state / ".lake" / "warehouse")), topic.database, topic.table).all()}
    assert manifests, "the demo landed no hour of the topic"
    hour, rows = max(manifests.items())
    page = browser_page
    page.goto(f"{webserver}/assets/{asset_path('raw', topic)}?view=partitions")

    page.get_by_text(f"Materialized ({len(manifests)})", exact=True).wait_for()
    for landed in manifests:
        page.get_by_text(landed, exact=True).first.wait_for()
    page.get_by_text(hour, exact=True).first.click()
    rows_cell = page.locator("tr", has=page.locator("td", has_text=re.compile(r"^rows$"))).locator("td").nth(1)
    rows_cell.wait_for()
    page.wait_for_load_state("networkidle")
    page.screenshot(path=SCREENSHOTS / f"3-partitions-raw-{topic.database}-{topic.table}.png")

    assert rows_cell.inner_text().strip() == str(rows), f"hour {hour} landed {rows} rows"
