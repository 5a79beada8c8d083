"""The Spark session, through dagster-pyspark; `SPARK_MASTER` selects the cluster.

Lazy: the session starts on first use, so loading the code location never starts Spark.
"""

from __future__ import annotations

import os
import re
import sys

from dagster_pyspark import LazyPySparkResource


def spark_config(master: str, extra: dict | None = None) -> dict:
    config = {
        # local[N] never retries a failed task; local[N,F] does, like a cluster would.
        "spark.master": re.sub(r"^local\[([^\],]+)\]$", r"local[\1,3]", master),
        "spark.app.name": "kafka-lake",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.task.maxFailures": "4",
        "spark.python.worker.reuse": "true",
    }
    config.update(extra or {})
    return config


def use_this_python_for_workers() -> None:
    """PySpark starts its Python workers with $PYSPARK_PYTHON (else `python3` from PATH), not the
    `spark.pyspark.python` setting, so a venv's packages would be missing in the workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def spark_resource(master: str, extra: dict | None = None) -> LazyPySparkResource:
    use_this_python_for_workers()
    return LazyPySparkResource(spark_config=spark_config(master, extra))
