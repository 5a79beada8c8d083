"""Dagster resources: Kafka, schema registry, lake storage, PII key and Spark, configured from the environment."""

from resources.kafka import KafkaResource
from resources.lake import LakeStorageResource
from resources.pii import PiiKeyResource
from resources.schema_registry import SchemaRegistryResource
from resources.spark import spark_resource

__all__ = ["KafkaResource", "LakeStorageResource", "PiiKeyResource", "SchemaRegistryResource", "spark_resource"]
