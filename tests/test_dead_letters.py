"""Dead letters at rest: their short expiry, independent of the table's retention, and the encryption of their
values (format, determinism, tamper evidence). Files are real Parquet in a real local lake."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from kafka_lake.decoding.decoded_batch import DEAD_LETTER_SCHEMA
from kafka_lake.lake import layout
from kafka_lake.lake.audit import read_audit
from kafka_lake.lake.dead_letters import (
    DeadLetterDecryptionError,
    DeadLetterEncryption,
    decrypt_table,
    decrypt_value,
    is_encrypted,
)
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.table_spec import DEFAULT_DEAD_LETTER_RETENTION_DAYS
from kafka_lake.topics.loader import CatalogError, load_catalog, load_topic
from kafka_lake.upkeep.retention import apply_retention
from tests.constants import REPO

NOW = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
DAY = timedelta(days=1)


def dead_letter_table(topic: str, offsets: list[int], values: list[bytes]) -> pa.Table:
    return pa.Table.from_pydict({
        "_kafka_topic": [topic] * len(offsets), "_kafka_partition": [0] * len(offsets), "_kafka_offset": offsets,
        "_kafka_timestamp": [datetime(2026, 11, 1, tzinfo=timezone.utc)] * len(offsets), "_kafka_key": [None] * len(offsets),
        "_kafka_headers": [None] * len(offsets),
        "value": values, "error": ["undecodable_payload: test"] * len(offsets),
    }, schema=DEAD_LETTER_SCHEMA)


@pytest.fixture
def views():
    return load_catalog(REPO / "schema_catalog").by_name("shop", "page_views")


def write_dead_letters(storage: LakeStorage, topic, hours: list[datetime]) -> dict[datetime, str]:
    paths = {}
    for hour in hours:
        path = f"{layout.dead_letter_directory(topic.database, topic.table, hour)}/{topic.topic}+0+{0:019d}.parquet"
        with storage.open_output(path) as stream:
            pq.write_table(dead_letter_table(topic.topic, [0], [b"\x07raw"]), stream)
        paths[hour] = path
    return paths


def hours_ago(*days: float) -> list[datetime]:
    return [(NOW - timedelta(days=d)).replace(minute=0) for d in days]


@pytest.mark.parametrize(
    ("retention_days", "dead_letter_retention_days", "kept_days"),
    [(None, None, DEFAULT_DEAD_LETTER_RETENTION_DAYS), (90, None, DEFAULT_DEAD_LETTER_RETENTION_DAYS), (3, None, 3), (None, 2, 2),
     (30, 60, 30)],
    ids=["rows kept forever", "rows kept 90 days", "rows kept 3 days", "dead letters kept 2 days",
         "never longer than the rows"],
)
def test_dead_letters_expire_after_their_own_days_never_after_the_rows_and_it_is_audited(
    tmp_path, views, retention_days, dead_letter_retention_days, kept_days
):
    topic = views.model_copy(update=dict(retention_days=retention_days,
                                dead_letter_retention_days=dead_letter_retention_days or DEFAULT_DEAD_LETTER_RETENTION_DAYS))
    storage = LakeStorage(str(tmp_path / "lake"))
    paths = write_dead_letters(storage, topic, hours_ago(1, 2.5, 3.5, 13, 15, 40, 70))

    report = apply_retention(storage, topic, NOW, None, lambda tasks: [], lambda m: None, lambda p: None)

    left = {f.path for f in storage.list_files(layout.dead_letter_prefix(topic.database, topic.table))}
    expired = {hour for hour in paths if hour + timedelta(hours=1) <= NOW - kept_days * DAY}
    assert left == {path for hour, path in paths.items() if hour not in expired}
    assert report.expired_dead_letter_files == len(expired) > 0
    [entry] = read_audit(storage, topic)
    assert entry.action == "expire" and set(entry.files_deleted) == {paths[hour] for hour in expired}
    assert f"dead letters older than {kept_days} days" in entry.detail


def test_dead_letter_retention_days_is_read_from_the_catalog_and_must_be_positive(catalog_copy):
    path = catalog_copy / "shop" / "page_views" / "topic.yaml"
    document = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**document, "dead_letter_retention_days": 3}))
    assert load_topic(path).dead_letter_retention_days == 3

    for wrong in (0, -1, "3", 10**7):
        path.write_text(yaml.safe_dump({**document, "dead_letter_retention_days": wrong}))
        with pytest.raises(CatalogError, match="dead_letter_retention_days"):
            load_topic(path)


def test_an_encrypted_value_round_trips_is_the_same_on_every_landing_and_is_bound_to_its_record():
    key = os.urandom(32)
    encryption = DeadLetterEncryption(key)
    raw = [b"\x00\x00\x00\x03\xe9 user-42 ...", b"\x01not framed", b""]
    table = dead_letter_table("shop.page_views", [5, 6, 7], raw)

    encrypted = encryption.encrypt_table(table)

    assert is_encrypted(encrypted.schema) and not is_encrypted(table.schema)
    values = encrypted.column("value").to_pylist()
    assert all(value[:1] == b"\x01" and len(value) == 1 + 12 + len(clear) + 16 for value, clear in zip(values, raw))
    assert all(b"user-42" not in value for value in values)
    assert encryption.encrypt_table(table).column("value").to_pylist() == values, "a re-landing writes the same bytes"
    assert DeadLetterEncryption(key).encrypt_value(raw[0], "shop.page_views", 0, 6) != values[0], "a nonce per record"
    assert decrypt_table(key, encrypted).column("value").to_pylist() == raw
    assert decrypt_table(key, table) is table  # a file written without a key reads as it is
    with pytest.raises(DeadLetterDecryptionError, match="offset 6 does not decrypt"):
        decrypt_value(key, values[0], "shop.page_views", 0, 6)
    with pytest.raises(DeadLetterDecryptionError, match="not an encrypted value"):
        decrypt_value(key, raw[0], "shop.page_views", 0, 5)
    assert "<hidden>" in repr(encryption)


def test_an_encrypted_dead_letter_file_keeps_the_mark_through_parquet(tmp_path):
    key = os.urandom(32)
    encrypted = DeadLetterEncryption(key).encrypt_table(dead_letter_table("t", [1], [b"raw bytes"]))
    pq.write_table(encrypted, tmp_path / "dead.parquet")

    read = pq.read_table(tmp_path / "dead.parquet")

    assert is_encrypted(read.schema)
    assert decrypt_table(key, read).column("value").to_pylist() == [b"raw bytes"]
