"""The code location's `Definitions`: the catalog's topics as assets, with resources from the environment.

`dagster dev -m platform_assets.definitions` or `dagster asset materialize -m platform_assets.definitions`.
"""

from dagster import Definitions

from kafka_lake.catalog import TopicCatalog, load_catalog
from kafka_lake.settings import PlatformSettings
from platform_assets.assets import raw_landing_asset
from platform_assets.catalog_assets import catalog_asset
from platform_assets.compaction_assets import compacted_asset
from platform_assets.retention_assets import retention_asset
from resources import (
    KafkaResource, LakeStorageResource, PiiKeyResource, SchemaRegistryResource, TableCatalogResource, spark_resource,
)


def build_definitions(catalog: TopicCatalog, settings: PlatformSettings) -> Definitions:
    return Definitions(
        assets=[
            factory(topic)
            for topic in catalog.topics
            for factory in (raw_landing_asset, compacted_asset, catalog_asset, retention_asset)
        ],
        resources=platform_resources(settings),
    )


def platform_resources(settings: PlatformSettings) -> dict:
    return {
        "pyspark": spark_resource(settings.spark_master, hive_metastore_uri=settings.hive_metastore_uri),
        "kafka": KafkaResource(bootstrap_servers=settings.kafka_bootstrap_servers),
        "lake": LakeStorageResource(root=settings.lake_root),
        "schema_registry": SchemaRegistryResource(url=settings.schema_registry_url),
        "pii": PiiKeyResource(),
        "table_catalog": TableCatalogResource(kind=settings.table_catalog, hive_metastore_uri=settings.hive_metastore_uri),
    }


def load_definitions() -> Definitions:
    settings = PlatformSettings.from_env()
    return build_definitions(load_catalog(settings.schema_catalog_dir), settings)


defs = load_definitions()
