"""Renders the Dagster instance file, $DAGSTER_HOME/dagster.yaml, from the instance settings in deploy/dagster.yaml.
Runs, event logs and schedules in Postgres when DAGSTER_PG_* is set, else in SQLite under $DAGSTER_HOME.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

REPOSITORY_INSTANCE_FILE = Path(__file__).resolve().parent / "dagster.yaml"
INSTANCE_FILE_NAME = "dagster.yaml"
# The variable each field of Dagster's `postgres_db` reads. The rendered file names the variables,
# not their values, so the password never lands on disk.
POSTGRES_FIELDS = {
    "hostname": "DAGSTER_PG_HOST",
    "username": "DAGSTER_PG_USER",
    "password": "DAGSTER_PG_PASSWORD",
    "db_name": "DAGSTER_PG_DB",
    "port": "DAGSTER_PG_PORT",
}
OPTIONAL_POSTGRES_VARIABLES = {"DAGSTER_PG_PORT"}  # Dagster's default is 5432


class InstanceConfigError(ValueError):
    """The environment or the template cannot make a valid instance file; the message says how to fix it."""


def postgres_variables_set(environ) -> list[str]:
    return [name for name in POSTGRES_FIELDS.values() if environ.get(name)]


def postgres_storage(environ) -> dict | None:
    """The storage sections for Postgres when DAGSTER_PG_* is set, None when none of it is: Dagster's run and schedule
    storage, and its event log storing a batch of events in one transaction (deploy/event_batches.py)."""
    present = postgres_variables_set(environ)
    if not present:
        return None
    missing = [name for name in POSTGRES_FIELDS.values()
               if name not in OPTIONAL_POSTGRES_VARIABLES and not environ.get(name)]
    if missing:
        raise InstanceConfigError(
            f"{', '.join(present)} {'is' if len(present) == 1 else 'are'} set but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not: set all of them for Postgres storage, "
            "or none for SQLite under $DAGSTER_HOME")
    port = environ.get("DAGSTER_PG_PORT")
    if port and not port.isdigit():
        raise InstanceConfigError(f"DAGSTER_PG_PORT must be a port number, not {port!r}")
    connection = {field: {"env": variable} for field, variable in POSTGRES_FIELDS.items() if environ.get(variable)}
    # SQLAlchemy 2.1 reads a bare `postgresql://` as psycopg 3; dagster-postgres ships and uses psycopg2.
    connection["scheme"] = "postgresql+psycopg2"
    config = {"postgres_db": connection}
    return {"run_storage": {"module": "dagster_postgres.run_storage", "class": "PostgresRunStorage", "config": config},
            "event_log_storage": {"module": "deploy.event_batches", "class": "BatchingPostgresEventLogStorage",
                                  "config": config},
            "schedule_storage": {"module": "dagster_postgres.schedule_storage", "class": "PostgresScheduleStorage",
                                 "config": config}}


def render_instance(template_text: str, environ, template_name: str = "dagster.yaml",
                    dagster_home: str | Path | None = None) -> str:
    """The template as it is, plus the Postgres storage section when DAGSTER_PG_* asks for it (a deployment; a laptop,
    the demo and the tests keep SQLite): every other setting is the same in both. For SQLite, given the home, its event
    log section (`sqlite_event_log`).

    Appending text rather than dumping parsed YAML keeps the template's comments, which say why
    each limit is what it is, in the file an operator finds on the server.
    """
    try:
        settings = yaml.safe_load(template_text) or {}
    except yaml.YAMLError as error:
        raise InstanceConfigError(f"{template_name} is not valid YAML: {error}") from None
    if not isinstance(settings, dict):
        raise InstanceConfigError(f"{template_name} must be a mapping of Dagster instance settings")
    storage = postgres_storage(environ)
    if storage is None:
        return template_text if dagster_home is None or _configures_storage(settings) else (
            template_text.rstrip("\n") + "\n" + sqlite_event_log(dagster_home))
    if _configures_storage(settings):
        raise InstanceConfigError(
            f"{template_name} configures storage itself, so DAGSTER_PG_* cannot choose Postgres: "
            "remove its storage sections or unset DAGSTER_PG_*")
    section = yaml.safe_dump(storage, default_flow_style=False, sort_keys=False)
    header = "# Runs, event logs and schedules in Postgres: rendered because DAGSTER_PG_* is set.\n"
    return template_text.rstrip("\n") + "\n" + header + section


def _configures_storage(settings: dict) -> bool:
    return any(key in settings for key in ("storage", "run_storage", "event_log_storage", "schedule_storage"))


def sqlite_event_log(dagster_home: str | Path) -> str:
    """The event log in SQLite where Dagster keeps it by default ($DAGSTER_HOME/history/runs), storing a batch of events
    (a new run's planned events) in one transaction (deploy/event_batches.py)."""
    section = {"event_log_storage": {"module": "deploy.event_batches", "class": "BatchingSqliteEventLogStorage",
                                     "config": {"base_dir": str(Path(dagster_home).resolve() / "history" / "runs")}}}
    header = "# The event log in SQLite under $DAGSTER_HOME, a batch of events a transaction: rendered for this home.\n"
    return header + yaml.safe_dump(section, default_flow_style=False, sort_keys=False)


def write_instance(dagster_home: str | Path, environ=None, template: Path = REPOSITORY_INSTANCE_FILE) -> Path:
    """Writes $DAGSTER_HOME/dagster.yaml (creating the directory) and returns its path."""
    env = os.environ if environ is None else environ
    rendered = render_instance(template.read_text(), env, str(template), dagster_home)
    home = Path(dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    target = home / INSTANCE_FILE_NAME
    # Written beside the target, then renamed: a webserver starting meanwhile never reads half a file.
    partial = target.with_name(f".{INSTANCE_FILE_NAME}.partial")
    partial.write_text(rendered)
    partial.replace(target)
    return target


def describe_storage(environ) -> str:
    if not postgres_variables_set(environ):
        return "SQLite under $DAGSTER_HOME"
    return (f"Postgres at {environ['DAGSTER_PG_HOST']}:{environ.get('DAGSTER_PG_PORT') or 5432}"
            f"/{environ['DAGSTER_PG_DB']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.instance", description=__doc__.splitlines()[0])
    parser.add_argument("dagster_home", nargs="?", default=os.environ.get("DAGSTER_HOME"),
                        help="where to write dagster.yaml (default: $DAGSTER_HOME)")
    parser.add_argument("--template", type=Path, default=REPOSITORY_INSTANCE_FILE,
                        help="the instance settings to start from (default: deploy/dagster.yaml)")
    args = parser.parse_args(argv)
    if not args.dagster_home:
        print("error: give the Dagster home directory or set DAGSTER_HOME", file=sys.stderr)
        return 2
    try:
        target = write_instance(args.dagster_home, os.environ, args.template)
    except (InstanceConfigError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"Dagster instance {target}: storage in {describe_storage(os.environ)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
