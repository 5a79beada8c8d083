"""The Dagster UI as a person sees it: the demo's state served as `make ui` serves it (`dev_services.ui`:
`dagster dev` with the demo's settings), opened in headless Chromium, and operated: a re-landing of two
landed hours launched from the UI, the hours' own metadata read back, a sensor started and its tick read.

One demo run (its own broker port, lake, metastore and Dagster home under a temp directory; the broker
keeps running for the re-landing) serves the module. Each page is saved as a screenshot under
$UI_SCREENSHOTS_DIR (default tests/artifacts/ui/), before and after each action, for a person to look at.
Automation starts stopped (PLATFORM_AUTOMATION=off) so that only the operator's actions run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, RunsFilter

from deploy.instance import write_instance
from dev_services import tansu
from dev_services.demo import DEMO_CATALOG_DIR
from dev_services.ports import LOOPBACK, free_port
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.topics.loader import load_catalog
from platform_assets.partitions import hourly_partitions
from tests.constants import REPO
from tests.dagster_servers import loaded_location, log_tail, serving

pytestmark = pytest.mark.ui

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
# Without these, Chromium on a machine with no network stalls on its own background requests.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(os.environ.get("UI_SCREENSHOTS_DIR") or REPO / "tests" / "artifacts" / "ui")
PAGE_TIMEOUT_MS = 60_000
DEMO_TIMEOUT = 900
RUN_TIMEOUT = 600  # a guard against a hang, not an assertion on speed
LAYERS = ("raw", "compacted", "catalog", "retention")  # one topic's lineage, in order
TOPIC = "shop.page_views"
# The platform's settings (kafka_lake/settings.py): the demo runs on its embedded defaults, whatever is set here.
PLATFORM_VARIABLES = ("LAKE_ROOT", "SCHEMA_CATALOG_DIR", "SCHEMA_REGISTRY_URL", "TABLE_CATALOG", "HIVE_METASTORE_URI",
                      "SPARK_MASTER", "KAFKA_BOOTSTRAP_SERVERS", "PII_HMAC_KEY", "PLATFORM_AUTOMATION")
DONE = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory):
    """Given `python -m dev_services.demo` run in a directory of its own; its broker runs until the module ends."""
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
        assert demo.returncode == 0, f"the demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
        yield state, env
    finally:
        tansu.stop_detached(state / tansu.DEFAULT_STATE_DIR / tansu.PID_FILE_NAME)


@pytest.fixture(scope="module")
def ui(demo_state, tmp_path_factory):
    """`make ui`'s process in the demo's directory: webserver, daemon and code location, without the demo's
    settings in its environment (they come from the file the demo wrote)."""
    state, demo_env = demo_state
    env = {name: value for name, value in demo_env.items() if name not in PLATFORM_VARIABLES}
    env["PLATFORM_AUTOMATION"] = "off"
    port = free_port()
    log_file = tmp_path_factory.mktemp("ui") / "dagster_dev.log"
    command = [sys.executable, "-m", "dev_services.ui", "-w", str(REPO / "workspace.yaml"), "-h", LOOPBACK, "-p", str(port)]
    with serving(command, port, log_file, env, state, "make ui (dagster dev)"):
        loaded_location(port, "kafka_lake", log_file)
        yield f"http://{LOOPBACK}:{port}", DagsterInstance.from_config(demo_env["DAGSTER_HOME"]), log_file


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
def topic(demo_state):
    state, _ = demo_state
    return next(t for t in load_catalog(state / DEMO_CATALOG_DIR).topics if t.topic == TOPIC)


def asset_path(layer: str, topic) -> str:
    return f"{layer}/{topic.database}/{topic.table}"


def judged_as(catalog, table) -> str:
    """How the landing sensor's tick names a table: by its Kafka topic, and the table where several land it."""
    return table.topic if len(catalog.tables_of(table.topic)) == 1 else f"{table.topic} into {table.name}"


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


def screenshot(page, name: str) -> None:
    page.wait_for_load_state("networkidle")
    page.screenshot(path=SCREENSHOTS / name)


def landed_rows(state: Path, topic) -> dict[str, int]:
    storage = LakeStorage(str(state / ".lake" / "warehouse"))
    return {m.kafka_hour.partition_key: m.counts.rows for m in ManifestStore(storage, topic.database, topic.table).all()}


def rows_shown_for(page, url: str, topic, hour: str) -> str:
    """The `rows` of the hour's latest materialization, on the raw asset's partitions page with the hour selected."""
    page.goto(f"{url}/assets/{asset_path('raw', topic)}?view=partitions&partition={hour}")
    cell = page.locator("tr", has=page.locator("td", has_text=re.compile(r"^rows$"))).locator("td").nth(1)
    cell.wait_for()
    page.wait_for_load_state("networkidle")
    return cell.inner_text().strip()


def wait_for(condition, what: str, log_file: Path, timeout: float = RUN_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what} not done after {timeout:.0f} s\n{log_tail(log_file)}"
        time.sleep(2)
    return found


def test_the_global_asset_graph_shows_every_topics_assets(browser_page, ui, demo_state):
    url, _, _ = ui
    state, _ = demo_state
    catalog = load_catalog(state / DEMO_CATALOG_DIR)
    page = browser_page
    missing = []
    # One group expanded at a time: the graph draws only the nodes in view, and every group at once outgrows it.
    for database in sorted({t.database for t in catalog.topics}):
        page.goto(f"{url}/asset-groups?expanded=global@global:{database}")
        missing += [asset_path(layer, every_topic) for every_topic in catalog.topics if every_topic.database == database
                    for layer in (*LAYERS, "dead_letters") if not shown(graph_node_link(page, layer, every_topic))]
        screenshot(page, f"1-global-asset-graph-{database}.png")

    assert not missing, f"assets not shown in the global asset graph: {missing}"


def test_each_node_of_a_topics_lineage_shows_its_layer_and_dead_letters_hang_off_raw(browser_page, ui, topic):
    url, _, _ = ui
    page = browser_page
    page.goto(f"{url}/assets/{asset_path('raw', topic)}?view=lineage&lineageScope=downstream&lineageDepth=3")

    nodes = {layer: graph_node_link(page, layer, topic) for layer in (*LAYERS, "dead_letters")}
    for node in nodes.values():
        node.wait_for()
    screenshot(page, f"2-lineage-{topic.database}-{topic.table}.png")

    left_edges = [nodes[layer].bounding_box()["x"] for layer in LAYERS]
    assert left_edges == sorted(left_edges) and len(set(left_edges)) == len(LAYERS), (
        f"the graph does not run {' → '.join(LAYERS)} from left to right: x = {left_edges}")
    assert nodes["raw"].bounding_box()["x"] < nodes["dead_letters"].bounding_box()["x"], "dead letters follow raw"
    assert page.locator("foreignObject [data-tooltip]").count() == len(LAYERS) + 1, "only this topic's five assets"
    # Every node reads the table's name; its layer is the tag under it.
    for layer, node in nodes.items():
        assert any(_under(tag.bounding_box(), node.bounding_box())
                   for tag in page.locator("svg").get_by_text(layer, exact=True).all()), f"no `{layer}` tag under its node"


def _under(tag: dict | None, node: dict) -> bool:
    """A node's tags sit just below it, within its width."""
    middle = node["x"] + node["width"] / 2
    return tag is not None and tag["y"] > node["y"] and abs(tag["x"] + tag["width"] / 2 - middle) < 200


def test_partitions_start_where_the_demos_data_starts(browser_page, ui, topic, demo_state):
    url, _, _ = ui
    state, _ = demo_state
    rows = landed_rows(state, topic)
    assert rows, "the demo landed no hour of the topic"
    hours = hourly_partitions(topic).get_partition_keys()
    missing = [hour for hour in hours if hour not in rows]
    page = browser_page
    page.goto(f"{url}/assets/{asset_path('raw', topic)}?view=partitions")

    page.get_by_text(f"Materialized ({len(rows)})", exact=True).wait_for()
    page.get_by_text(f"Missing ({len(missing)})", exact=True).wait_for()
    for landed in rows:
        page.get_by_text(landed, exact=True).first.wait_for()
    newest = max(rows)
    shown_rows = rows_shown_for(page, url, topic, newest)
    screenshot(page, f"3-partitions-raw-{topic.database}-{topic.table}.png")

    assert len(missing) <= 2, f"only the hours closed since the demo may be missing, not {missing}"
    assert all(hour > newest for hour in missing), "a missing hour is a real gap after the landed ones"
    assert shown_rows == str(rows[newest]), f"hour {newest} landed {rows[newest]} rows"


def test_two_landed_hours_relanded_from_the_ui_succeed_each_with_its_own_metadata(browser_page, ui, topic, demo_state):
    url, instance, log_file = ui
    state, _ = demo_state
    rows = landed_rows(state, topic)
    first, second = sorted(hour for hour, count in rows.items() if count)[1:3]
    page = browser_page
    page.goto(f"{url}/assets/{asset_path('raw', topic)}?view=partitions")
    page.get_by_text(first, exact=True).first.wait_for()
    screenshot(page, "4-partitions-raw-before-relanding.png")
    known = {backfill.backfill_id for backfill in instance.get_backfills()}

    page.get_by_text("Materialize…", exact=True).first.click()
    dialog = page.get_by_role("dialog")
    selection = dialog.locator("input[type=text], input:not([type]), textarea").first  # the partition range field
    selection.fill(f"[{first}...{second}]")
    selection.press("Enter")
    dialog.get_by_text("2 partitions", exact=True).wait_for()
    screenshot(page, "5-relanding-dialog.png")
    dialog.get_by_role("button", name="Launch backfill").click()

    [backfill] = wait_for(lambda: [b for b in instance.get_backfills() if b.backfill_id not in known], "the backfill launch", log_file)
    done = wait_for(lambda: (b := instance.get_backfill(backfill.backfill_id)).status.value in DONE and b,
                    "the re-landing backfill", log_file)
    [run] = [r.dagster_run for r in instance.get_run_records(RunsFilter(tags={"dagster/backfill": backfill.backfill_id}))]
    assert done.status.value == "COMPLETED_SUCCESS" and run.status.value == "SUCCESS", (
        f"the re-landing failed: {done.status}, run {run.run_id}\n{log_tail(log_file)}")
    assert "dagster/retry_number" not in run.tags, "the re-landing succeeded at its first attempt"
    relanded = landed_rows(state, topic)
    raw = AssetKey(["raw", topic.database, topic.table])
    for hour in (first, second):
        [record] = instance.fetch_materializations(AssetRecordsFilter(asset_key=raw, asset_partitions=[hour]), limit=1).records
        metadata = record.asset_materialization.metadata
        assert record.run_id == run.run_id
        assert metadata["rows"].value == relanded[hour] == rows[hour], f"{hour}'s own rows, not the run's sum"
        assert "offset_ranges" in metadata and "first_hour" not in metadata

    shown_first = rows_shown_for(page, url, topic, first)
    screenshot(page, f"6-partitions-raw-after-relanding-{first.replace(':', '')}.png")
    shown_second = rows_shown_for(page, url, topic, second)
    screenshot(page, f"7-partitions-raw-after-relanding-{second.replace(':', '')}.png")
    assert (shown_first, shown_second) == (str(rows[first]), str(rows[second]))
    assert rows[first] != rows[second], "two hours with different counts, so a sum would show"

    page.goto(f"{url}/assets/{asset_path('raw', topic)}?view=checks")
    page.get_by_text("slices_contiguous", exact=True).first.wait_for()
    screenshot(page, "8-checks-raw-after-relanding.png")


def test_a_sensor_started_from_the_ui_says_per_topic_what_it_judged_and_why(browser_page, ui, demo_state):
    url, instance, log_file = ui
    state, _ = demo_state
    catalog = load_catalog(state / DEMO_CATALOG_DIR)
    page = browser_page
    page.goto(f"{url}/locations/kafka_lake/sensors/land_closed_hours")
    switch = page.locator('input[type="checkbox"]').first  # the sensor's on/off switch, drawn over the input
    switch.wait_for(state="attached")
    screenshot(page, "9-sensor-stopped.png")
    assert not switch.is_checked(), "automation starts stopped in this test"

    switch.dispatch_event("click")
    wait_for(lambda: shown(page.get_by_text("View logs").first, 2_000) or (page.reload() and False),
             "the sensor's first tick", log_file)
    page.get_by_text("View logs").first.click()
    logs = page.get_by_role("dialog")
    logs.get_by_text(re.compile(f"^{re.escape(judged_as(catalog, catalog.topics[0]))}: requested")).first.wait_for()
    screenshot(page, "10-sensor-tick-logs.png")
    text = logs.inner_text()

    for every_topic in catalog.topics:
        [line] = [line for line in text.splitlines() if line.startswith(f"{judged_as(catalog, every_topic)}: requested")]
        assert re.search(r"(not closed: .+|caught up \d+ hours)", line), line
        assert "(started " in line, line
    page.keyboard.press("Escape")
    switch.dispatch_event("click")  # stopped again: one tick is what this test reads

    requested = instance.get_run_records(RunsFilter(tags={"dagster/sensor_name": "land_closed_hours"}))
    finished = wait_for(lambda: all(r.dagster_run.is_finished for r in (
        instance.get_run_records(RunsFilter(tags={"dagster/sensor_name": "land_closed_hours"})))) or not requested,
        "the sensor's landings", log_file)
    assert finished
    for record in instance.get_run_records(RunsFilter(tags={"dagster/sensor_name": "land_closed_hours"})):
        run = record.dagster_run
        assert run.job_name == "landing", "a sensor's landing runs under the landing job"
        assert run.tags["layer"] == "raw" and run.tags["topic"] in catalog.kafka_topics, run.tags
        assert {k.to_user_string() for k in run.asset_selection if k.path[0] == "raw"} == set(run.tags["asset"].split(", "))
        assert record.dagster_run.status.value == "SUCCESS", f"run {record.dagster_run.run_id}\n{log_tail(log_file)}"
    page.goto(f"{url}/runs")
    page.get_by_text("Runs", exact=True).first.wait_for()
    screenshot(page, "11-runs.png")
