"""Dagster's instance and event logs, storing a batch of events in one transaction: a new run's planned events (one an
asset and check it selects, 1,500 for a landing run of 250 topics) cost one commit, not one each."""


from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from dagster import DagsterInstance, Field
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from kafka_lake.settings import RUN_TABLES_VARIABLE

# Events Dagster buffers before it writes a batch: more than a run of 250 topics plans (6 an asset landing).
EVENT_BATCH_SIZE = 5_000


# One at a time, SQLite opens its files, commits and closes them for each event, and Postgres opens a connection for
# each statement (Dagster's Postgres storage pools none): about 12 ms of the daemon's CPU an event on a quiet machine,
# which made creating one hour's runs at 2,000 topics cost minutes. Dagster already hands planned events (and a run's
# materializations over a range of hours) to the event log as batches when event batching is on
# (`DAGSTER_EVENT_BATCH_SIZE`); `BatchingInstance` turns it on whatever the environment says, and the event logs here
# store a batch over one connection (a database file) in one transaction. deploy/instance.py renders them into the
# instance file.


class BatchingInstance(DagsterInstance):
    """Batches the events Dagster marks as a batch (planned events, ranges' materializations); DAGSTER_EVENT_BATCH_SIZE
    still sets the size where given.

    `run_tables`: given only in the instance a run's process is handed (deploy/run_launcher.py), the tables the run
    carries. The process makes that instance before it imports the code location, so they are set as
    `PLATFORM_RUN_TABLES` for the code location to build those tables alone (`PlatformSettings.run_tables`)."""

    def __init__(self, *args, run_tables: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if run_tables:
            os.environ[RUN_TABLES_VARIABLE] = ",".join(run_tables)

    @classmethod
    def config_schema(cls) -> dict:
        return {"run_tables": Field([str], is_required=False)}

    @staticmethod
    def config_defaults(base_dir: str):
        return InstanceRef.config_defaults(base_dir)

    def _get_event_batch_size(self) -> int:
        return int(os.getenv("DAGSTER_EVENT_BATCH_SIZE", str(EVENT_BATCH_SIZE)))


class _OneTransactionABatch:
    """An event log whose `store_event_batch` stores every event of the batch (each with Dagster's own `store_event`)
    over one connection a database, in one transaction committed at the end; on an error nothing of it stays, and
    Dagster stores the events one at a time instead."""

    _batch = threading.local()

    def store_event_batch(self, events: Sequence) -> None:
        if getattr(self._batch, "connections", None) is not None:
            super().store_event_batch(events)  # type: ignore[misc]
            return
        self._batch.connections = {}
        try:
            super().store_event_batch(events)  # type: ignore[misc]
            for _connection, transaction in self._batch.connections.values():
                transaction.commit()
        finally:
            for connection, transaction in self._batch.connections.values():
                if transaction.is_active:
                    transaction.rollback()
                connection.close()
            self._batch.connections = None

    @contextmanager
    def _batch_connection(self, database: str, open_connection) -> Iterator:
        """The batch's connection to `database`, opened (and its transaction begun) by `open_connection` at first use."""
        connections = self._batch.connections
        if database not in connections:
            connection = open_connection()
            connections[database] = (connection, connection.begin())
        yield connections[database][0]

    def _in_batch(self) -> bool:
        return getattr(self._batch, "connections", None) is not None


class BatchingSqliteEventLogStorage(_OneTransactionABatch, SqliteEventLogStorage):
    """SQLite's event log (a file a run and an index), a batch of events in one transaction a file."""

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, **config_value)

    @property
    def supports_asset_checks(self) -> bool:
        """Asked before storing every check event, a query of SQLite's schema each time; once the table is there, it
        stays."""
        if not getattr(self, "_has_asset_checks", False):
            self._has_asset_checks = super().supports_asset_checks
        return self._has_asset_checks

    @contextmanager
    def _connect(self, shard: str) -> Iterator:
        if not self._in_batch():
            with super()._connect(shard) as connection:
                yield connection
            return
        with self._batch_connection(shard, lambda: self._open(shard)) as connection:
            yield connection

    def _open(self, shard: str):
        with self._db_lock:
            engine = create_engine(self.conn_string_for_shard(shard), poolclass=NullPool,
                                   connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
        return engine.connect()


class BatchingPostgresEventLogStorage(_OneTransactionABatch, PostgresEventLogStorage):
    """Postgres' event log, a batch of events over one connection in one transaction."""

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=get_token_provider_from_config(config_value))

    @contextmanager
    def _connect(self) -> Iterator:
        if not self._in_batch():
            with super()._connect() as connection:
                yield connection
            return
        def open_connection():
            return self._engine.connect().execution_options(isolation_level="READ COMMITTED")

        with self._batch_connection("postgres", open_connection) as connection:
            yield connection
