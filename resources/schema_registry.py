"""The Confluent Schema Registry, when `SCHEMA_REGISTRY_URL` is set; otherwise ids resolve through the catalog.
"""


from dagster import ConfigurableResource

from kafka_lake.settings import PlatformSettings, url_without_credentials


class SchemaRegistryResource(ConfigurableResource):
    url: str | None = None  # without user info; `for_url` strips it

    @classmethod
    def for_url(cls, url: str | None) -> "SchemaRegistryResource":
        """The configured URL is shown in the UI, so it never holds the URL's `user:password@`: those are read from
        `SCHEMA_REGISTRY_URL` at use time (`client_url`), like the Kafka client's credentials."""
        return cls(url=url_without_credentials(url) if url else None)

    def client_url(self) -> str | None:
        """The URL to call: the environment's, credentials included, when it names the configured registry."""
        from_env = PlatformSettings.from_env().schema_registry_url
        if self.url and from_env and url_without_credentials(from_env) == self.url:
            return from_env
        return self.url
