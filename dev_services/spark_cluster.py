"""A real Spark standalone cluster on loopback: one master and N workers from the pyspark package.

For tests and local trials of `SPARK_MASTER=spark://…`; stopped by process id.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyspark

from dev_services.ports import free_port, wait_for_port
from dev_services.processes import launch, stop_process

READY_TIMEOUT = 60.0


def spark_home() -> str:
    return os.path.dirname(pyspark.__file__)


class StandaloneSparkCluster:
    def __init__(self, workers: int = 2, cores_per_worker: int = 1, memory_per_worker: str = "2g",
                 state_dir: str | Path | None = None):
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="spark-cluster-"))
        self.port = free_port()
        self._processes = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict:
        return {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.state_dir / "logs"), "SPARK_NO_DAEMONIZE": "1"}

    def _spark_class(self, *args: str) -> list[str]:
        return [os.path.join(spark_home(), "bin", "spark-class"), *args]

    def start(self) -> StandaloneSparkCluster:
        master = self._spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--webui-port", str(free_port()))
        self._processes.append(launch(master, self.state_dir / "master.log", env=self._env()))
        wait_for_port("127.0.0.1", self.port, READY_TIMEOUT)
        for number in range(self.workers):
            work_dir = self.state_dir / f"worker-{number}"
            work_dir.mkdir(parents=True, exist_ok=True)
            worker = self._spark_class(
                "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                "--cores", str(self.cores_per_worker), "--memory", self.memory_per_worker,
                "--webui-port", str(free_port()), "--work-dir", str(work_dir),
            )
            self._processes.append(launch(worker, self.state_dir / f"worker-{number}.log", env=self._env()))
        self._wait_for_workers()
        return self

    def _wait_for_workers(self) -> None:
        import time

        deadline = time.monotonic() + READY_TIMEOUT
        log = self.state_dir / "master.log"
        while time.monotonic() < deadline:
            registered = log.read_text(errors="replace").count("Registering worker") if log.exists() else 0
            if registered >= self.workers:
                return
            time.sleep(0.5)
        raise RuntimeError(f"Spark workers did not register with {self.master_url} within {READY_TIMEOUT:.0f}s; see {log}")

    def stop(self) -> None:
        for process in reversed(self._processes):
            stop_process(process)
        self._processes.clear()

    def __enter__(self) -> StandaloneSparkCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
