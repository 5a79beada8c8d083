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
    rejected_entry_assets,
    rejected_entry_checks,
)
from platform_assets.checks import freshness_check
from platform_assets.compaction_assets import compacted_asset
from platform_assets.current_state_assets import current_state_asset
from platform_assets.jobs import layer_jobs, retention_job
from platform_assets.pools import pools_of
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
    assets = [
        raw_landing_asset(group[0], embedded_metastore=settings.embedded_metastore, together=group[1:])
        for group in landing_groups(catalog.topics)
    ] + [
        factory(topic, embedded_metastore=settings.embedded_metastore)
        for topic in catalog.topics
        for factory in (compacted_asset, catalog_asset, retention_asset)
    ] + [current_state_asset(topic) for topic in catalog.topics if topic.current_state is not None]
    return Definitions(
        assets=assets + [rejected_entry_assets(entry) for entry in entries_shown_as_assets(catalog)],
        asset_checks=[freshness_check(topic) for topic in catalog.topics if topic.freshness_minutes is not None]
        + [rejected_entry_checks(entry) for entry in entries_shown_as_assets(catalog)],
        jobs=layer_jobs(catalog.topics),
        sensors=platform_sensors(catalog, running=settings.automation, topics_per_run=settings.topics_per_run,
                                 pools=tuple(pools_of(assets))),
        schedules=[retention_schedule(running=settings.automation)],
        resources=platform_resources(settings),
        metadata=rejected_entries_metadata(catalog),
        # A run carries many topics, each a step (`kafka_lake.run_plan`): run in the run's own process, one after
        # another, they share one Python process, one load of the code location and one Spark application.
        executor=in_process_executor,
    )


def retention_schedule(running: bool = True) -> ScheduleDefinition:
    """Expiry and erasure once a day, for every topic, in one run (each topic's work is a few deletes)."""
    return ScheduleDefinition(name="retention_daily", job=retention_job(), cron_schedule="17 3 * * *", execution_timezone="UTC",
                              default_status=DefaultScheduleStatus.RUNNING if running else DefaultScheduleStatus.STOPPED)


def platform_resources(settings: PlatformSettings) -> dict:
    return {
        "pyspark": spark_resource(settings.spark_master, hive_metastore_uri=settings.hive_metastore_uri,
                                  extra={"spark.ui.port": str(settings.spark_ui_port)} if settings.spark_ui_port else None),
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
