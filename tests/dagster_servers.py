"""Dagster's own servers for the deployment and UI tests: a code server or a webserver on a free loopback
port, stopped by process id, and the webserver's GraphQL API over HTTP.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from dev_services.ports import LOOPBACK, is_listening
from dev_services.processes import launch, stop_process

VENV_BIN = Path(sys.executable).parent
START_TIMEOUT = 180.0  # loading the code location imports Dagster, pyspark and the catalog on a busy machine
STOP_TIMEOUT = 20.0  # the webserver finishes its requests and stops its code servers first

WORKSPACE_QUERY = """
{
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        displayMetadata { key value }
        locationOrLoadError {
          __typename
          ... on RepositoryLocation { repositories { assetNodes { assetKey { path } } } }
          ... on PythonError { message }
        }
      }
    }
    ... on PythonError { message }
  }
}
"""


def log_tail(log_file: Path, lines: int = 40) -> str:
    if not log_file.exists():
        return ""
    return "\n".join(log_file.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def serving(argv: list[str], port: int, log_file: Path, env: dict, cwd: Path, what: str,
            start_timeout: float = START_TIMEOUT):
    """Runs `argv` until the block ends; enters once it accepts connections on `port`."""
    process = launch(argv, log_file, cwd=cwd, env=env)
    try:
        deadline = time.monotonic() + start_timeout
        while not is_listening(LOOPBACK, port):
            if process.poll() is not None:
                raise AssertionError(f"{what} exited with {process.returncode} while starting; {log_file}:\n"
                                     f"{log_tail(log_file)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} does not listen on {LOOPBACK}:{port} after {start_timeout:.0f} s; "
                                     f"{log_file}:\n{log_tail(log_file)}")
            time.sleep(0.2)
        yield process
    finally:
        stop_process(process, STOP_TIMEOUT)


def webserver_command(workspace: Path, port: int) -> list[str]:
    return [str(VENV_BIN / "dagster-webserver"), "-w", str(workspace), "-h", LOOPBACK, "-p", str(port)]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://{LOOPBACK}:{port}/graphql", data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    assert not answer.get("errors"), f"GraphQL errors: {answer['errors']}"
    return answer["data"]


def loaded_location(port: int, name: str, log_file: Path, timeout: float = START_TIMEOUT) -> dict:
    """The workspace entry of code location `name` once the webserver has loaded it; fails on a load error."""
    deadline = time.monotonic() + timeout
    entry = None
    while time.monotonic() < deadline:
        try:
            workspace = graphql(port, WORKSPACE_QUERY)["workspaceOrError"]
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
            continue
        assert workspace["__typename"] == "Workspace", workspace
        entry = next((e for e in workspace["locationEntries"] if e["name"] == name), None)
        if entry and entry["loadStatus"] == "LOADED":
            loaded = entry["locationOrLoadError"]
            assert loaded and loaded["__typename"] == "RepositoryLocation", (
                f"code location {name} failed to load: {loaded}\n{log_tail(log_file)}")
            return entry
        time.sleep(0.5)
    raise AssertionError(f"code location {name} not loaded after {timeout:.0f} s (last: {entry}); "
                         f"{log_file}:\n{log_tail(log_file)}")


def asset_keys(location_entry: dict) -> set[str]:
    return {"/".join(node["assetKey"]["path"])
            for repository in location_entry["locationOrLoadError"]["repositories"]
            for node in repository["assetNodes"]}
