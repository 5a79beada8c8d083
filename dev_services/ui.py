"""`make ui`: `dagster dev` (the UI, the daemon and the code location) on the state `make demo` left.

The demo lands its topics with settings of its own: a demo PII key, its copy of the catalog, its broker.
The UI must land and re-land those same topics, so it runs with the settings the demo wrote to
`.lake/demo.env`, over those of the environment.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from dev_services.demo import DEMO_ENV_FILE

DEFAULT_ARGS = ["-w", "workspace.yaml", "-h", "127.0.0.1", "-p", "3000"]


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
    demo = read_env_file(env_file) if env_file.exists() else {}
    return {**environ, **demo}


def main(argv: list[str] | None = None) -> int:
    env = ui_environment(dict(os.environ))
    if not DEMO_ENV_FILE.exists():
        print(f"No {DEMO_ENV_FILE}: serving the repository's catalog with the environment's settings "
              "(run `make demo` first for data and a broker).", file=sys.stderr)
    dagster = str(Path(sys.executable).with_name("dagster"))
    os.execvpe(dagster, [dagster, "dev", *(argv if argv else DEFAULT_ARGS)], env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
