"""Named jobs, one per layer for every topic: `landing`, `compaction`, `registration` and `retention`. A sensor's run
selects the assets of one topic (`RunRequest.asset_selection`) and carries its `layer`, `topic` and `asset` tags.

A job per topic and layer cost the code location's load the square of the catalog (Dagster resolves each job
against the whole asset graph); four jobs cost it a few passes over the graph, however many topics there are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dagster import AssetCheckKey, AssetKey, AssetSelection, RunRequest
from dagster._core.definitions.assets.job.asset_job import build_asset_job, get_asset_graph_for_job
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from kafka_lake.table_spec import TableSpec
from platform_assets.checks import raw_check_keys
from platform_assets.keys import asset_key, dead_letters_key, raw_key

LANDING_JOB, COMPACTION_JOB, REGISTRATION_JOB, RETENTION_JOB = "landing", "compaction", "registration", "retention"
CURRENT_STATE_JOB = "current_state"
# The run tags operators find a topic's runs by (the UI's run filter, `dagster run list`).
LAYER_TAG, TOPIC_TAG, ASSET_TAG = "layer", "topic", "asset"


class LayerJob(UnresolvedAssetJobDefinition):
    """An asset job over one layer of every topic. Each topic's hours are its own partitions (from its `start_hour`),
    which `define_asset_job` refuses in one job; a run selects one topic's assets and Dagster takes the partitions
    from them, as it does for the UI's own asset job. Where every topic starts at the same hour the job is
    partitioned by it, with a *Partitions* tab of its own."""

    def resolve(self, asset_graph, default_executor_def=None, resource_defs=None):
        return build_asset_job(
            self.name,
            asset_graph=get_asset_graph_for_job(asset_graph, self.selection, allow_different_partitions_defs=True),
            description=self.description,
            tags=self.tags,
            run_tags=self.run_tags,
            executor_def=self.executor_def or default_executor_def,
            resource_defs=resource_defs,
            allow_different_partitions_defs=True,
        )


# Dagster tells jobs apart by identity: the Definitions and the sensors that request a job must hold the same object,
# so one is made per name and selection (the selected keys).
_JOBS: dict[tuple, LayerJob] = {}


def _layer_job(name: str, assets: tuple[AssetKey, ...], checks: tuple[AssetCheckKey, ...] | None, description: str,
               layer: str) -> LayerJob:
    """The job over `assets` and, when given, only the `checks` of them (else all of their checks)."""
    if (name, assets, checks) not in _JOBS:
        selection = AssetSelection.assets(*assets)
        if checks is not None:
            selection = selection.without_checks() | AssetSelection.checks(*checks)
        _JOBS[name, assets, checks] = LayerJob(name=name, selection=selection, description=description,
                                               tags={LAYER_TAG: layer})
    return _JOBS[name, assets, checks]


def landing_job(topics: Iterable[TableSpec]) -> LayerJob:
    """Raw hours and their dead letters with the landing checks; freshness is left to `topic_health`."""
    run = landing_run(topics)
    return _layer_job(LANDING_JOB, run.assets, run.checks,
                      "Lands Kafka hours of a topic into its raw tables and dead letters, with the landing checks. "
                      "Each run selects one Kafka topic's tables: its `topic` and `asset` tags say which.", "raw")


def compaction_job(topics: Iterable[TableSpec]) -> LayerJob:
    return _layer_job(COMPACTION_JOB, tuple(asset_key("compacted", t) for t in topics), None,
                      "Compacts the placement hours of a topic that are due; each run selects one table.", "compacted")


def registration_job(topics: Iterable[TableSpec]) -> LayerJob:
    return _layer_job(REGISTRATION_JOB, tuple(asset_key("catalog", t) for t in topics), None,
                      "Registers a table's partitions in the table catalog; each run selects one table.", "catalog")


def retention_job() -> LayerJob:
    if RETENTION_JOB not in _JOBS:
        _JOBS[RETENTION_JOB] = LayerJob(name=RETENTION_JOB, selection=AssetSelection.key_prefixes(["retention"]),
                                        description="GDPR expiry and erasure requests over every topic's table.",
                                        tags={LAYER_TAG: "retention"})
    return _JOBS[RETENTION_JOB]


def current_state_job(topics: Iterable[TableSpec]) -> LayerJob:
    """Landed hours applied to change topics' current-state tables (`current_state` of topic.yaml)."""
    return _layer_job(CURRENT_STATE_JOB, tuple(asset_key("current", t) for t in topics if t.current_state is not None),
                      None, "Applies a change topic's landed hours to its current-state table; each run selects one "
                      "table.", "current")


def layer_jobs(topics: Iterable[TableSpec]) -> list[LayerJob]:
    topics = tuple(topics)
    current = [current_state_job(topics)] if any(t.current_state is not None for t in topics) else []
    return [landing_job(topics), compaction_job(topics), registration_job(topics), retention_job(), *current]


@dataclass(frozen=True)
class LayerRun:
    """What one run of a layer's job selects, and the tags it is found by."""

    job_name: str
    assets: tuple[AssetKey, ...]
    checks: tuple[AssetCheckKey, ...] | None  # None: the selected assets' own checks
    tags: dict

    def request(self, run_key: str, partition_key: str | None = None, tags: dict | None = None) -> RunRequest:
        return RunRequest(run_key=run_key, job_name=self.job_name, partition_key=partition_key,
                          asset_selection=list(self.assets),
                          asset_check_keys=list(self.checks) if self.checks is not None else None,
                          tags={**self.tags, **(tags or {})})


def _run_tags(layer: str, tables: tuple[TableSpec, ...], keys: Iterable[AssetKey]) -> dict:
    return {LAYER_TAG: layer, TOPIC_TAG: ", ".join(sorted({t.topic for t in tables})),
            ASSET_TAG: ", ".join(k.to_user_string() for k in keys)}


def landing_run(tables: Iterable[TableSpec]) -> LayerRun:
    """The landing of one Kafka topic's tables (one, or several landed by one asset) in one run: the topic is read
    once per hour for all of them."""
    tables = tuple(tables)
    return LayerRun(
        LANDING_JOB,
        assets=tuple(key for t in tables for key in (raw_key(t), dead_letters_key(t))),
        checks=tuple(key for t in tables for key in raw_check_keys(t)),
        tags=_run_tags("raw", tables, (raw_key(t) for t in tables)),
    )


def compaction_run(topic: TableSpec) -> LayerRun:
    key = asset_key("compacted", topic)
    return LayerRun(COMPACTION_JOB, (key,), None, _run_tags("compacted", (topic,), (key,)))


def registration_run(topic: TableSpec) -> LayerRun:
    key = asset_key("catalog", topic)
    return LayerRun(REGISTRATION_JOB, (key,), None, _run_tags("catalog", (topic,), (key,)))


def retention_run(topic: TableSpec) -> LayerRun:
    key = asset_key("retention", topic)
    return LayerRun(RETENTION_JOB, (key,), None, _run_tags("retention", (topic,), (key,)))


def current_state_run(topic: TableSpec) -> LayerRun:
    key = asset_key("current", topic)
    return LayerRun(CURRENT_STATE_JOB, (key,), None, _run_tags("current", (topic,), (key,)))
