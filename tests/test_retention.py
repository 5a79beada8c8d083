"""GDPR retention on real landed data: expiry of old partitions and dead letters, erasure of subjects' rows by
rewriting only the affected partitions, the audit log of both; a run that cannot open its metastore fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone

from dev_services.ports import free_port
from kafka_lake.lake import layout
from kafka_lake.lake.audit import read_audit
from kafka_lake.lake.layout import ERASURE_REQUESTS_PREFIX
from kafka_lake.lake.table_state import storage_partitions
from kafka_lake.upkeep.retention import apply_retention
from spark_jobs.compaction_job import run_compactions_on_spark
from tests.constants import PII_TEST_KEY, REPO
from tests.landing_fixtures import pseudonym, read_lake, rows_as_readers_see_them, unique_topic_name, write_test_topic

# With retention_days=1, hours ending at or before 2026-11-01 12:00 are expired at this moment.
NOW = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)
CUTOFF = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)


def test_expiry_removes_exactly_the_expired_partitions_and_dead_letters_and_audits_it(landed, spark):
    topic, _, _, storage = landed
    partitions = storage_partitions(storage, topic.database, topic.table)
    expected_gone = {p for p in partitions if p.hour < CUTOFF}
    rows_before = Counter(partition for partition, _ in rows_as_readers_see_them(storage, topic).values())
    dead_before = storage.list_files(layout.dead_letter_prefix(topic.database, topic.table))
    assert expected_gone and set(partitions) - expected_gone
    unpublished = []

    report = apply_retention(storage, topic, NOW, PII_TEST_KEY.encode(),
                             lambda tasks: run_compactions_on_spark(spark, tasks), lambda m: None, unpublished.extend)

    assert set(report.expired_partitions) == expected_gone == set(unpublished)
    assert set(storage_partitions(storage, topic.database, topic.table)) == set(partitions) - expected_gone
    assert report.expired_rows == sum(n for p, n in rows_before.items() if p in {str(g) for g in expected_gone})
    dead_after = {f.path for f in storage.list_files(layout.dead_letter_prefix(topic.database, topic.table))}
    assert dead_after == {f.path for f in dead_before if layout.hour_of_path(f.path) >= CUTOFF}
    [entry] = read_audit(storage, topic)
    assert (entry.action, entry.rows, set(entry.partitions)) == ("expire", report.expired_rows, set(map(str, expected_gone)))
    assert set(entry.files_deleted) >= set(f.path for f in dead_before) - dead_after


def test_erasure_removes_every_row_of_the_subjects_rewriting_only_affected_partitions(landed, spark):
    topic, traffic, _, storage = landed
    users = Counter(p.record["user_id"] for p in traffic.rows() if p.record["user_id"])
    erased_users = [user for user, _ in users.most_common()[-2:]]  # the two rarest subjects
    hidden = {pseudonym(user, PII_TEST_KEY) for user in erased_users}
    before = rows_as_readers_see_them(storage, topic)
    affected = {partition for partition, row in before.values() if any(h in row for h in hidden)}
    locations_before = storage_partitions(storage, topic.database, topic.table)
    storage.write_bytes(f"{ERASURE_REQUESTS_PREFIX}/req-42.json",
                        json.dumps({"subject_ids": erased_users, "requested_at": "2026-11-02T09:00:00Z"}).encode())
    published = []
    far_from_expiry = datetime(2026, 11, 1, 20, tzinfo=timezone.utc)

    report = apply_retention(storage, topic, far_from_expiry, PII_TEST_KEY.encode(),
                             lambda tasks: run_compactions_on_spark(spark, tasks), published.extend, lambda p: None)

    after = rows_as_readers_see_them(storage, topic)
    assert not [row for _, row in after.values() if any(h in row for h in hidden)]
    assert set(before) - set(after) == {k for k, (_, row) in before.items() if any(h in row for h in hidden)}
    assert all(after[k] == before[k] for k in after)
    assert {str(p) for p in report.erased_partitions} == affected == {str(m.partition) for m in published}
    locations_after = storage_partitions(storage, topic.database, topic.table)
    assert {str(p) for p in locations_after if locations_after[p] != locations_before[p]} == affected
    [entry] = [e for e in read_audit(storage, topic) if e.action == "erase"]
    assert entry.rows == report.erased_rows == len(before) - len(after) > 0
    assert entry.request_ids == ("req-42",)

    again = apply_retention(storage, topic, far_from_expiry, PII_TEST_KEY.encode(),
                            lambda tasks: run_compactions_on_spark(spark, tasks), published.extend, lambda p: None)
    assert again.erased_rows == 0 and not again.audit_paths, "a second run finds nothing left to erase"
    assert read_lake(storage, layout.table_prefix(topic.database, topic.table))


def test_a_cli_retention_run_that_cannot_open_its_metastore_fails_naming_it_and_why(tmp_path):
    """Given a topic with nothing to expire or erase, and HIVE_METASTORE_URI at a loopback port nothing listens on;
    when retention runs as users run it, then it fails naming the metastore and the cause. It exited 0 saying
    `0 row(s) erased`, without ever opening the catalog its readers query."""
    write_test_topic(tmp_path / "catalog", unique_topic_name())
    metastore = f"thrift://127.0.0.1:{free_port()}"
    (tmp_path / "home").mkdir()
    env = {**os.environ, "SCHEMA_CATALOG_DIR": str(tmp_path / "catalog"), "LAKE_ROOT": str(tmp_path / "lake"),
           "PII_HMAC_KEY": PII_TEST_KEY, "SPARK_MASTER": "local[1]", "DAGSTER_HOME": str(tmp_path / "home"),
           "HIVE_METASTORE_URI": metastore}

    completed = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize", "--select",
         "retention/e2e/orders", "-m", "platform_assets.definitions"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )

    assert completed.returncode != 0, completed.stderr[-3000:]
    assert (f"TableCatalogError: the Hive metastore at {metastore} (HIVE_METASTORE_URI) cannot be opened (e2e.orders): "
            in completed.stderr), completed.stderr[-3000:]
    assert "java.net.ConnectException: Connection refused" in completed.stderr, completed.stderr[-3000:]
    assert "row(s) erased" not in completed.stderr + completed.stdout
