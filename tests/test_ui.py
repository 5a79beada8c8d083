"""The Dagster UI as a person sees it: the demo's state served as `make ui` serves it (`dev_services.ui`:
`dagster dev` with the demo's settings), opened in headless Chromium, and operated: a re-landing of two
landed hours launched from the UI, the hours' own metadata read back, a sensor started and its tick read; and
what the operator is told when things go wrong: a backfill failing on an hour not closed (its alert, its
checks), compaction asked of hours not due, a catalog entry broken by a typo, records no table takes.

One demo run (its own broker port, lake, metastore and Dagster home under a temp directory; the broker
keeps running for the re-landing) serves the module, its tests in file order, each provoking what it looks at
on the state the ones before left. Each page is saved as a screenshot under $UI_SCREENSHOTS_DIR (default
tests/artifacts/ui/), before and after each action, for a person to look at. Automation starts stopped
(PLATFORM_AUTOMATION=off) so that only the operator's actions run; a test that reads a sensor starts it.
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
from dagster import AssetCheckKey, AssetKey, AssetRecordsFilter, DagsterInstance, RunsFilter

from deploy.instance import write_instance
from dev_services import tansu
from dev_services.demo import DEMO_CATALOG_DIR
from dev_services.ports import LOOPBACK, free_port
from kafka_lake.hours import KafkaHour
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.topics.loader import load_catalog
from kafka_lake.upkeep.compaction import missing_raw_hours
from platform_assets.partitions import hourly_partitions
from tests.conftest import REPO
from tests.dagster_servers import graphql, loaded_location, log_tail, serving

pytestmark = pytest.mark.ui

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
# Without these, Chromium on a machine with no network stalls on its own background requests.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(os.environ.get("UI_SCREENSHOTS_DIR") or REPO / "tests" / "artifacts" / "ui")
PAGE_TIMEOUT_MS = 60_000
VIEWPORT = {"width": 1600, "height": 1000}
DEMO_TIMEOUT = 900
RUN_TIMEOUT = 600  # a guard against a hang, not an assertion on speed
LAYERS = ("raw", "compacted", "catalog", "retention")  # one topic's lineage, in order
TOPIC = "shop.page_views"
ROUTED_TOPIC = "shop.cart_events"  # JSON events routed into a table per type, some types taken by none
BROKEN_TOPIC = "payments.transactions"  # its entry gets a typo, the module's last test
# The idle timeout of TOPIC in the catalog the UI serves: no record follows the demo's last hour, so that hour stays
# open (not closed) for the module, an hour the UI offers that cannot land yet.
HELD_OPEN = "close_grace_minutes: 1440\n"
LANDING_CHECKS = ("slices_contiguous", "counts_balance", "dead_letter_rate", "boundaries_confirmed")
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
        [topic_file] = [f for f in (state / DEMO_CATALOG_DIR).glob("*/*/topic.yaml") if f"topic: {TOPIC}\n" in f.read_text()]
        topic_file.write_text(topic_file.read_text() + HELD_OPEN)
        yield state, env
    finally:
        tansu.stop_detached(state / tansu.DEFAULT_STATE_DIR / tansu.PID_FILE_NAME)


@pytest.fixture(scope="module")
def ui(demo_state, tmp_path_factory):
    """`make ui PORT=…`'s process in the demo's directory: webserver, daemon and code location, without the demo's
    settings in its environment, its Dagster home included (they come from the file the demo wrote)."""
    state, demo_env = demo_state
    env = {name: value for name, value in demo_env.items() if name not in (*PLATFORM_VARIABLES, "DAGSTER_HOME")}
    env["PLATFORM_AUTOMATION"] = "off"
    port = free_port()
    log_file = tmp_path_factory.mktemp("ui") / "dagster_dev.log"
    command = [sys.executable, "-m", "dev_services.ui", "-p", str(port)]  # as `make ui PORT=…` runs it
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
            viewport=VIEWPORT)
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
    return metadata_shown(page, url, asset_path("raw", topic), hour, "rows")["rows"]


def wait_for(condition, what: str, log_file: Path, timeout: float = RUN_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what} not done after {timeout:.0f} s\n{log_tail(log_file)}"
        time.sleep(2)
    return found


def metadata_shown(page, url: str, asset: str, hour: str, name: str) -> dict[str, str]:
    """The metadata table of the hour on the asset's partitions page (waiting a while for the entry `name`): label →
    text."""
    page.goto(f"{url}/assets/{asset}?view=partitions&partition={hour}")
    page.get_by_text("Metadata", exact=True).first.wait_for()
    shown(page.locator("tr", has=page.locator("td", has_text=re.compile(f"^{re.escape(name)}$"))).first, 10_000)
    page.wait_for_load_state("networkidle")
    table = {}
    for row in page.locator("tr").all():
        cells = row.locator("td").all()
        if len(cells) == 3:  # label, value, and a column of its own for actions
            table.setdefault(cells[0].inner_text().strip(), cells[1].inner_text().strip())
    return table


def check_statuses(page, url: str, asset: str, names) -> dict[str, str]:
    """Each check's status as the asset's Checks tab lists it (each check's name, then its status under it)."""
    page.goto(f"{url}/assets/{asset}?view=checks")
    if not shown(page.get_by_text(re.compile(r"^Checks \(\d+\)$")).first):
        return {}  # the asset has no checks
    page.wait_for_load_state("networkidle")
    time.sleep(1)  # the list renders its statuses after the page settles
    lines = [line.strip() for line in page.locator("body").inner_text().splitlines() if line.strip()]
    return {line: lines[n + 2] for n, line in enumerate(lines[:-2]) if line in names and lines[n + 1] == line}


def launch_materialization(page, url: str, asset: str, first: str, last: str, screenshot_name: str) -> None:
    """*Materialize…* on the asset's partitions page, the hours typed as a range, launched."""
    page.goto(f"{url}/assets/{asset}?view=partitions")
    page.get_by_text("Materialize…", exact=True).first.click()
    dialog = page.get_by_role("dialog")
    selection = dialog.locator("input[type=text], input:not([type]), textarea").first  # the partition range field
    selection.fill(f"[{first}...{last}]")
    selection.press("Enter")
    count = len(hours_between(first, last))
    dialog.get_by_text(f"{count} partition{'s' if count > 1 else ''}", exact=True).wait_for()
    screenshot(page, screenshot_name)
    dialog.get_by_role("button", name=re.compile("^Launch")).click()


def hours_between(first: str, last: str) -> list[str]:
    start, end = KafkaHour.from_partition_key(first), KafkaHour.from_partition_key(last)
    hours = [start]
    while hours[-1] != end:
        hours.append(hours[-1].next())
    return [hour.partition_key for hour in hours]


def materialized_from_the_ui(page, ui, asset: str, first: str, last: str, screenshot_name: str):
    """The run of `launch_materialization`, once it has finished."""
    url, instance, log_file = ui
    known = {record.dagster_run.run_id for record in instance.get_run_records()}
    launch_materialization(page, url, asset, first, last, screenshot_name)

    def finished():
        runs = [r.dagster_run for r in instance.get_run_records() if r.dagster_run.run_id not in known]
        return runs[0] if len(runs) == 1 and runs[0].is_finished else None
    return wait_for(finished, "the launched run", log_file)


def start_sensor(page, url: str, name: str) -> None:
    """The sensor's switch on its page turned on (it starts stopped here)."""
    page.goto(f"{url}/locations/kafka_lake/sensors/{name}")
    switch = page.locator('input[type="checkbox"]').first  # the sensor's on/off switch, drawn over the input
    switch.wait_for(state="attached")
    if not switch.is_checked():
        switch.dispatch_event("click")
    wait_for(lambda: switch.is_checked(), f"the sensor {name} started", Path("/dev/null"), timeout=30)


def tick_log_saying(page, url: str, sensor: str, text: str, log_file: Path, screenshot_name: str) -> str:
    """The log of the sensor's newest tick whose log says `text` (*View logs* on the tick), as the dialog shows it."""
    def found() -> str | None:
        page.goto(f"{url}/locations/kafka_lake/sensors/{sensor}")
        if not shown(page.get_by_text("View logs").first, 5_000):
            return None
        # The tick whose row names it (a run a run-status sensor reported), else the newest ticks.
        rows = page.locator("tr", has_text=text).all() if text else []
        for link in [row.get_by_text("View logs") for row in rows[:1]] or page.get_by_text("View logs").all()[:4]:
            link.click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_text(re.compile("INFO|WARNING|ERROR|No logs")).first.wait_for()
            logs = dialog.inner_text()
            if text in logs:
                screenshot(page, screenshot_name)
            dialog.get_by_role("button", name="Done").click()
            if text in logs:
                return logs
        return None
    return wait_for(found, f"a tick of {sensor} saying {text!r}", log_file, timeout=180)


def test_the_global_asset_graph_shows_every_topics_assets(browser_page, ui, demo_state):
    url, _, _ = ui
    state, _ = demo_state
    catalog = load_catalog(state / DEMO_CATALOG_DIR)
    page = browser_page
    missing, formats = [], {}
    # One group expanded at a time, in a window as tall as the group: the graph draws only the nodes in view, and a
    # topic's row of nodes is some 230 pixels high at the zoom the page opens with.
    for database in sorted({t.database for t in catalog.topics}):
        topics = [every_topic for every_topic in catalog.topics if every_topic.database == database]
        page.set_viewport_size({**VIEWPORT, "height": max(VIEWPORT["height"], 300 * len(topics) + 400)})
        page.goto(f"{url}/asset-groups?expanded=global@global:{database}")
        missing += [asset_path(layer, every_topic) for every_topic in topics
                    for layer in (*LAYERS, "dead_letters") if not shown(graph_node_link(page, layer, every_topic))]
        # The payload format is a tag under the raw node: each tag belongs to the nearest raw node above it.
        raw_nodes = {t.name: graph_node_link(page, "raw", t).bounding_box() for t in topics}
        for kind in ("protobuf", "avro"):
            for tag in page.locator("svg").get_by_text(kind, exact=True).all():
                if (owner := _node_above(tag.bounding_box(), raw_nodes)) is not None:
                    formats.setdefault(owner, []).append(kind)
        screenshot(page, f"1-global-asset-graph-{database}.png")
    page.set_viewport_size(VIEWPORT)

    assert not missing, f"assets not shown in the global asset graph: {missing}"
    assert formats["shop/orders"] == ["protobuf"] and formats["shop/page_views"] == ["avro"], formats


def test_each_layer_jobs_runs_page_lists_the_demos_runs_with_their_hours_and_topics(browser_page, ui):
    """The demo runs each layer as the sensors do: runs of many topics over a stretch of hours. The `landing` job's
    Runs page listed 4 of 100 runs (those the UI launched), and a run over a range showed no hour."""
    url, instance, _ = ui
    page = browser_page
    shown_runs = {}
    for job in ("landing", "compaction", "registration", "retention"):
        runs = instance.get_runs(RunsFilter(job_name=job))
        page.goto(f"{url}/locations/kafka_lake/jobs/{job}/runs")
        shown_runs[job] = [run.run_id[:8] for run in runs if shown(page.get_by_text(run.run_id[:8]).first)]
        assert runs and len(shown_runs[job]) == len(runs), f"{job}: {len(runs)} runs, shown {shown_runs[job]}"
        if job == "landing":
            screenshot(page, "1b-landing-job-runs.png")
            listed = page.locator("body").inner_text()
            carried = next(run for run in runs if "topics" in run.tags)

    assert f"hours: {carried.tags['hours']}" in listed.replace("\n", " "), "each run's hours, after its layer"
    assert f"topics: {carried.tags['topics']}"[:40] in listed.replace("\n", " "), "which topics the run carries"


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


def _node_above(tag: dict | None, nodes: dict[str, dict | None]) -> str | None:
    """The node whose row of tags `tag` is in: the nearest one above it, in its column."""
    if tag is None:
        return None
    middle = tag["x"] + tag["width"] / 2
    above = [(node["y"], name) for name, node in nodes.items() if node is not None and node["y"] < tag["y"]
             and abs(node["x"] + node["width"] / 2 - middle) < 200]
    return max(above)[1] if above else None


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


def test_no_table_misses_an_hour_of_compaction_or_registration_before_its_first_rows(browser_page, ui, demo_state):
    """The tables of one Kafka topic share its first hour, also where one of them had no rows in it: each hour is
    compacted once due and registered, empty or not, so the only hours missing are those not due yet."""
    url, _, _ = ui
    state, _ = demo_state
    storage = LakeStorage(str(state / ".lake" / "warehouse"))
    page = browser_page
    shown_missing, expected_missing = {}, {}
    for table in load_catalog(state / DEMO_CATALOG_DIR).topics:
        landed = ManifestStore(storage, table.database, table.table).landed_hours()
        hours = hourly_partitions(table).get_partition_keys()
        expected_missing[f"compacted/{table.name}"] = [
            hour for hour in hours if missing_raw_hours(table, KafkaHour.from_partition_key(hour).start, landed)]
        expected_missing[f"catalog/{table.name}"] = [hour for hour in hours if hour > max(landed).partition_key]
        for layer in ("compacted", "catalog"):
            page.goto(f"{url}/assets/{asset_path(layer, table)}?view=partitions")
            label = page.get_by_text(re.compile(r"^Missing \(\d+\)$")).first
            label.wait_for()
            shown_missing[f"{layer}/{table.name}"] = int(re.findall(r"\d+", label.inner_text())[0])
            if table.topic == ROUTED_TOPIC and layer == "compacted":
                screenshot(page, f"3b-partitions-{layer}-{table.database}-{table.table}.png")

    assert shown_missing == {asset: len(hours) for asset, hours in expected_missing.items()}, (
        f"only the hours not due (compacted) or not landed (catalog) may be missing: {expected_missing}")


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


def test_an_hour_landed_from_the_asset_page_names_its_run_and_shows_every_check_current(browser_page, ui, topic, demo_state):
    """One hour landed with *Materialize…* on the raw asset (the implicit asset job, every check of the asset): the
    run says what it lands in the Runs list, yields the checks it evaluated, and leaves freshness evaluated."""
    url, instance, log_file = ui
    state, _ = demo_state
    hour = sorted(hour for hour, count in landed_rows(state, topic).items() if count)[0]
    raw = asset_path("raw", topic)
    page = browser_page

    run = materialized_from_the_ui(page, ui, raw, hour, hour, "4b-materialize-one-hour.png")
    statuses = check_statuses(page, url, raw, {*LANDING_CHECKS, "freshness"})
    screenshot(page, "4c-checks-after-landing-one-hour.png")
    page.goto(f"{url}/runs")
    page.get_by_text(run.run_id[:8]).first.wait_for()
    screenshot(page, "4d-runs-after-landing-one-hour.png")
    runs_text = page.locator("body").inner_text()

    assert run.status.value == "SUCCESS", f"run {run.run_id}\n{log_tail(log_file)}"
    assert {name: run.tags.get(name) for name in ("layer", "topic", "asset")} == {
        "layer": "raw", "topic": TOPIC, "asset": raw}, run.tags
    assert f"topic: {TOPIC}" in runs_text and "layer: raw" in runs_text, "the Runs list names what the run lands"
    logs = [record.user_message for record in instance.all_logs(run.run_id) if record.user_message]
    assert not [line for line in logs if "did not yield or return expected outputs" in line], "every check it ran, it yielded"
    assert all(statuses[name] == "Succeeded" for name in LANDING_CHECKS), statuses
    assert statuses["freshness"] in ("Succeeded", "Failed"), f"freshness evaluated against this landing: {statuses}"


def test_records_no_table_takes_are_listed_with_paths_and_causes_and_each_routed_number_named(browser_page, ui, demo_state):
    """A routed topic's records that no table takes are in `_dead_letters/_unrouted/<topic>/`: the dead letters asset
    of the table that keeps them lists them, and each routed table names what its numbers count."""
    url, _, _ = ui
    state, _ = demo_state
    catalog = load_catalog(state / DEMO_CATALOG_DIR)
    routed = sorted((t for t in catalog.tables_of(ROUTED_TOPIC) if t.route is not None), key=lambda t: t.name)
    owner, other = routed[:2]  # the first by name keeps them
    storage = LakeStorage(str(state / ".lake" / "warehouse"))
    manifests = {m.hour: m for m in ManifestStore(storage, owner.database, owner.table).all()}
    hour = max(manifests, key=lambda h: manifests[h].counts.unrouted)
    unrouted = manifests[hour].counts.unrouted
    page = browser_page

    dead_letters = metadata_shown(page, url, asset_path("dead_letters", owner), hour, "unrouted")
    screenshot(page, f"4e-dead-letters-{owner.table}-unrouted.png")
    kept = metadata_shown(page, url, asset_path("raw", owner), hour, "routed_to_other_tables")
    screenshot(page, f"4f-raw-{owner.table}-routed-numbers.png")
    away = metadata_shown(page, url, asset_path("raw", other), hour, "routed_to_other_tables_or_unrouted")
    screenshot(page, f"4g-raw-{other.table}-routed-numbers.png")

    assert unrouted > 0, "the demo's traffic has event types no table takes"
    assert dead_letters.get("unrouted") == str(unrouted), dead_letters
    assert f"_dead_letters/_unrouted/{ROUTED_TOPIC}/" in dead_letters["unrouted_paths"]
    assert "no table of topic" in dead_letters["unrouted_causes"], dead_letters["unrouted_causes"]
    assert kept.get("unrouted") == str(unrouted) and "routed_to_other_tables" in kept, (
        f"the table that keeps them counts them apart from the other tables' records: {kept}")
    assert away.get("unrouted_kept_by", "").replace(" / ", "/") == asset_path("dead_letters", owner), away


def test_compacting_hours_not_due_yet_skips_them_green_with_the_reason(browser_page, ui, topic, demo_state):
    """A compaction backfill of hours of which the newest waits for its allowed lateness: the due ones compact, the
    other is skipped with the reason, and nothing is red: not its partition, not its check, not the backfill (which
    read "Succeeded 2 · Failed 1")."""
    url, instance, log_file = ui
    state, _ = demo_state
    landed = ManifestStore(LakeStorage(str(state / ".lake" / "warehouse")), topic.database, topic.table).landed_hours()
    keys = [hour.partition_key for hour in landed]
    not_due = [key for key in keys if missing_raw_hours(topic, KafkaHour.from_partition_key(key).start, landed)]
    first, last = keys[keys.index(not_due[0]) - 2], not_due[0]  # two due hours, then one not due
    compacted = asset_path("compacted", topic)
    page = browser_page
    start_sensor(page, url, "alert_on_failed_runs")

    run = materialized_from_the_ui(page, ui, compacted, first, last, "14a-compaction-backfill-dialog.png")
    backfill_id = run.tags["dagster/backfill"]
    backfill = wait_for(lambda: (b := instance.get_backfill(backfill_id)).status.value in DONE and b,
                        "the compaction backfill", log_file)
    page.goto(f"{url}/runs/b/{backfill_id}")
    shown_as = " / ".join(compacted.split("/"))
    page.get_by_text(shown_as, exact=True).first.wait_for()
    screenshot(page, "14e-compaction-backfill-page.png")
    backfill_page = " ".join(page.locator("body").inner_text().split())
    page.goto(f"{url}/assets/{compacted}?view=events")  # the newest event, shown with its metadata
    shown(page.get_by_text("not_due", exact=True).first)
    screenshot(page, "14b-compaction-events-not-due-hour.png")
    events = page.locator("body").inner_text()
    page.goto(f"{url}/assets/{compacted}?view=partitions")
    page.get_by_text(re.compile(r"^Failed \(\d+\)$")).first.wait_for()
    failed = page.get_by_text(re.compile(r"^Failed \(\d+\)$")).first.inner_text()
    screenshot(page, "14c-compaction-partitions-after-backfill.png")
    statuses = check_statuses(page, url, compacted, {"row_set_unchanged"})
    screenshot(page, "14d-compaction-checks-after-backfill.png")

    assert run.status.value == "SUCCESS", f"run {run.run_id}: hours not due are skipped\n{log_tail(log_file)}"
    assert backfill.status.value == "COMPLETED_SUCCESS", f"{last} was rightly skipped, not failed: {backfill.status}"
    hours = len(hours_between(first, last))  # targeted, in progress, succeeded, failed:
    assert "Status Succeeded" in backfill_page and f"{hours} 0 {hours} 0" in backfill_page.split(shown_as)[-1], (
        backfill_page[-1500:])
    assert failed == "Failed (0)", f"{last} waits for its allowed lateness, it did not fail"
    assert f"Partition {last}" in events and "not_due" in events and "no: not due yet" in events, events
    assert re.search(r"raw hours .+ can still add rows \(allowed lateness \d+ h\) and have not landed yet", events)
    assert statuses == {"row_set_unchanged": "Skipped"}, f"{last} was not compacted, not failed: {statuses}"


def test_a_backfill_failing_on_an_hour_not_closed_names_every_hour_it_did_not_land_and_keeps_the_hour_landed_before(
        browser_page, ui, topic, demo_state):
    """A backfill over the demo's last hour, which the demo landed and which is not closed now (the clock waits a day),
    and the hour after it, never landed: the hours before land, those two do not. The alert names both, the hours
    landed before, when the hour can land and that its earlier landing stands; the hour landed before stays landed on
    the Partitions page (it read Failed); each landing check reads the hour never landed as not judged, a warning,
    never Passed; the Runs list shows the run's hours."""
    url, instance, log_file = ui
    state, _ = demo_state
    keys = sorted(landed_rows(state, topic))
    first, held_open = keys[-3], keys[-1]  # the demo's last hour: nothing follows it, and the clock waits a day
    never_landed = KafkaHour.from_partition_key(held_open).next().partition_key
    raw = asset_path("raw", topic)
    page = browser_page
    start_sensor(page, url, "alert_on_failed_runs")

    run = materialized_from_the_ui(page, ui, raw, first, never_landed, "12a-backfill-up-to-an-hour-not-closed.png")
    alert = tick_log_saying(page, url, "alert_on_failed_runs", run.run_id[:8], log_file, "12b-alert-of-the-failed-backfill.png")
    page.goto(f"{url}/assets/{raw}?view=partitions")
    page.get_by_text(re.compile(r"^Failed \(\d+\)$")).first.wait_for()
    failed = page.get_by_text(re.compile(r"^Failed \(\d+\)$")).first.inner_text()
    screenshot(page, "12c-partitions-after-the-failed-backfill.png")
    statuses = check_statuses(page, url, raw, {*LANDING_CHECKS, "freshness"})
    screenshot(page, "13a-checks-after-the-failed-backfill.png")
    page.goto(f"{url}/assets/{raw}?view=lineage&lineageScope=downstream&lineageDepth=1")
    graph_node_link(page, "raw", topic).wait_for()
    screenshot(page, "13b-raw-node-after-the-failed-backfill.png")
    page.goto(f"{url}/runs?view=runs")  # the runs within backfills too
    page.get_by_text(run.run_id[:8]).first.wait_for()
    screenshot(page, "13c-runs-after-the-failed-backfill.png")
    runs_text = " ".join(page.locator("body").inner_text().split())
    checks = [AssetCheckKey(AssetKey(raw.split("/")), name) for name in LANDING_CHECKS]
    judged = {(info.check_key.name, info.partition_key): info.latest_execution_status.value
              for info in instance.event_log_storage.get_asset_check_partition_info(checks, partition_keys=[
                  held_open, never_landed])}

    assert run.status.value == "FAILURE"
    landed = hours_between(first, held_open)[:-1]
    [line] = [line for line in alert.splitlines() if f"[FAILED] run {run.run_id[:8]}" in line]
    assert f"of {raw} {first}...{never_landed}: HourNotClosed: {TOPIC} hour {held_open} is not closed" in line, line
    assert "It can land once they do, and at the latest from " in line, line
    assert (f"Hour {held_open} did not land, nor {never_landed} after it; this run landed {', '.join(landed)} before "
            f"it. The earlier landing of {held_open} stands.") in line, line
    assert failed == "Failed (1)", f"only {never_landed} failed: {held_open}'s earlier landing stands"
    assert judged == {(name, hour): "SUCCEEDED" if hour == held_open else "FAILED"
                      for name in LANDING_CHECKS for hour in (held_open, never_landed)}, judged
    assert all(statuses[name] == "Failed" for name in LANDING_CHECKS), f"one hour not judged, none passed: {statuses}"
    assert statuses["freshness"] in ("Succeeded", "Failed"), f"freshness evaluated, not left by the run: {statuses}"
    assert f"hours: {first}...{never_landed}" in runs_text, "a run over a range shows its hours in the Runs list"


def test_topic_health_names_the_newest_landed_hour_not_the_latest_landing(browser_page, ui, topic, demo_state):
    """After older hours were landed again, the newest landed hour is still the newest one."""
    url, _, log_file = ui
    state, _ = demo_state
    newest = max(landed_rows(state, topic))
    page = browser_page
    start_sensor(page, url, "topic_health")

    logs = tick_log_saying(page, url, "topic_health", f"{TOPIC}: freshness", log_file, "15-topic-health-tick.png")

    [line] = [line for line in logs.splitlines() if f"{TOPIC}: freshness" in line]
    assert f"newest landed hour {newest}" in line, line


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
        carried = {name.split("/", 1)[1] for name, layer in run.tags.items() if name.startswith("topic/")}
        assert run.job_name == "landing", "a sensor's landing runs under the landing job"
        assert run.tags["layer"] == "raw" and carried and carried <= set(catalog.kafka_topics), run.tags
        assert {k.path[0] for k in run.asset_selection} == {"raw", "dead_letters"}
        assert {t.topic for t in catalog.topics if AssetKey(["raw", t.database, t.table]) in run.asset_selection} == carried
        assert (run.tags.get("topic") == next(iter(carried)) if len(carried) == 1
                else run.tags["topics"].startswith(f"{len(carried)}: ")), run.tags
        assert record.dagster_run.status.value == "SUCCESS", f"run {record.dagster_run.run_id}\n{log_tail(log_file)}"
    page.goto(f"{url}/runs")
    page.get_by_text("Runs", exact=True).first.wait_for()
    screenshot(page, "11-runs.png")


def test_a_catalog_entry_broken_by_a_typo_is_red_on_each_of_its_assets_and_not_reported_missing(
        browser_page, ui, demo_state):
    """A typo in one `topic.yaml`, then *Reload* of the code location: every asset of the entry shows a failed check
    saying what is wrong where, and the topic is not alerted as missing from the catalog (it is in it, rejected)."""
    url, _, log_file = ui
    state, _ = demo_state
    [broken] = [t for t in load_catalog(state / DEMO_CATALOG_DIR).topics if t.topic == BROKEN_TOPIC]
    topic_file = Path(broken.source_file)
    topic_file.write_text(topic_file.read_text().replace("owner:", "ownr:"))
    page = browser_page
    page.goto(f"{url}/locations/kafka_lake")
    page.get_by_role("button", name="Reload").first.click()
    raw = asset_path("raw", broken)
    wait_for(lambda: "REJECTED" in (graphql(int(url.rsplit(":", 1)[1]), ASSET_DESCRIPTION, {"path": raw.split("/")})
                                    ["assetNodeOrError"].get("description") or ""), "the reload", log_file, timeout=180)
    start_sensor(page, url, "catalog_entries_rejected")
    start_sensor(page, url, "topics_missing_from_catalog")

    rejected_check = "catalog_entry_loads"
    deadline = time.monotonic() + 120  # the sensor's first tick records the checks
    while check_statuses(page, url, raw, {rejected_check}).get(rejected_check) != "Failed" and time.monotonic() < deadline:
        time.sleep(5)
    if shown(page.get_by_text(rejected_check).first, 2_000):
        page.get_by_text(rejected_check).first.click()
        shown(page.get_by_text("ownr").first)
    screenshot(page, "16a-rejected-entry-checks.png")
    details = page.locator("body").inner_text()
    page.goto(f"{url}/assets/{raw}?view=lineage&lineageScope=downstream&lineageDepth=3")
    shown(page.get_by_text(broken.table).first)
    screenshot(page, "16b-rejected-entry-lineage.png")
    statuses = {layer: check_statuses(page, url, asset_path(layer, broken), {rejected_check}).get(rejected_check)
                for layer in (*LAYERS, "dead_letters")}
    missing = tick_log_saying(page, url, "topics_missing_from_catalog", BROKEN_TOPIC, log_file, "16c-topics-missing-tick.png")

    assert str(topic_file) in details and "ownr" in details, "the check says what is wrong where"
    assert statuses == {layer: "Failed" for layer in statuses}, statuses
    assert not [line for line in missing.splitlines() if "ALERT" in line and BROKEN_TOPIC in line], missing
    assert f"have a rejected catalog entry, not a missing one (see catalog_entries_rejected): {BROKEN_TOPIC}" in missing


ASSET_DESCRIPTION = """
query ($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) { ... on AssetNode { description } } }
"""
