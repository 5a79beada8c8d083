"""Service processes: started in a session of their own, stopped by process id (SIGTERM, then SIGKILL).

The one place that signals processes, so no service is ever stopped by name.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

DEFAULT_STOP_TIMEOUT = 10.0


def launch(argv: list[str], log_file: Path, cwd: Path | None = None, env: dict | None = None,
           user: str | None = None) -> subprocess.Popen:
    """Starts `argv` with stdout and stderr appended to `log_file`, as `user` when given (needs root).

    A session of its own keeps the service alive when the starting shell exits (the pid-file
    mode) and keeps Ctrl-C in a test run from reaching it before our own cleanup does.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=cwd, env=env, start_new_session=True, **as_user(user),
        )


def as_user(user: str | None) -> dict:
    """Popen arguments that run the child as `user` with that user's own group, or none."""
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def is_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie child of ours is reaped and counts as gone."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: only its state in /proc tells
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def command_line(pid: int) -> list[str]:
    """The argv of a running process, or [] when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def stop_pid(pid: int, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
    """SIGTERM, then SIGKILL if `pid` is still running after `timeout` seconds."""
    if not is_alive(pid):
        return
    _signal(pid, signal.SIGTERM)
    if _wait_gone(pid, timeout):
        return
    _signal(pid, signal.SIGKILL)
    _wait_gone(pid, 5.0)


def stop_process(process: subprocess.Popen, timeout: float = DEFAULT_STOP_TIMEOUT,
                 stop_signal: int = signal.SIGTERM) -> None:
    """Stops a child we started (`stop_signal`, then SIGKILL), and reaps it so no zombie is left behind."""
    if process.poll() is not None:
        return
    process.send_signal(stop_signal)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5.0)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
