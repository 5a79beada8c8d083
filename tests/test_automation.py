"""The rules behind the sensors (kafka_lake.automation): plain data in, decisions out."""

import shutil
from datetime import datetime, timedelta, timezone

import pytest

from kafka_lake import automation
from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.kafka.cluster import LogTail
from kafka_lake.lake.manifests import HourManifest, LandedFile, PartitionLanding
from kafka_lake.topics.archive import topics_to_archive
from kafka_lake.topics.loader import load_catalog
from tests.constants import REPO

CATALOG = REPO / "schema_catalog"
H = KafkaHour(datetime(2026, 11, 21, 10, tzinfo=timezone.utc))


@pytest.fixture(scope="module")
def page_views():
    topic = load_catalog(REPO / "schema_catalog").by_name("shop", "page_views")
    return topic.model_copy(update=dict(close_grace_minutes=10, record_grace_minutes=2, allowed_lateness_hours=3, freshness_minutes=120))


def at(hour: KafkaHour, minutes: float) -> datetime:
    return hour.end + timedelta(minutes=minutes)


def tail(partition: int, stamped: datetime | None, log_end: int = 100) -> LogTail:
    return LogTail(partition, log_end, to_millis(stamped) if stamped else None)


# --- closing an hour ---

def test_an_hour_closes_when_every_partition_shows_a_record_after_its_end_plus_grace(page_views):
    tails = [tail(0, at(H, 3)), tail(1, at(H, 2))]
    assert automation.is_closed(page_views, H, at(H, 4), tails)


def test_one_partition_still_before_the_grace_keeps_the_hour_open(page_views):
    tails = [tail(0, at(H, 3)), tail(1, at(H, 1))]
    assert not automation.is_closed(page_views, H, at(H, 4), tails)


def test_a_quiet_partition_keeps_the_hour_open_until_the_idle_timeout_closes_it(page_views):
    tails = [tail(0, at(H, 3)), tail(1, None, log_end=0)]
    assert not automation.is_closed(page_views, H, at(H, 9), tails)
    assert automation.is_closed(page_views, H, at(H, 10), tails)
    assert automation.is_closed(page_views, H, at(H, 10), None), "the clock needs no broker"


def test_the_broker_is_asked_only_between_the_record_grace_and_the_idle_timeout(page_views):
    assert not automation.needs_log_tails(page_views, H, at(H, 1))
    assert automation.needs_log_tails(page_views, H, at(H, 2))
    assert automation.needs_log_tails(page_views, H, at(H, 9))
    assert not automation.needs_log_tails(page_views, H, at(H, 10))


def test_records_stamped_in_the_future_do_not_close_an_hour_before_its_grace(page_views):
    assert not automation.is_closed(page_views, H, at(H, 1), [tail(0, at(H, 30))])


def test_why_an_hour_is_open_dates_the_moments_that_fall_on_another_day_than_the_tick(page_views):
    """Given an idle timeout of a day, the clock closes hour H tomorrow: a bare `10:10Z` read at 11:05Z would say a
    moment of today that has passed."""
    slow = page_views.model_copy(update=dict(close_grace_minutes=24 * 60))
    now = at(H, 5)
    tomorrow = at(H, 24 * 60)

    why = automation.why_open(slow, H, now, [tail(0, at(H, 1))])
    before_midnight = automation.why_open(page_views, KafkaHour(datetime(2026, 11, 21, 23, tzinfo=timezone.utc)),
                                          datetime(2026, 11, 21, 23, 59, tzinfo=timezone.utc))

    assert why == (f"partition(s) 0 hold no record stamped at or after {at(H, 2):%H:%M}Z yet; the clock closes it at "
                   f"{tomorrow:%Y-%m-%d %H:%M}Z"), why
    assert before_midnight == ("no record can close it before 2026-11-22 00:02Z (end + record_grace_minutes); the clock "
                               "closes it at 2026-11-22 00:10Z"), before_midnight


def test_hours_closed_by_the_clock_are_consecutive_and_at_most_a_day(page_views):
    now = at(H, 10) + timedelta(hours=2)
    assert automation.hours_closed_by_clock(page_views, H, now) == [H, H.next(), H.next().next()]
    long_after = now + timedelta(days=5)
    assert len(automation.hours_closed_by_clock(page_views, H, long_after)) == automation.MAX_HOURS_PER_TICK


def test_automation_starts_after_the_newest_landed_hour_or_at_the_start_hour_of_a_new_topic(page_views):
    """A new topic lands from its `start_hour` however long ago that is (a week of retained history included), as the
    README promises, not from the hour before now."""
    assert automation.first_hour_to_land(page_views, H, at(H, 300)) == H.next()
    week_later = page_views.start_hour + timedelta(days=7, hours=7, minutes=30)
    assert automation.first_hour_to_land(page_views, None, week_later) == KafkaHour(page_views.start_hour)


# --- what a landing makes due ---

def hours_from(start: KafkaHour, count: int) -> set[KafkaHour]:
    return {KafkaHour(start.start + timedelta(hours=n)) for n in range(count)}


def test_landing_an_hour_makes_the_hour_it_completes_the_lateness_of_due(page_views):
    landed = hours_from(H, 4)  # H … H+3
    last = KafkaHour(H.start + timedelta(hours=3))
    assert automation.due_for_compaction(page_views, last, [last], landed.__contains__) == [H]


def test_late_data_makes_an_old_compacted_hour_due_again(page_views):
    landed = hours_from(H, 30)
    late_landing = KafkaHour(H.start + timedelta(hours=29))
    due = automation.due_for_compaction(page_views, late_landing, [H, late_landing], landed.__contains__)
    assert H in due, "the old hour the late events reached"
    assert KafkaHour(late_landing.start - timedelta(hours=3)) in due
    assert late_landing not in due, "hours after it have not landed yet"


def test_an_hour_is_not_due_while_a_raw_hour_that_feeds_it_is_missing(page_views):
    landed = hours_from(H, 4) - {H.next()}
    last = KafkaHour(H.start + timedelta(hours=3))
    assert automation.due_for_compaction(page_views, last, [last], landed.__contains__) == []


def test_placement_hours_are_read_from_the_data_files_of_a_manifest():
    files = (
        LandedFile("shop/page_views/schema_version=1/date=2026-11-21/hour=10/t+0+0.parquet", "data", 0, 0, 5, 9, 1,
                   "2026-11-21-10:00"),
        LandedFile("shop/page_views/schema_version=2/date=2026-11-21/hour=07/t+0+5.parquet", "data", 0, 5, 1, 9, 2,
                   "2026-11-21-07:00"),
        LandedFile("_dead_letters/shop/page_views/date=2026-11-21/hour=10/t+0+6.parquet", "dead_letter", 0, 6, 1, 9, None,
                   "2026-11-21-10:00"),
    )
    manifest = HourManifest("shop", "page_views", "shop.page_views", H.partition_key, (), files, "")
    assert automation.placement_hours(manifest) == [KafkaHour(datetime(2026, 11, 21, 7, tzinfo=timezone.utc)), H]


# --- freshness ---

def test_fresh_when_the_latest_hour_past_its_deadline_has_landed(page_views):
    now = at(H, 121)
    result = automation.freshness(page_views, {H: at(H, 70)}.get, now, H)
    assert result.passed and result.due_hour == H
    assert "landed at 2026-11-21 12:10Z, 50 min before its deadline 2026-11-21 13:00Z" in result.description


def test_an_hour_landed_after_its_deadline_passes_saying_how_late_it_landed(page_views):
    """The rule asks whether the hour is landed now; the description, and so the recovery alert, says when it landed.
    Before, it said "landed within 120 min" of an hour that landed 52 minutes after its deadline."""
    now = at(H, 175)
    result = automation.freshness(page_views, {H: at(H, 172)}.get, now, H)
    assert result.passed
    assert f"hour {H} is landed: landed at 2026-11-21 13:52Z, 52 min after its deadline 2026-11-21 13:00Z" \
        in result.description
    assert "within" not in result.description


def test_stale_names_how_late_and_how_many_hours_are_missing(page_views):
    landed = {KafkaHour(H.start - timedelta(hours=3)): at(H, -120)}
    now = at(H, 150)  # H is 30 min past its deadline; H-1 and H-2 are missing too
    result = automation.freshness(page_views, landed.get, now, min(landed))
    assert not result.passed
    assert result.missing_hours == 3
    assert result.minutes_late == pytest.approx(150.0)
    assert "3 hours missing since" in result.description and "150 min late" in result.description


def test_no_freshness_without_an_sla(page_views):
    assert automation.freshness(page_views.model_copy(update=dict(freshness_minutes=None)), {}.get, at(H, 500), None) is None


def test_nothing_is_due_before_the_topic_starts(page_views):
    young = page_views.model_copy(update=dict(start_hour=H.start))
    result = automation.freshness(young, {}.get, at(H, 60), None)
    assert result.passed and result.due_hour is None


# --- lag ---

def test_lag_counts_records_after_the_landed_end_and_time_after_the_landed_hour():
    manifest = HourManifest("shop", "page_views", "shop.page_views", H.partition_key,
                            (PartitionLanding(0, 0, 80), PartitionLanding(1, 0, 50)), (), "")
    tails = [tail(0, at(H, 30), log_end=100), tail(1, at(H, -5), log_end=50), tail(2, at(H, 1), log_end=7)]
    lags = {lag.partition: lag for lag in automation.landing_lag(manifest, tails)}
    assert (lags[0].records, lags[0].seconds) == (20, 1800.0)
    assert (lags[1].records, lags[1].seconds) == (0, 0.0)
    assert (lags[2].records, lags[2].landed_end) == (7, 0), "a partition the manifest does not know waits whole"


def test_topics_missing_from_the_catalog_leave_out_internal_topics_and_those_the_archive_takes(tmp_path):
    cluster = ["shop.page_views", "shop.refunds", "__consumer_offsets", "_schemas", "connect-offsets", "audit.logins"]
    catalog = load_catalog(CATALOG)
    assert automation.topics_missing_from_catalog(cluster, catalog) == ["audit.logins", "shop.refunds"]

    shutil.copytree(CATALOG, tmp_path / "catalog")
    (tmp_path / "catalog" / "_archive.yaml").write_text('pattern: "audit[.].*"\nowner: x\nstart_hour: "2026-11-01T00:00Z"\n')
    with_archive = load_catalog(tmp_path / "catalog")
    assert automation.topics_missing_from_catalog(cluster, with_archive) == ["shop.refunds"]
    assert topics_to_archive(cluster, with_archive) == ["audit.logins"]


def test_a_slice_of_the_catalog_lands_its_databases_and_counts_the_others_topics_as_landed(tmp_path):
    """Given the catalog served as two code locations, one per slice of its databases; then each slice loads only its
    databases' tables, neither reports the other's topics missing, and only the archive's slice archives."""
    cluster = ["shop.page_views", "payments.transactions", "shop.refunds", "audit.logins"]
    shutil.copytree(CATALOG, tmp_path / "catalog")
    (tmp_path / "catalog" / "_archive.yaml").write_text('pattern: "audit[.].*"\nowner: x\nstart_hour: "2026-11-01T00:00Z"\n')
    whole = load_catalog(tmp_path / "catalog", archived_topics=["audit.logins"])
    shop = load_catalog(tmp_path / "catalog", archived_topics=["audit.logins"], databases=("shop",))
    # Every other database of the catalog, whatever a user's own entries add to the samples, and the archive rule's.
    folders = {entry.parent.parent.name for entry in (tmp_path / "catalog").glob("*/*/topic.yaml")}
    others = tuple(sorted((folders | {"archive"}) - {"shop"}))
    rest = load_catalog(tmp_path / "catalog", archived_topics=["audit.logins"], databases=others)

    assert {t.database for t in shop.topics} == {"shop"}
    assert sorted(t.name for t in shop.topics + rest.topics) == sorted(t.name for t in whole.topics)
    assert automation.topics_missing_from_catalog(cluster, shop) == ["shop.refunds"]
    assert automation.topics_missing_from_catalog(cluster, rest) == ["shop.refunds"]
    assert topics_to_archive(cluster + ["audit.logouts"], shop) == [], "the archive is another slice's"
    assert topics_to_archive(cluster + ["audit.logouts"], rest) == ["audit.logouts"]


@pytest.mark.parametrize("before, passed, alert", [
    (None, False, "[FAILED]"), (None, True, None), (True, False, "[FAILED]"), (False, True, "[RECOVERED]"),
    (False, False, None), (True, True, None),
])
def test_freshness_alerts_on_its_first_failure_and_on_each_change(page_views, before, passed, alert):
    result = automation.Freshness(passed, "the description", H, 0.0 if passed else 42.0, 0 if passed else 1)

    said = automation.freshness_alert(page_views, before, result)

    assert said == (None if alert is None else f"{alert} freshness of {page_views.topic}: the description")


def test_the_next_increment_is_said_due_at_a_moment_still_to_come(page_views):
    """Asked at 10:30:30 every 5 minutes, the next increment is due at 10:35:30: at 10:35:10 the tick says 10:36Z, not a
    minute that has begun before it."""
    open_hour = page_views.model_copy(update=dict(open_hour_minutes=5))
    now = H.start + timedelta(minutes=35, seconds=10)
    why = automation.increment_due(open_hour, H, now, (H.start + timedelta(minutes=30, seconds=30)).isoformat())
    assert why == f"next increment of {H} due at 10:36Z (every 5 min)"
    assert automation.increment_due(open_hour, H, now + timedelta(seconds=20),
                                    (H.start + timedelta(minutes=30, seconds=30)).isoformat()) is None
