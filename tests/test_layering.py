"""The domain core imports neither Dagster nor Spark: every module of `kafka_lake` is imported in a fresh interpreter,
and none of them may bring either in."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import kafka_lake

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = ("dagster", "pyspark", "dagster_pyspark", "dagster_aws")

IMPORT_EVERY_MODULE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))))
"""


def test_no_module_of_the_domain_core_imports_dagster_or_spark():
    modules = sorted(m.name for m in pkgutil.walk_packages(kafka_lake.__path__, "kafka_lake."))
    assert len(modules) > 30, modules  # the whole core, not an empty package

    found = subprocess.run([sys.executable, "-c", IMPORT_EVERY_MODULE, json.dumps(modules), json.dumps(FORBIDDEN)],
                           cwd=REPO, capture_output=True, text=True, check=True, timeout=120)

    assert json.loads(found.stdout.strip().splitlines()[-1]) == []
