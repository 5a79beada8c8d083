"""Named jobs, one per layer of each topic (and one retention job for all): the runs of the landing,
compaction and registration of a topic are found under its job's name, and the sensors request those jobs.

A topic's hours are its own partitions (each topic starts at its `start_hour`), so a partitioned job holds
one topic: `landing__<db>__<table>`, `compaction__…`, `registration__…`.
"""

from dagster import AssetCheckKey, AssetSelection, define_asset_job
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from kafka_lake.table_spec import TableSpec
from platform_assets.checks import LANDING_CHECKS
from platform_assets.keys import asset_key, dead_letters_key, raw_key

RETENTION_JOB = "retention"
# The Definitions and the sensors that request a job must hold the same job object. A job is made of the
# topic's keys and its Kafka topic's name, so one object per (job name, Kafka topic).
_JOBS: dict[tuple[str, str], UnresolvedAssetJobDefinition] = {}


def _once(name: str, topic: str, make) -> UnresolvedAssetJobDefinition:
    if (name, topic) not in _JOBS:
        _JOBS[name, topic] = make()
    return _JOBS[name, topic]


def job_name(layer_job: str, topic: TableSpec) -> str:
    return f"{layer_job}__{topic.database}__{topic.table}"


def landing_job(topic: TableSpec) -> UnresolvedAssetJobDefinition:
    """Raw hours and their dead letters with the landing checks; freshness is left to `topic_health`."""
    checks = [AssetCheckKey(raw_key(topic), check.name) for check in LANDING_CHECKS]
    return _once(job_name("landing", topic), topic.topic, lambda: define_asset_job(
        job_name("landing", topic),
        selection=AssetSelection.assets(raw_key(topic), dead_letters_key(topic)).without_checks() | AssetSelection.checks(*checks),
        description=f"Lands Kafka hours of `{topic.topic}` into raw/{topic.database}/{topic.table} and its dead letters.",
        tags={"layer": "raw", "topic": topic.topic},
    ))


def compaction_job(topic: TableSpec) -> UnresolvedAssetJobDefinition:
    return _once(job_name("compaction", topic), topic.topic, lambda: define_asset_job(
        job_name("compaction", topic), selection=AssetSelection.assets(asset_key("compacted", topic)),
        description=f"Compacts the placement hours of `{topic.topic}` that are due.",
        tags={"layer": "compacted", "topic": topic.topic},
    ))


def registration_job(topic: TableSpec) -> UnresolvedAssetJobDefinition:
    return _once(job_name("registration", topic), topic.topic, lambda: define_asset_job(
        job_name("registration", topic), selection=AssetSelection.assets(asset_key("catalog", topic)),
        description=f"Registers the partitions of `{topic.database}.{topic.table}` in the table catalog.",
        tags={"layer": "catalog", "topic": topic.topic},
    ))


def current_state_job(topic: TableSpec) -> UnresolvedAssetJobDefinition:
    """Landed hours applied to a change topic's current-state table (`current_state` of topic.yaml)."""
    return _once(job_name("current_state", topic), topic.topic, lambda: define_asset_job(
        job_name("current_state", topic), selection=AssetSelection.assets(asset_key("current", topic)),
        description=f"Applies landed hours of `{topic.topic}` to its current-state table.",
        tags={"layer": "current", "topic": topic.topic},
    ))


def retention_job() -> UnresolvedAssetJobDefinition:
    return _once(RETENTION_JOB, "", lambda: define_asset_job(
        RETENTION_JOB, selection=AssetSelection.key_prefixes(["retention"]),
        description="GDPR expiry and erasure requests over every topic's table.", tags={"layer": "retention"}))


def topic_jobs(topic: TableSpec) -> list[UnresolvedAssetJobDefinition]:
    current = [current_state_job(topic)] if topic.current_state is not None else []
    return [landing_job(topic), compaction_job(topic), registration_job(topic), *current]
