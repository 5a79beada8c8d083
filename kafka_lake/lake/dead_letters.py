"""Dead letters at rest: the raw `value` of a record that could not land, encrypted with AES-256-GCM under
`DEAD_LETTER_KEY` when it is set, and decrypted again by whoever replays the record after a fix.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import DEAD_LETTER_KEY_BYTES

ENCRYPTION_METADATA_KEY = b"kafka_lake.dead_letter_value"
ENCRYPTION_FORMAT = b"aes-256-gcm/v1"
_FORMAT_VERSION = b"\x01"
_NONCE_BYTES = 12
_TAG_BYTES = 16
_NONCE_KEY_LABEL = b"kafka_lake dead letter nonce v1"


class DeadLetterDecryptionError(ValueError):
    """An encrypted dead letter does not decrypt under the key given: another key, or altered bytes."""


def associated_data(topic: str, partition: int, offset: int) -> bytes:
    return f"{topic}/{partition}/{offset}".encode()


class DeadLetterEncryption:
    """Encrypts the `value` column of dead-letter tables; holds the cipher, never shows the key."""

    __slots__ = ("_cipher", "_nonce_key")

    def __init__(self, key: bytes):
        if len(key) != DEAD_LETTER_KEY_BYTES:
            raise ValueError(f"a dead-letter key must be {DEAD_LETTER_KEY_BYTES} bytes, got {len(key)}")
        self._cipher = AESGCM(key)
        self._nonce_key = hmac.new(key, _NONCE_KEY_LABEL, hashlib.sha256).digest()

    def encrypt_value(self, value: bytes, topic: str, partition: int, offset: int) -> bytes:
        """`0x01 || nonce (12 bytes) || ciphertext || GCM tag (16 bytes)`, where the associated data is the UTF-8 text
        `<topic>/<partition>/<offset>` of the record, so a value moved to another row no longer decrypts. The nonce is
        HMAC-SHA256 under a key derived from `DEAD_LETTER_KEY` of that text and the value, cut to 12 bytes: one per
        record, and the same bytes again when an hour is landed again."""
        aad = associated_data(topic, partition, offset)
        nonce = hmac.new(self._nonce_key, aad + b"\x00" + value, hashlib.sha256).digest()[:_NONCE_BYTES]
        return _FORMAT_VERSION + nonce + self._cipher.encrypt(nonce, value, aad)

    def encrypt_table(self, table: pa.Table) -> pa.Table:
        """The dead-letter table with its `value` column encrypted and its Parquet schema metadata marked as such
        (`ENCRYPTION_METADATA_KEY`)."""
        table = _with_values_mapped(table, self.encrypt_value)
        return table.replace_schema_metadata({**(table.schema.metadata or {}), ENCRYPTION_METADATA_KEY: ENCRYPTION_FORMAT})

    def __repr__(self) -> str:
        return "DeadLetterEncryption(key=<hidden>)"


def is_encrypted(schema: pa.Schema) -> bool:
    return (schema.metadata or {}).get(ENCRYPTION_METADATA_KEY) == ENCRYPTION_FORMAT


def decrypt_value(key: bytes, encrypted: bytes, topic: str, partition: int, offset: int) -> bytes:
    """The raw Kafka value of one encrypted dead letter, for a replay."""
    where = f"the dead letter of {topic} partition {partition} offset {offset}"
    if len(encrypted) < 1 + _NONCE_BYTES + _TAG_BYTES or encrypted[:1] != _FORMAT_VERSION:
        raise DeadLetterDecryptionError(f"{where} is not an encrypted value of format {ENCRYPTION_FORMAT.decode()}")
    nonce, sealed = encrypted[1:1 + _NONCE_BYTES], encrypted[1 + _NONCE_BYTES:]
    try:
        return AESGCM(key).decrypt(nonce, sealed, associated_data(topic, partition, offset))
    except InvalidTag:
        raise DeadLetterDecryptionError(
            f"{where} does not decrypt under this key: it was encrypted under another DEAD_LETTER_KEY, "
            f"or its bytes were changed"
        ) from None


def decrypt_table(key: bytes, table: pa.Table) -> pa.Table:
    """A dead-letter table as read from the lake, with its `value` column in clear (unchanged if it was)."""
    if not is_encrypted(table.schema):
        return table
    table = _with_values_mapped(table, lambda value, *record: decrypt_value(key, value, *record))
    metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != ENCRYPTION_METADATA_KEY}
    return table.replace_schema_metadata(metadata or None)


def _with_values_mapped(table: pa.Table, change: Callable[[bytes, str, int, int], bytes]) -> pa.Table:
    """`table` with each non-null `value` replaced by `change(value, topic, partition, offset)`."""
    values = [
        None if value is None else change(value, topic, partition, offset)
        for value, topic, partition, offset in zip(
            table.column("value").to_pylist(),
            table.column("_kafka_topic").to_pylist(),
            table.column("_kafka_partition").to_pylist(),
            table.column("_kafka_offset").to_pylist(),
        )
    ]
    position = table.schema.get_field_index("value")
    return table.set_column(position, table.schema.field(position), pa.array(values, pa.binary()))


def causes_in(storage: LakeStorage, paths: Iterable[str], most: int = 20) -> dict[str, int]:
    """How many records of each `error` the dead-letter files hold, the `most` frequent (the rest summed under one
    line saying how many causes it holds)."""
    counts: Counter[str] = Counter()
    for path in paths:
        errors = pq.read_table(storage.full_path(path), filesystem=storage.filesystem, columns=["error"]).column("error")
        counts.update({item["values"]: item["counts"] for item in pc.value_counts(errors).to_pylist()})
    shown = dict(counts.most_common(most))
    if len(counts) > most:
        shown[f"({len(counts) - most} other causes)"] = sum(counts.values()) - sum(shown.values())
    return shown
