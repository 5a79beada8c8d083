"""A throwaway PostgreSQL server on a free loopback port, for the tests of the Postgres-backed Dagster instance.

Debian's server binaries, a fresh cluster in a temporary directory, stopped by process id and deleted.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from dev_services.ports import LOOPBACK, free_port, is_listening
from dev_services.processes import as_user, launch, stop_process

READY_TIMEOUT = 30.0
INSTALL_HINT = "install them with 'sudo apt-get install -y postgresql' (Debian/Ubuntu)"
# PostgreSQL refuses to run as root; CI runs as root, so the server runs as this account instead.
UNPRIVILEGED_ACCOUNTS = ("postgres", "nobody")


class PostgresError(RuntimeError):
    """The server binaries are missing or the server did not start; the message says what to do."""


def server_binaries() -> Path:
    """The directory holding `initdb` and `postgres`: on PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    on_path = shutil.which("initdb")
    if on_path and (Path(on_path).resolve().parent / "postgres").exists():
        return Path(on_path).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0)
    if versions:
        return Path(versions[-1]).parent
    raise PostgresError(f"the PostgreSQL server binaries (initdb, postgres) are not on PATH nor under "
                        f"/usr/lib/postgresql/*/bin: {INSTALL_HINT}")


def server_account() -> str | None:
    """Who runs the server: this user, or an unprivileged account when we are root."""
    if os.geteuid() != 0:
        return None
    for name in UNPRIVILEGED_ACCOUNTS:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise PostgresError(f"running as root and none of the accounts {', '.join(UNPRIVILEGED_ACCOUNTS)} exists "
                        "to run PostgreSQL as")


class PostgresServer:
    """`with PostgresServer() as pg:` a superuser `pg.user`/`pg.password` and a database `pg.database`."""

    def __init__(self, database: str = "dagster", user: str = "dagster", ready_timeout: float = READY_TIMEOUT):
        self.database, self.user = database, user
        self.password = secrets.token_hex(12)
        self.ready_timeout = ready_timeout
        self.port = free_port()
        self._process: subprocess.Popen | None = None
        self._root: Path | None = None

    @property
    def host(self) -> str:
        return LOOPBACK

    def env(self) -> dict[str, str]:
        """The DAGSTER_PG_* variables that point a Dagster instance at this server."""
        return {"DAGSTER_PG_HOST": self.host, "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USER": self.user,
                "DAGSTER_PG_PASSWORD": self.password, "DAGSTER_PG_DB": self.database}

    @property
    def log_file(self) -> Path:
        assert self._root is not None
        return self._root / "postgres.log"

    def start(self) -> PostgresServer:
        binaries = server_binaries()
        account = server_account()
        # Outside pytest's per-user temp tree, whose 0700 folders an unprivileged account cannot enter.
        self._root = Path(tempfile.mkdtemp(prefix="postgres-"))
        data, sockets, password_file = self._root / "data", self._root / "sockets", self._root / "password"
        sockets.mkdir()
        password_file.write_text(self.password + "\n")
        if account:
            for path in (self._root, sockets, password_file):
                shutil.chown(path, account, pwd.getpwnam(account).pw_gid)
        try:
            initdb = subprocess.run(
                [str(binaries / "initdb"), "-D", str(data), "-U", self.user, f"--pwfile={password_file}",
                 "--auth=scram-sha-256", "--encoding=UTF8", "--no-locale"],
                cwd=self._root, capture_output=True, text=True, timeout=120, **as_user(account),
            )
            if initdb.returncode != 0:
                raise PostgresError(f"initdb failed in {data}:\n{initdb.stdout[-2000:]}{initdb.stderr[-2000:]}")
            self._process = launch(
                [str(binaries / "postgres"), "-D", str(data), "-p", str(self.port), "-h", self.host,
                 "-k", str(sockets), "-c", "fsync=off"],  # a throwaway cluster: durability buys nothing
                self.log_file, cwd=self._root, user=account,
            )
            self._wait_until_accepting(binaries)
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_accepting(self, binaries: Path) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self._process is None or self._process.poll() is not None:
                raise PostgresError(f"postgres exited while starting; see {self.log_file}:\n{self._log_tail()}")
            if is_listening(self.host, self.port):
                ready = subprocess.run([str(binaries / "pg_isready"), "-h", self.host, "-p", str(self.port)],
                                       capture_output=True, text=True)
                if ready.returncode == 0:
                    return
            if time.monotonic() >= deadline:
                raise PostgresError(f"postgres on {self.host}:{self.port} does not accept connections after "
                                    f"{self.ready_timeout:.0f} s; see {self.log_file}:\n{self._log_tail()}")
            time.sleep(0.1)

    def _create_database(self) -> None:
        import psycopg2

        connection = psycopg2.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                                      dbname="postgres")
        connection.autocommit = True  # CREATE DATABASE cannot run inside a transaction
        try:
            with connection.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{self.database}"')
        finally:
            connection.close()

    def _log_tail(self, lines: int = 20) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self._process is not None:
            # SIGINT is PostgreSQL's fast shutdown; SIGTERM would wait for every client to disconnect.
            stop_process(self._process, stop_signal=signal.SIGINT)
            self._process = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
