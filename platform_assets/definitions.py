"""The code location's `Definitions`: the catalog's topics as assets, with resources from the environment.

`dagster dev -m platform_assets.definitions` or `dagster asset materialize -m platform_assets.definitions`.
A broken catalog entry costs only its own topic: it is shown as rejected, and every other topic loads.
"""

from dagster import DefaultScheduleStatus, Definitions, ScheduleDefinition, in_process_executor

from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.archive import load_platform_catalog
from kafka_lake.topics.loader import TopicCatalog
from platform_assets.assets import landing_groups, raw_landing_asset
from platform_assets.catalog_assets import catalog_asset
from platform_assets.catalog_health import (
    entries_shown_as_assets,
    rejected_entries_metadata,
    rejected_entry_checks,
    rejected_entry_specs,
)
from platform_assets.checks import freshness_check
from platform_assets.compaction_assets import compacted_asset
from platform_assets.current_state_assets import current_state_asset
from platform_assets.jobs import layer_jobs, retention_job
from platform_assets.retention_assets import retention_asset
from platform_assets.sensors import platform_sensors
from resources import (
    AlertWebhookResource,
    KafkaResource,
    LakeStorageResource,
    PiiKeyResource,
    SchemaRegistryResource,
    TableCatalogResource,
    secret_from_env,
    spark_resource,
)


def build_definitions(catalog: TopicCatalog, settings: PlatformSettings) -> Definitions:
    return Definitions(
        assets=[
            raw_landing_asset(group[0], embedded_metastore=settings.embedded_metastore, together=group[1:])
            for group in landing_groups(catalog.topics)
        ] + [
            factory(topic, embedded_metastore=settings.embedded_metastore)
            for topic in catalog.topics
            for factory in (compacted_asset, catalog_asset, retention_asset)
        ] + [current_state_asset(topic) for topic in catalog.topics if topic.current_state is not None]
        + [spec for entry in entries_shown_as_assets(catalog) for spec in rejected_entry_specs(entry)],
        asset_checks=[freshness_check(topic) for topic in catalog.topics if topic.freshness_minutes is not None]
        + [rejected_entry_checks(entry) for entry in entries_shown_as_assets(catalog)],
        jobs=layer_jobs(catalog.topics),
        sensors=platform_sensors(catalog, running=settings.automation, topics_per_run=settings.topics_per_run),
        schedules=[retention_schedule(running=settings.automation)],
        resources=platform_resources(settings),
        metadata=rejected_entries_metadata(catalog),
        # A run is one topic's assets of one layer, one step in all but a few: run in the run's own process, it
        # spares a second Python process (~3 CPU s to start, a few hundred MB) per run, and keeps one Spark
        # driver per run even when the UI selects several assets at once.
        executor=in_process_executor,
    )


def retention_schedule(running: bool = True) -> ScheduleDefinition:
    """Expiry and erasure once a day, for every topic, in one run (each topic's work is a few deletes)."""
    return ScheduleDefinition(name="retention_daily", job=retention_job(), cron_schedule="17 3 * * *", execution_timezone="UTC",
                              default_status=DefaultScheduleStatus.RUNNING if running else DefaultScheduleStatus.STOPPED)


def platform_resources(settings: PlatformSettings) -> dict:
    return {
        "pyspark": spark_resource(settings.spark_master, hive_metastore_uri=settings.hive_metastore_uri),
        "kafka": KafkaResource(bootstrap_servers=settings.kafka_bootstrap_servers),
        "lake": LakeStorageResource(root=settings.lake_root),
        "schema_registry": SchemaRegistryResource.for_url(settings.schema_registry_url),
        "pii": PiiKeyResource(hmac_key=secret_from_env("PII_HMAC_KEY"),
                              dead_letter_key_base64=secret_from_env("DEAD_LETTER_KEY")),
        "alerts": AlertWebhookResource(webhook_url=secret_from_env("ALERT_WEBHOOK_URL")),
        "table_catalog": TableCatalogResource(kind=settings.table_catalog, hive_metastore_uri=settings.hive_metastore_uri),
    }


def load_definitions() -> Definitions:
    settings = PlatformSettings.from_env()
    return build_definitions(load_platform_catalog(settings), settings)


defs = load_definitions()
