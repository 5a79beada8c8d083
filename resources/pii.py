"""The secrets that protect personal data: `PII_HMAC_KEY` pseudonymizes `pii_fields`, `DEAD_LETTER_KEY` encrypts the
values of dead letters.
"""


from dagster import ConfigurableResource
from pydantic import Field

from kafka_lake.settings import dead_letter_key_from_env
from resources.secrets import resolved


class PiiKeyResource(ConfigurableResource):
    # Configured from `dagster.EnvVar`s (`platform_assets.definitions`), so the UI shows the variables' names, never
    # their values; kept out of reprs, metadata and logs.
    hmac_key: str | None = Field(default=None, repr=False, description="PII_HMAC_KEY: the key of the pseudonyms")
    dead_letter_key_base64: str | None = Field(
        default=None, repr=False, description="DEAD_LETTER_KEY: base64 of 32 bytes encrypting dead-letter values")

    def key(self) -> bytes | None:
        key = resolved(self.hmac_key)
        return key.encode() if key else None

    def dead_letter_key(self) -> bytes | None:
        return dead_letter_key_from_env({"DEAD_LETTER_KEY": resolved(self.dead_letter_key_base64) or ""})
