"""The lake's JSON documents: one versioned codec. A lake written by an earlier release stays readable."""


from __future__ import annotations

import json

import pytest

from kafka_lake.lake.documents import DocumentError
from kafka_lake.lake.landing_counts import LandingCounts
from kafka_lake.lake.manifests import BoundaryOrigin, HourManifest, LandedFile, PartitionLanding

# An hour manifest as the release before the versioned codec wrote it (format 1: counts beside the offsets).
FORMAT_1 = {
    "format": 1, "database": "shop", "table": "page_views", "topic": "shop.page_views", "hour": "2026-11-01-13:00",
    "partitions": [{"partition": 0, "start": 10, "end": 20, "records": 9, "rows": 7, "dead_letters": 1,
                    "tombstones": 1, "late_events": 2, "min_timestamp_ms": 1_793_550_000_000,
                    "max_timestamp_ms": 1_793_553_000_000}],
    "files": [{"path": "shop/page_views/schema_version=1/date=2026-11-01/hour=13/shop.page_views+0+0000000000000000010.parquet",
               "kind": "data", "partition": 0, "first_offset": 10, "rows": 7, "bytes": 900, "schema_version": 1,
               "hour": "date=2026-11-01/hour=13"}],
    "landed_at": "2026-11-01T14:11:00+00:00", "run_id": "r1", "boundaries": {"0": {"start_from": "time lookup", "end_from": "time lookup"}},
    "schema_versions": {"1": 7}, "dead_letter_causes": {"bad_magic_byte": 1}, "duration_s": 1.5,
    "accepted_losses": {}, "new_partitions": [],
}


def test_a_manifest_an_earlier_release_wrote_reads_with_its_counts_as_one_value():
    manifest = HourManifest.from_json(json.dumps(FORMAT_1).encode(), "hour=2026-11-01-13.json")

    [partition] = manifest.partitions
    assert partition == PartitionLanding(0, 10, 20, LandingCounts(9, 7, 1, 1, 2, 1_793_550_000_000, 1_793_553_000_000))
    assert manifest.counts.accounted == manifest.counts.records == 9
    assert manifest.files[0] == LandedFile(FORMAT_1["files"][0]["path"], "data", 0, 10, 7, 900, 1, "2026-11-01-13:00")
    assert manifest.open_transactions == {} and manifest.new_partitions == ()
    # where each boundary came from, told by the text alone before format 3
    assert manifest.boundaries["0"]["start_origin"] == manifest.boundaries["0"]["end_origin"] == BoundaryOrigin.TIME_LOOKUP


def test_a_manifest_written_now_reads_back_equal_and_says_its_format():
    manifest = HourManifest.from_json(json.dumps(FORMAT_1).encode())

    written = manifest.to_json()

    assert json.loads(written)["format"] == 3
    assert HourManifest.from_json(written) == manifest


@pytest.mark.parametrize("document, problem", [
    ({**FORMAT_1, "format": 99}, "unsupported format 99"),
    ({**FORMAT_1, "partitions": [{"partition": "zero"}]}, "partitions"),
    ([1, 2], "not a JSON object"),
])
def test_a_document_this_release_cannot_read_fails_naming_it(document, problem):
    with pytest.raises(DocumentError, match=problem) as refused:
        HourManifest.from_json(json.dumps(document).encode(), "s3://lake/_manifests/shop/page_views/hour=2026-11-01-13.json")

    assert "manifest s3://lake/_manifests/shop/page_views/hour=2026-11-01-13.json cannot be read" in str(refused.value)


def test_counts_add_up_and_keep_the_widest_span():
    early = LandingCounts(records=3, rows=2, tombstones=1, min_timestamp_ms=5, max_timestamp_ms=9)
    late = LandingCounts(records=2, dead_letters=2, late_events=0, min_timestamp_ms=7, max_timestamp_ms=12)

    assert early + late == LandingCounts(5, 2, 2, 1, 0, 5, 12)
    assert LandingCounts.total([early, LandingCounts(), late]) == early + late
    assert LandingCounts() + early == early


def test_a_compaction_manifest_and_an_audit_entry_an_earlier_release_wrote_still_read():
    from kafka_lake.lake.audit import AUDIT_ENTRY
    from kafka_lake.lake.compaction_manifest import CompactionManifest

    compaction = CompactionManifest.from_json(json.dumps({
        "database": "shop", "table": "page_views", "schema_version": 2, "hour": "2026-11-01-13", "generation": 1,
        "location": "shop/page_views/schema_version=2/date=2026-11-01/hour=13/_compacted_000001",
        "files": [{"path": "a.parquet", "rows": 5, "bytes": 100}], "sources": ["b.parquet"], "rows": 5,
        "offsets_checksum": "abc", "compacted_at": "2026-11-01T16:00:00+00:00"}).encode())
    audit = AUDIT_ENTRY.from_json(json.dumps({
        "action": "erase", "topic": "shop.page_views", "at": "2026-11-02T03:17:00+00:00", "rows": 3,
        "partitions": ["schema_version=2/date=2026-11-01/hour=13"], "files_deleted": [], "files_written": [],
        "request_ids": ["dsr-1"], "detail": ""}).encode())

    assert compaction.hour == "2026-11-01-13:00" and str(compaction.partition) == "schema_version=2/date=2026-11-01/hour=13"
    assert CompactionManifest.from_json(compaction.to_json()) == compaction
    assert (audit.action, audit.request_ids) == ("erase", ("dsr-1",))
