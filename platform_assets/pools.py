"""Concurrency pools (every pool's limit is 1 unless dagster.yaml says otherwise): one landing of a topic
at a time, and one process at a time in the embedded Derby metastore."""

from __future__ import annotations

import time
from collections.abc import Iterable

from kafka_lake.table_spec import TableSpec

EMBEDDED_METASTORE = "embedded_metastore"


def landing_pool(topic: TableSpec, together: tuple[TableSpec, ...] = (), embedded_metastore: bool = False) -> str:
    """Two runs landing one table at once would race for the same hours' boundaries; the tables of one Kafka topic
    landed by one asset share a pool named for the topic (a run lands one, some or all of them). A Hive-layout table
    landed in increments registers each one's partitions: in the embedded Derby metastore, one process at a time."""
    if embedded_metastore and any(t.open_hour_minutes is not None and t.table_format == "hive" for t in (topic, *together)):
        return EMBEDDED_METASTORE
    return f"landing/{topic.database}/{topic.table}" if not together else f"landing/topic/{topic.topic}"


def table_pool(topic: TableSpec, layer: str, embedded_metastore: bool) -> str:
    """Compaction, registration and retention write the table catalog; Derby admits one process."""
    return EMBEDDED_METASTORE if embedded_metastore else f"{layer}/{topic.database}/{topic.table}"


# What `ensure_pools` spends of a sensor tick creating pools: a new deployment of thousands of topics has them all
# within a few ticks, and no tick runs past Dagster's timeout.
POOLS_BUDGET_S = 10.0


def pools_of(assets: Iterable) -> list[str]:
    """The pools the code location's assets run in, read from the assets themselves."""
    return sorted({pool for asset in assets
                   if getattr(asset, "is_executable", False) and (pool := asset.op.pool) is not None})


def ensure_pools(instance, pools: Iterable[str], budget_s: float = POOLS_BUDGET_S) -> tuple[list[str], int]:
    """Creates, at the default limit, the pools the instance does not know yet, as many as `budget_s` allows; returns
    those created and how many are left for the next call. Pools an operator has set are left as they are.

    Dagster creates a pool when it first dequeues a run using it, and for that one pass treats it as unlimited: two runs
    of a topic queued in that moment would both start. Made ahead by the code location that uses them (the landing
    sensor calls this), the pools hold from a topic's first run, and no process loads the catalog again to make them."""
    storage = instance.event_log_storage
    missing = sorted(set(pools) - set(storage.get_concurrency_keys()))
    deadline = time.monotonic() + budget_s
    created: list[str] = []
    for pool in missing:
        if time.monotonic() >= deadline:
            break
        storage.initialize_concurrency_limit_to_default(pool)
        created.append(pool)
    return created, len(missing) - len(created)
