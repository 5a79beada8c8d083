"""`make ui`: `dagster dev` (the UI, the daemon and the code location) on the state `make demo` left, in its instance.

The demo lands its topics with settings of its own: a demo PII key, its copy of the catalog, its broker, its Dagster
home. The UI must show those runs and land and re-land those same topics, so it runs with the settings the demo wrote to
`.lake/demo.env`, over those of the environment, and never on a temporary instance of `dagster dev`'s own.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from urllib.parse import urlsplit

from dev_services.demo import DEMO_ENV_FILE, STATE_DIR, dagster_home

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PORT = 3000  # `make ui PORT=…` picks another
# What `dagster dev` is given unless told otherwise: each option's names (any of which given leaves it out), its value.
DEFAULT_ARGS = {("-w", "--workspace", "-m", "--module-name", "-f", "--python-file", "--package-name"):
                str(REPO / "workspace.yaml"),
                ("-h", "--host", "--dagit-host"): "127.0.0.1",
                ("-p", "--port", "--dagit-port"): str(DEFAULT_PORT)}


def read_env_file(path: Path) -> dict[str, str]:
    """`KEY=value` lines (shell quoting, `#` comments), as the demo writes them."""
    settings = {}
    for line in path.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words:
            name, _, value = words[0].partition("=")
            settings[name] = value
    return settings


def ui_environment(environ: dict[str, str], env_file: Path = DEMO_ENV_FILE) -> dict[str, str]:
    """The environment, the demo's settings over it, and a Dagster home in any case: the demo's, else the environment's,
    else the repository's `.dagster_home` (as the Makefile sets it)."""
    demo = read_env_file(env_file) if env_file.exists() else {}
    env = {**environ, **demo}
    env["DAGSTER_HOME"] = str(dagster_home(env))
    return env


def dagster_dev_arguments(argv: list[str]) -> list[str]:
    """`dagster dev`'s arguments: those given, and for each of workspace, host and port not given, the repository's
    workspace, loopback and port 3000."""
    given = {word.split("=", 1)[0] for word in argv}
    defaults = [word for names, value in DEFAULT_ARGS.items() if not given & set(names) for word in (names[0], value)]
    return [*argv, *defaults]


def main(argv: list[str] | None = None) -> int:
    from deploy.instance import INSTANCE_FILE_NAME, write_instance
    from dev_services import tansu

    env = ui_environment(dict(os.environ))
    home = Path(env["DAGSTER_HOME"])
    if not DEMO_ENV_FILE.exists():
        print(f"No {DEMO_ENV_FILE}: serving the repository's catalog with the environment's settings "
              "(run `make demo` first for data and a broker).", file=sys.stderr)
    elif os.environ.get("DAGSTER_HOME") and Path(os.environ["DAGSTER_HOME"]).resolve() != home:
        print(f"Serving the demo's Dagster home {home} (its runs), not $DAGSTER_HOME {os.environ['DAGSTER_HOME']}.",
              file=sys.stderr)
    if not (home / INSTANCE_FILE_NAME).exists():
        if DEMO_ENV_FILE.exists():
            print(f"error: the demo's Dagster home {home} has no {INSTANCE_FILE_NAME}: run `make demo` again",
                  file=sys.stderr)
            return 1
        write_instance(home, env)
    broker = urlsplit(f"//{env.get('KAFKA_BOOTSTRAP_SERVERS') or '127.0.0.1:9092'}")
    if broker.hostname in ("127.0.0.1", "localhost") and broker.port:
        # The demo's broker, or the local one; Tansu keeps topics in memory, so one started now is empty.
        tansu.start_detached(STATE_DIR / "broker" / tansu.PID_FILE_NAME, STATE_DIR / "broker" / tansu.LOG_FILE_NAME,
                             port=broker.port)
    dagster = str(Path(sys.executable).with_name("dagster"))
    os.execvpe(dagster, [dagster, "dev", *dagster_dev_arguments(argv or [])], env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
