"""Catalog entries that failed to load, shown where operators look: each as the assets of the topic it would have
landed, each with a failed check saying why, in the code location's metadata, and in the ticks and alerts of the sensor
`catalog_entries_rejected`. Every other topic keeps landing.
"""

import json
import re

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetSpec,
    DefaultSensorStatus,
    MetadataValue,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    multi_asset,
    multi_asset_check,
    sensor,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from kafka_lake.topics.loader import BrokenEntry, CatalogError, TopicCatalog
from platform_assets.checks import landing_check_names
from platform_assets.failures import failures_explained
from platform_assets.jobs import PARTITION_RANGE_END, PARTITION_RANGE_START, PARTITION_TAG
from platform_assets.keys import TABLE_LAYERS
from resources import AlertWebhookResource

# The failed check on every asset of a rejected entry: its node, its catalog entry and its Checks tab turn red.
ENTRY_LOADS = "catalog_entry_loads"
# The lineage of a table's assets, as the topic's own assets have it.
_UPSTREAM = {"dead_letters": "raw", "compacted": "raw", "catalog": "compacted", "retention": "catalog"}


def _key_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"


def _keys(entry: BrokenEntry) -> dict[str, AssetKey]:
    """The keys of the assets the entry would have made, by layer: a table's five, or the archive rule's one."""
    layers = ("raw",) if (entry.database, entry.table) == ("_archive", "rule") else TABLE_LAYERS
    return {layer: AssetKey([layer, _key_part(entry.database), _key_part(entry.table)]) for layer in layers}


def entries_shown_as_assets(catalog: TopicCatalog) -> list[BrokenEntry]:
    """The rejected entries whose table no loaded entry lands (an archived topic refused for a table another topic
    has keeps that topic's assets)."""
    loaded = {(topic.database, topic.table) for topic in catalog.topics}
    return [entry for entry in catalog.broken if (entry.database, entry.table) not in loaded]


def rejected_entry_specs(entry: BrokenEntry) -> list[AssetSpec]:
    """The assets the entry would have made, none landable, each described by the catalog's error."""
    keys = _keys(entry)
    return [AssetSpec(
        key,
        description=f"REJECTED catalog entry, not landed: {entry.error}",
        deps=[keys[_UPSTREAM[layer]]] if layer in _UPSTREAM else [],
        group_name=_key_part(entry.database),
        tags={"layer": layer, "catalog": "rejected"},
        kinds={layer, "rejected"},
        metadata={"catalog_file": entry.path, "catalog_error": MetadataValue.text(str(entry.error))},
    ) for layer, key in keys.items()]


def rejected_entry_assets(entry: BrokenEntry):
    """The entry's assets as one multi-asset that fails saying why, naming the file and the error: a run that selected
    them before the entry was rejected (queued by a sensor, a backfill, the UI) runs into this step, which fails for
    good (a retry cannot change it), while every other topic the run carries goes on. Were the assets not executable,
    Dagster would refuse the whole run before any step ("Selected keys must be a subset of existing executable asset
    keys", a framework error to the UI and the alert) and fail its retries alike. The raw asset declares every check a
    landing may have selected, for the same reason."""
    keys = _keys(entry)
    subject = entry.topic or f"{entry.database}/{entry.table}"

    @multi_asset(name=f"rejected__{_key_part(entry.database)}__{_key_part(entry.table)}", specs=rejected_entry_specs(entry),
                 check_specs=[AssetCheckSpec(name, asset=keys["raw"], description=f"Not evaluated: the catalog entry "
                                             f"{entry.path} is rejected.") for name in landing_check_names()],
                 can_subset=True)
    def rejected(context):
        with failures_explained(context, subject, not_done=lambda: hours_of_run(context.run.tags)):
            raise CatalogError(f"catalog entry rejected, {subject} is not landed: {entry.error}")

    return rejected


def hours_of_run(tags) -> list[str]:
    """The hour, or the first and last hours, a run's tags name (the rejected assets have no hours of their own)."""
    return [tags[name] for name in (PARTITION_TAG, PARTITION_RANGE_START, PARTITION_RANGE_END) if name in tags]


def rejected_entry_checks(entry: BrokenEntry):
    """The failed check of each asset of the entry; *Execute* in the UI says again why the entry was rejected. The
    sensor `catalog_entries_rejected` records it at its first tick after a load."""
    specs = [AssetCheckSpec(ENTRY_LOADS, asset=key, description="The catalog entry of this asset loads (it failed "
                            "at the code location's last load: fix the file and reload).")
             for key in _keys(entry).values()]

    @multi_asset_check(name=f"{ENTRY_LOADS}__{_key_part(entry.database)}__{_key_part(entry.table)}", specs=specs,
                       can_subset=True)
    def entry_loads(context):
        for key in context.selected_asset_check_keys:
            yield AssetCheckResult(asset_key=key.asset_key, check_name=ENTRY_LOADS, passed=False,
                                   description=str(entry.error), metadata={"catalog_file": entry.path})

    return entry_loads


def rejection(entry: BrokenEntry, key: AssetKey) -> AssetCheckEvaluation:
    return AssetCheckEvaluation(asset_key=key, check_name=ENTRY_LOADS, passed=False, severity=AssetCheckSeverity.ERROR,
                                description=str(entry.error), metadata={"catalog_file": MetadataValue.path(entry.path)})


def rejected_entries_metadata(catalog: TopicCatalog) -> dict:
    """The code location's own metadata (read through Dagster's API; the UI of Dagster 1.13 does not show it): how many
    entries loaded and which were rejected, why."""
    return {
        "catalog_directory": catalog.directory,
        "catalog_databases": ", ".join(catalog.databases) or "all (SCHEMA_CATALOG_DATABASES unset)",
        "topics_loaded": len(catalog.topics),
        "catalog_entries_rejected": len(catalog.broken),
        **({"catalog_errors": MetadataValue.md("\n".join(f"- `{entry.path}`: {entry.error}" for entry in catalog.broken))}
           if catalog.broken else {}),
    }


def rejected_entries_sensor(catalog: TopicCatalog, running: bool = True):
    broken = {entry.path: str(entry.error) for entry in catalog.broken}
    rejections = [rejection(entry, key) for entry in entries_shown_as_assets(catalog) for key in _keys(entry).values()]

    @sensor(
        name="catalog_entries_rejected",
        description="Reports catalog entries that failed to load (their topics are not landed): a failed check "
        f"{ENTRY_LOADS} on each of their assets, every tick's log, and an alert once per new error. `make check-catalog` "
        "reports the same before a deploy.",
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED,
    )
    def catalog_entries_rejected(context: SensorEvaluationContext, alerts: AlertWebhookResource):
        reported = json.loads(context.cursor) if context.cursor else {}
        for path, error in broken.items():
            context.log.error(f"catalog entry rejected, its topic is not landed: {error}")
            if reported.get(path) != error:
                alerts.send(f"[CATALOG] entry rejected, its topic is not landed: {error}", context.log)
        summary = (f"{len(broken)} catalog entr{'y' if len(broken) == 1 else 'ies'} rejected: " + " | ".join(broken.values())
                   if broken else f"every catalog entry loaded ({len(catalog.topics)} topics)")
        return SensorResult(asset_events=not_shown_yet(context.instance, rejections), skip_reason=SkipReason(summary[:2000]),
                            cursor=json.dumps(broken, sort_keys=True))

    return catalog_entries_rejected


def not_shown_yet(instance, rejections: list[AssetCheckEvaluation]) -> list[AssetCheckEvaluation]:
    """The rejections whose check does not show them yet (a load of the code location since the last one)."""
    shown = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [AssetCheckKey(r.asset_key, ENTRY_LOADS) for r in rejections])
    return [r for r in rejections if not _shows(shown.get(AssetCheckKey(r.asset_key, ENTRY_LOADS)), r)]


def _shows(record, rejection: AssetCheckEvaluation) -> bool:
    return (record is not None and record.status == AssetCheckExecutionRecordStatus.FAILED
            and record.evaluation is not None and record.evaluation.description == rejection.description)
