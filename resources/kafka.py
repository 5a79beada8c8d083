"""The Kafka cluster the platform reads from.
"""

from dagster import ConfigurableResource

from kafka_lake.kafka.log import consumer_config
from kafka_lake.settings import PlatformSettings


class KafkaResource(ConfigurableResource):
    bootstrap_servers: str

    def consumer_config(self) -> dict:
        """Extra librdkafka properties (credentials included) come from `KAFKA_CLIENT_*` at use time,
        so they never appear in the resource's config in the UI."""
        return consumer_config(self.bootstrap_servers, PlatformSettings.from_env().kafka_client_properties)
