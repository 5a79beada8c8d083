"""Catalog entries that failed to load, shown where operators look: each as an asset in the place of the
topic it would have landed (its description says why), in the code location's metadata, and in the ticks
and alerts of the sensor `catalog_entries_rejected`. Every other topic keeps landing.
"""

import json
import re

from dagster import (
    AssetKey,
    AssetSpec,
    DefaultSensorStatus,
    MetadataValue,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from kafka_lake.topics.loader import BrokenEntry, TopicCatalog
from resources import AlertWebhookResource


def _key_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"


def rejected_entry_spec(entry: BrokenEntry) -> AssetSpec:
    """The raw asset the entry would have made, unlandable, its description the catalog's error."""
    return AssetSpec(
        AssetKey(["raw", _key_part(entry.database), _key_part(entry.table)]),
        description=f"REJECTED catalog entry, not landed: {entry.error}",
        group_name=_key_part(entry.database),
        tags={"layer": "raw", "catalog": "rejected"},
        kinds={"raw", "rejected"},
        metadata={"catalog_file": entry.path, "catalog_error": MetadataValue.text(str(entry.error))},
    )


def rejected_entries_metadata(catalog: TopicCatalog) -> dict:
    """The code location's own metadata: how many entries loaded and which were rejected, why."""
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

    @sensor(
        name="catalog_entries_rejected",
        description="Reports catalog entries that failed to load (their topics are not landed), in every tick and "
        "as an alert once per new error. `make check-catalog` reports the same before a deploy.",
        minimum_interval_seconds=600,
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
        return SensorResult(skip_reason=SkipReason(summary[:2000]), cursor=json.dumps(broken, sort_keys=True))

    return catalog_entries_rejected
