"""Dagster resources: Kafka, schema registry, lake storage, PII key, Spark and the table catalog, configured from the
environment."""

from resources.alerts import AlertWebhookResource
from resources.kafka import KafkaResource
from resources.lake import LakeStorageResource
from resources.pii import PiiKeyResource
from resources.schema_registry import SchemaRegistryResource
from resources.secrets import secret_from_env
from resources.spark import spark_resource
from resources.table_catalog import TableCatalogResource

__all__ = ["AlertWebhookResource", "KafkaResource", "LakeStorageResource", "PiiKeyResource", "SchemaRegistryResource", "TableCatalogResource", "secret_from_env", "spark_resource"]
