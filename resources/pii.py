"""The secrets that protect personal data, read from the environment when a run needs them:
`PII_HMAC_KEY` pseudonymizes `pii_fields`, `DEAD_LETTER_KEY` encrypts the values of dead letters.

Never part of resource config, metadata or logs.
"""

from dagster import ConfigurableResource

from kafka_lake.settings import dead_letter_key_from_env, pii_key_from_env


class PiiKeyResource(ConfigurableResource):
    def key(self) -> bytes | None:
        return pii_key_from_env()

    def dead_letter_key(self) -> bytes | None:
        return dead_letter_key_from_env()
