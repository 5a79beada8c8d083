"""Loopback ports for the local services: finding a free one and waiting until a server listens.

The one place that probes ports, so every service picks and waits for ports the same way.
"""

from __future__ import annotations

import socket
import time

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
