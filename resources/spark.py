"""The Spark session, through dagster-pyspark; `SPARK_MASTER` selects the cluster.
Lazy: the session starts on first use, so loading the code location never starts Spark.
"""

from __future__ import annotations

import os
import re
import sys

from dagster_pyspark import LazyPySparkResource

STATE_DIR = ".lake"


# The driver's JVM (local mode's executors too) only schedules tasks and carries their pickled reports: every record
# is read, decoded and written in the Python workers. Its optimizing compiler (C2) spent more CPU compiling Spark's
# scheduler than the rest of the JVM's work in a landing run (bench/RESULTS.md); the quick compiler (C1) alone
# serves that work as well. A cluster's executors take it from spark-defaults.conf (README).
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


def spark_config(master: str, extra: dict | None = None, hive_metastore_uri: str | None = None) -> dict:
    state = os.path.abspath(STATE_DIR)  # absolute: Spark's JVM and tasks may run elsewhere
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
        # The table catalog: Spark's Hive support, embedded Derby (one process at a time) unless a URI is given.
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": os.path.join(state, "spark-warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={os.path.join(state, 'metastore')} {JIT_OPTIONS}",
        # New Avro fields inside a record add fields to a struct column, which Hive refuses by default.
        "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
    }
    if hive_metastore_uri:
        config["spark.hadoop.hive.metastore.uris"] = hive_metastore_uri
    config.update(extra or {})
    return config


def use_this_python_for_workers() -> None:
    """PySpark starts its Python workers with $PYSPARK_PYTHON (else `python3` from PATH), not the
    `spark.pyspark.python` setting, so a venv's packages would be missing in the workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def spark_resource(master: str, extra: dict | None = None, hive_metastore_uri: str | None = None) -> LazyPySparkResource:
    use_this_python_for_workers()
    return LazyPySparkResource(spark_config=spark_config(master, extra, hive_metastore_uri))
