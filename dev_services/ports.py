"""Loopback ports for the local services: finding a free one, waiting until a server listens, and where it listens.

The one place that probes ports, so every service picks and waits for ports the same way.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port the kernel says is free right now (another process may still take it before we bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def is_port_free(port: int, host: str = LOOPBACK) -> bool:
    """True when nothing listens on `port` and we could bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As servers do: connections in TIME_WAIT from a stopped server must not block its restart.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def is_listening(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a TCP connection to host:port is accepted."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(host: str, port: int, timeout: float) -> None:
    """Blocks until host:port accepts TCP connections; TimeoutError names the address otherwise."""
    deadline = time.monotonic() + timeout
    while not is_listening(host, port):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f} s")
        time.sleep(0.05)


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket `pid` listens on, as Linux's /proc/<pid>/net has them: where a server
    listens, whatever it was asked to."""
    own = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            own.add(os.readlink(fd))
        except OSError:  # closed since it was listed
            continue
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or f"socket:[{inode}]" not in own:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            # The kernel prints the address as 32-bit words in its own byte order.
            packed = b"".join(struct.pack("=I", int(address[i:i + 8], 16)) for i in range(0, len(address), 8))
            found.add((socket.inet_ntop(family, packed), int(port, 16)))
    return found
