"""The secret that pseudonymizes `pii_fields`, read from `PII_HMAC_KEY` when a landing needs it.

Never part of resource config, metadata or logs.
"""

from dagster import ConfigurableResource

from kafka_lake.settings import pii_key_from_env


class PiiKeyResource(ConfigurableResource):
    def key(self) -> bytes | None:
        return pii_key_from_env()
