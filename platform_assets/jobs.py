"""Named jobs, one per layer for every topic: `landing`, `compaction`, `registration`, `retention` and `current_state`.
A sensor's run selects the assets of many topics (`RunRequest.asset_selection`, planned by `kafka_lake.run_plan`), each
topic a step of its own, and carries its `layer` tag and a `topic/<topic>` tag per topic.

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
LAYER_TAG, TOPIC_TAG, TOPICS_TAG, ASSET_TAG = "layer", "topic", "topics", "asset"
# Dagster's run tags for a run of one partition and for a run over a range of partitions (what the UI's backfills set).
PARTITION_TAG = "dagster/partition"
PARTITION_RANGE_START, PARTITION_RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


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
    run = landing_run([topics])
    return _layer_job(LANDING_JOB, run.assets, run.checks,
                      "Lands Kafka hours into raw tables and dead letters, with the landing checks. A run carries many "
                      "topics, each a step of its own that fails or commits alone; its `topics` (or `topic`) tag "
                      "says which, and `topic/<topic>` tags find a topic's runs.", "raw")


def compaction_job(topics: Iterable[TableSpec]) -> LayerJob:
    return _layer_job(COMPACTION_JOB, tuple(asset_key("compacted", t) for t in topics), None,
                      "Compacts the placement hours that are due; a run carries many tables, each a step of its own.",
                      "compacted")


def registration_job(topics: Iterable[TableSpec]) -> LayerJob:
    return _layer_job(REGISTRATION_JOB, tuple(asset_key("catalog", t) for t in topics), None,
                      "Registers tables' partitions in the table catalog; a run carries many tables, each a step of "
                      "its own.", "catalog")


def retention_job() -> LayerJob:
    if RETENTION_JOB not in _JOBS:
        _JOBS[RETENTION_JOB] = LayerJob(name=RETENTION_JOB, selection=AssetSelection.key_prefixes(["retention"]),
                                        description="GDPR expiry and erasure requests over every topic's table.",
                                        tags={LAYER_TAG: "retention"})
    return _JOBS[RETENTION_JOB]


def current_state_job(topics: Iterable[TableSpec]) -> LayerJob:
    """Landed hours applied to change topics' current-state tables (`current_state` of topic.yaml)."""
    return _layer_job(CURRENT_STATE_JOB, tuple(asset_key("current", t) for t in topics if t.current_state is not None),
                      None, "Applies change topics' landed hours to their current-state tables; a run carries many tables, "
                      "each a step of its own.", "current")


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

    def request(self, run_key: str, first: str, last: str | None = None, tags: dict | None = None) -> RunRequest:
        """The run of hour `first`, or of the hours `first` to `last`. The partition goes in as Dagster's own tags: a
        run of topics whose hours start at different `start_hour`s has no one partitions definition to resolve it."""
        partition = ({PARTITION_TAG: first} if last is None or last == first
                     else {PARTITION_RANGE_START: first, PARTITION_RANGE_END: last})
        return RunRequest(run_key=run_key, job_name=self.job_name,
                          partition_key=first if last is None or last == first else None,
                          asset_selection=list(self.assets),
                          asset_check_keys=list(self.checks) if self.checks is not None else None,
                          tags={**self.tags, **partition, **(tags or {})})


def topic_tag(topic: str) -> str:
    """The tag a run carrying `topic` has (valued with the run's layer): `topic/shop.orders=raw` in the UI's run filter
    finds every landing run of the topic, however many other topics the run carries."""
    return f"{TOPIC_TAG}/{topic}"


def run_tags(layer: str, tables: Iterable[TableSpec], keys: Iterable[AssetKey]) -> dict:
    """A run of one topic is tagged with it and its assets; a run of several with the list of its topics. Every run has
    a tag per topic it carries, so the UI's run filter finds a topic's runs."""
    tables = tuple(tables)
    topics = sorted({t.topic for t in tables})
    tags = {LAYER_TAG: layer, **{topic_tag(topic): layer for topic in topics}}
    if len(topics) == 1:
        return {**tags, TOPIC_TAG: topics[0], ASSET_TAG: ", ".join(k.to_user_string() for k in keys)}
    return {**tags, TOPICS_TAG: f"{len(topics)}: {', '.join(topics)}"}


def landing_run(units: Iterable[Iterable[TableSpec]]) -> LayerRun:
    """The landing of Kafka topics' tables in one run: per topic, the tables one asset lands (read once per hour for all
    of them), each topic a step of its own."""
    tables = tuple(t for unit in units for t in unit)
    return LayerRun(
        LANDING_JOB,
        assets=tuple(key for t in tables for key in (raw_key(t), dead_letters_key(t))),
        checks=tuple(key for t in tables for key in raw_check_keys(t)),
        tags=run_tags("raw", tables, (raw_key(t) for t in tables)),
    )


def _table_run(job_name: str, layer: str, tables: Iterable[TableSpec]) -> LayerRun:
    tables = tuple(tables)
    keys = tuple(asset_key(layer, t) for t in tables)
    return LayerRun(job_name, keys, None, run_tags(layer, tables, keys))


def compaction_run(tables: Iterable[TableSpec]) -> LayerRun:
    return _table_run(COMPACTION_JOB, "compacted", tables)


def registration_run(tables: Iterable[TableSpec]) -> LayerRun:
    return _table_run(REGISTRATION_JOB, "catalog", tables)


def retention_run(tables: Iterable[TableSpec]) -> LayerRun:
    return _table_run(RETENTION_JOB, "retention", tables)


def current_state_run(tables: Iterable[TableSpec]) -> LayerRun:
    return _table_run(CURRENT_STATE_JOB, "current", tables)
