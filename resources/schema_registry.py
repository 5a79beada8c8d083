"""The Confluent Schema Registry, when `SCHEMA_REGISTRY_URL` is set; otherwise ids resolve through the catalog."""

from typing import Optional

from dagster import ConfigurableResource


class SchemaRegistryResource(ConfigurableResource):
    url: Optional[str] = None
