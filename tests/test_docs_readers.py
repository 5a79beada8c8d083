"""The docs' reader snippets, run as written, so the docs cannot drift from the tables they read.

Every fenced block of README.md and docs/*.md right after a `<!-- reader: hive -->` or `<!-- reader: iceberg -->` line
runs by its language (`bash`, `python`) in a folder laid out as the repository root after `make demo` (or
`make demo TABLE_FORMAT=iceberg`): `.venv` (this one), the sample tables `shop.page_views` and `payments.transactions`
landed from the real broker into `.lake/warehouse`, their hour compacted, and for the Hive layout registered by the
Dagster CLI in the embedded metastore under `.lake/metastore`, as a user would. Each Hive reader must count every row
the tables hold, the compacted hour's included. A block marked `not run here (why)` needs what this machine cannot
have (Athena, jars from Maven); the Spark one among them is checked for what made it find no table, the catalog name.
A block that reads a table without a marker fails the test.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer

from dev_services.demo_traffic import DeliveryLog, PageViews, Transactions, finish, kafka_timestamps, send
from kafka_lake.kafka.log import consumer_config
from kafka_lake.lake.layout import EMBEDDED_ICEBERG_CATALOG_PATH
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.landing_settings import LandingSettings
from kafka_lake.tables import formats
from kafka_lake.tables.iceberg.catalog import CATALOG_NAME, IcebergCatalogConfig
from kafka_lake.tables.table_format import TableAccess
from kafka_lake.topics.loader import load_catalog
from kafka_lake.upkeep.compaction import compact_hour, compact_partition
from tests.constants import PII_TEST_KEY, REPO
from tests.landing_fixtures import in_this_process, land, unique_topic_name

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKED = re.compile(r"^<!-- reader: (?P<how>[^\n]*?) -->\n```(?P<language>\w+)\n(?P<code>.*?)\n```", re.S | re.M)
FENCED = re.compile(r"^```(?P<language>\w+)\n(?P<code>.*?)\n```", re.S | re.M)
READS_A_TABLE = re.compile(r"\bFROM\b|load_table|iceberg_scan|read_table|\.dataset\(|read\.parquet")
HOUR = datetime(2026, 11, 21, 10, tzinfo=timezone.utc)  # the day the snippets' filters name
SAMPLES = {"shop/page_views": PageViews, "payments/transactions": Transactions}
RUNNERS = {"bash": ["bash", "-euo", "pipefail", "-c"], "python": [sys.executable, "-c"]}


@dataclass(frozen=True)
class Snippet:
    doc: str
    how: str  # "hive", "iceberg", or "not run here (why)"
    language: str
    code: str

    def __str__(self) -> str:
        return f"{self.doc}: {self.language} snippet for {self.how}: {self.code.splitlines()[0]}"


def reader_snippets() -> list[Snippet]:
    return [Snippet(doc.name, m["how"], m["language"], m["code"]) for doc in DOCS for m in MARKED.finditer(doc.read_text())]


def test_every_snippet_that_reads_a_table_is_marked_as_a_reader():
    marked = {snippet.code for snippet in reader_snippets()}
    unmarked = [f"{doc.name}: {m['code'].splitlines()[0]}" for doc in DOCS for m in FENCED.finditer(doc.read_text())
                if READS_A_TABLE.search(m["code"]) and m["code"] not in marked]

    assert unmarked == [], "mark each as <!-- reader: hive|iceberg --> (run here) or <!-- reader: not run here (why) -->"
    assert {s.how for s in reader_snippets()} >= {"hive", "iceberg"}
    assert all(s.language in RUNNERS for s in reader_snippets() if s.how in ("hive", "iceberg"))


def write_samples(catalog_dir: Path, table_format: str) -> dict[str, object]:
    """The sample catalog's page views and transactions under topics of their own (the broker is the suite's), in
    `table_format`; their table names are the samples' own, which the snippets query."""
    for folder in SAMPLES:
        shutil.copytree(REPO / "schema_catalog" / folder, catalog_dir / folder)
        path = catalog_dir / folder / "topic.yaml"
        text = re.sub(r"^topic: .*$", f"topic: {unique_topic_name()}", path.read_text(), count=1, flags=re.M)
        path.write_text(text + f"table_format: {table_format}\n")
    catalog = load_catalog(catalog_dir)
    return {folder: catalog.by_name(*folder.split("/")) for folder in SAMPLES}


def produce_hour(bootstrap: str, topics: dict) -> None:
    """An hour of each sample's demo traffic on one partition, and a record past the hour that closes it."""
    producer, deliveries = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20}), DeliveryLog()
    for folder, spec in topics.items():
        generator = SAMPLES[folder](spec, random.Random(folder))
        version = spec.schema_versions[-1].version
        records = [generator.next_record(stamp, version, 1, None) for stamp in kafka_timestamps([HOUR], 40, generator.rng)]
        closing = generator.closing_record(int((HOUR + timedelta(hours=1, minutes=5)).timestamp() * 1000), 0, 1)
        send(producer, spec.topic, records + [closing], deliveries)
    finish(producer, deliveries, bootstrap)


@dataclass(frozen=True)
class DemoRoot:
    table_format: str
    root: Path
    rows: dict[str, int]  # of each sample table, as its landed hours' manifests count them


@pytest.fixture(scope="module", params=["hive", "iceberg"])
def demo_root(request, broker, tmp_path_factory):
    """A folder laid out as the repository root after the demo of this table format: the samples' hour landed with the
    hours that make it due, compacted, and (Hive) every placement hour registered by `dagster asset materialize` run
    from there, so the embedded metastore is `.lake/metastore`."""
    table_format = request.param
    root = tmp_path_factory.mktemp(f"{table_format}-root")
    (root / ".venv").symlink_to(REPO / ".venv")
    topics = write_samples(root / "catalog", table_format)
    for spec in topics.values():
        broker.create_topic(spec.topic, 1)
    produce_hour(broker.bootstrap_servers, topics)
    lake = str(root / ".lake" / "warehouse")
    storage = LakeStorage(lake)
    settings = LandingSettings(lake_root=lake, kafka_config=consumer_config(broker.bootstrap_servers),
                               pii_key=PII_TEST_KEY.encode(), iceberg_catalog=IcebergCatalogConfig(lake))
    rows, placements = {}, set()
    for folder, spec in topics.items():
        hours = [HOUR + timedelta(hours=n) for n in range(spec.allowed_lateness_hours + 1)]  # the hours feeding HOUR
        landed = land(spec, hours, settings, in_this_process, now=hours[-1] + timedelta(hours=2))
        rows[folder] = sum(result.manifest.counts.rows for result in landed)
        placements |= {f.placement_hour for result in landed for f in result.manifest.files if f.kind == "data"}
        if spec.table_format == "hive":  # the catalog is switched to the generation when the CLI registers the hour
            compacted = compact_hour(spec, HOUR, storage, lambda tasks: [compact_partition(t) for t in tasks],
                                     lambda manifests: None)
            assert compacted.manifests, f"{folder}: hour {HOUR} holds rows to compact"
        else:
            iceberg = formats.table_format(spec, TableAccess(storage, IcebergCatalogConfig(lake)))
            assert iceberg.compact_hour(spec, HOUR).check.passed
    if table_format == "hive":
        env = {**os.environ, "SCHEMA_CATALOG_DIR": str(root / "catalog"), "PII_HMAC_KEY": PII_TEST_KEY,
               "SPARK_MASTER": "local[1]", "DAGSTER_HOME": str(tmp_path_factory.mktemp("dagster-home"))}
        env.pop("LAKE_ROOT", None)  # the default, `.lake/warehouse` under the folder it runs in
        registered = subprocess.run(  # one run registers every sample's placement hours: a range, in one run
            [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize", "--select",
             ",".join(f"catalog/{folder}" for folder in SAMPLES), "--partition-range",
             f"{min(placements):%Y-%m-%d-%H:00}...{max(placements):%Y-%m-%d-%H:00}", "-m", "platform_assets.definitions"],
            env=env, cwd=root, capture_output=True, text=True, timeout=300)
        assert registered.returncode == 0, registered.stderr[-3000:]
    return DemoRoot(table_format, root, rows)


def counts_printed(stdout: str) -> dict[str, int]:
    """The rows a Hive reader snippet counted: a lone number counts the page views; `spark-sql`'s two queries print a
    line per group, the page views' of five columns (count third from the end), the payments' of four (second)."""
    lines = [line.split("\t") for line in stdout.strip().splitlines()]
    if len(lines) == 1 and len(lines[0]) == 1:
        return {"shop/page_views": int(lines[0][0])}
    return {"shop/page_views": sum(int(line[3]) for line in lines if len(line) == 5),
            "payments/transactions": sum(int(line[2]) for line in lines if len(line) == 4)}


def test_each_reader_snippet_of_the_docs_runs_as_written_on_the_tables_it_reads(demo_root):
    """Each reader runs as written on tables one of whose hours is compacted. A Hive reader counts every row: before,
    the folder readers (pyarrow.dataset and DuckDB over the folders, Spark's `read.parquet`) skipped the compacted
    hour, whose files sit in a hidden generation folder, and counted a few of the rows."""
    snippets = [s for s in reader_snippets() if s.how == demo_root.table_format]
    assert snippets
    env = {name: value for name, value in os.environ.items() if name not in ("LAKE_ROOT", "ICEBERG_CATALOG_NAME")}
    for snippet in snippets:
        ran = subprocess.run([*RUNNERS[snippet.language], snippet.code], cwd=demo_root.root, env=env,
                             capture_output=True, text=True, timeout=300)

        assert ran.returncode == 0, f"{snippet}\n{ran.stderr[-3000:]}"
        assert re.search(r"\b[1-9]\d*\b", ran.stdout), f"{snippet} printed no count of rows:\n{ran.stdout}"
        if demo_root.table_format == "hive":
            counted = counts_printed(ran.stdout)
            assert counted == {table: demo_root.rows[table] for table in counted}, f"{snippet}\n{ran.stdout}"


@pytest.mark.parametrize("demo_root", ["iceberg"], indirect=True)  # the SQL catalog holds the Iceberg tables
def test_the_spark_snippet_names_the_catalog_the_tables_are_registered_under(demo_root):
    """Spark's JDBC catalog lists the tables whose `catalog_name` is its own name: the snippet (which needs jars from
    Maven, not here) must name its catalog as the platform registers them. Before, the README called it `lake`."""
    root = demo_root.root
    [spark] = [s for s in reader_snippets() if s.how.startswith("not run here") and "SparkCatalog" in s.code]
    names = set(re.findall(r"spark\.sql\.catalog\.(\w+)=", spark.code))
    with sqlite3.connect(root / ".lake" / "warehouse" / EMBEDDED_ICEBERG_CATALOG_PATH) as catalog:
        registered = catalog.execute("SELECT catalog_name, table_namespace, table_name FROM iceberg_tables").fetchall()

    assert names == {CATALOG_NAME}
    assert (CATALOG_NAME, "shop", "page_views") in registered
    assert f"FROM {CATALOG_NAME}.shop.page_views" in spark.code
