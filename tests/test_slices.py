"""Slice planning as pure functions: boundaries from neighbours, lookups, the wall clock and losses."""


from datetime import datetime, timedelta, timezone

import pytest

from kafka_lake.hours import KafkaHour
from kafka_lake.kafka.log import PartitionLog
from kafka_lake.lake.manifests import BoundaryOrigin, HourManifest, PartitionLanding
from kafka_lake.landing.slices import (
    HourNotClosed,
    OffsetSlice,
    OffsetsLost,
    PartitionBounds,
    fixed_by_neighbours,
    plan_hour,
    split_slices,
)

HOUR = KafkaHour(datetime(2026, 11, 1, 13, tzinfo=timezone.utc))
GRACE = timedelta(minutes=10)
LONG_AFTER = HOUR.end + timedelta(days=1)


def manifest(hour: KafkaHour, ranges: dict[int, tuple[int, int]]) -> HourManifest:
    return HourManifest(
        database="shop", table="page_views", topic="shop.page_views", hour=hour.partition_key,
        partitions=tuple(PartitionLanding(p, start, end) for p, (start, end) in ranges.items()),
        files=(), landed_at="2026-11-01T15:00:00+00:00",
    )


def plan(logs, before=None, after=None, now=LONG_AFTER):
    return plan_hour("shop.page_views", HOUR, logs, before, after, now, GRACE)


def test_given_no_landed_neighbours_when_planning_then_time_lookups_bound_the_hour():
    logs = [PartitionLog(0, 0, 500, 100, 300), PartitionLog(1, 0, 90, 10, 50)]
    bounds = plan(logs)
    assert [(b.partition, b.start, b.end) for b in bounds] == [(0, 100, 300), (1, 10, 50)]
    assert bounds[0].start_from == "time lookup" and bounds[0].end_from == "time lookup"


def test_given_landed_neighbours_when_planning_then_their_boundaries_win_over_the_broker():
    # The broker would now answer differently (late producers): the committed boundaries stand.
    logs = [PartitionLog(0, 0, 500, 120, 280)]
    before = manifest(HOUR.previous(), {0: (40, 100)})
    after = manifest(HOUR.next(), {0: (300, 420)})
    [bound] = plan(logs, before, after)
    assert (bound.start, bound.end) == (100, 300)
    assert bound.start_from == f"manifest {HOUR.previous().partition_key}"


def test_given_a_gap_before_when_planning_then_start_never_goes_below_an_earlier_hours_end():
    logs = [PartitionLog(0, 0, 500, 80, 300)]
    two_before = manifest(HOUR.previous().previous(), {0: (0, 95)})
    [bound] = plan(logs, before=two_before)
    assert bound.start == 95


def test_given_no_record_after_the_hour_and_the_clock_not_past_grace_then_the_hour_is_refused():
    logs = [PartitionLog(0, 0, 500, 100, 300), PartitionLog(1, 0, 90, 10, None), PartitionLog(2, 0, 9, 0, None)]
    with pytest.raises(HourNotClosed) as refused:
        plan(logs, now=HOUR.end + timedelta(minutes=5))
    assert refused.value.open_partitions == [1, 2]
    assert "partition(s) 1, 2" in str(refused.value)


def test_given_a_quiet_partition_after_grace_then_the_log_end_closes_the_hour():
    [bound] = plan([PartitionLog(0, 0, 90, 10, None)], now=HOUR.end + GRACE)
    assert (bound.start, bound.end) == (10, 90)
    assert "wall clock" in bound.end_from


def test_given_offsets_expired_before_landing_then_the_loss_is_reported_with_the_offsets():
    before = manifest(HOUR.previous(), {0: (40, 100)})
    with pytest.raises(OffsetsLost) as lost:
        plan([PartitionLog(0, 150, 500, 160, 300)], before=before)
    assert lost.value.losses == {0: (100, 150)}
    assert "[100, 150)" in str(lost.value)


def test_given_a_recreated_topic_with_lower_offsets_then_it_is_reported():
    before = manifest(HOUR.previous(), {0: (400, 1000)})
    with pytest.raises(OffsetsLost) as lost:
        plan([PartitionLog(0, 0, 30, 0, 20)], before=before)
    assert lost.value.losses == {0: (30, 1000)}
    assert "recreated" in str(lost.value)


def test_given_a_partition_that_disappeared_then_it_is_reported():
    before = manifest(HOUR.previous(), {0: (0, 10), 1: (0, 10)})
    with pytest.raises(OffsetsLost, match="no longer exist"):
        plan([PartitionLog(0, 0, 30, 10, 20)], before=before)


def test_given_a_new_partition_then_it_lands_from_its_first_record_in_the_hour():
    before = manifest(HOUR.previous(), {0: (0, 10)})
    bounds = plan([PartitionLog(0, 0, 30, 10, 20), PartitionLog(1, 0, 7, 0, None)], before=before)
    assert [(b.partition, b.start, b.end) for b in bounds] == [(0, 10, 20), (1, 0, 7)]


def test_given_a_long_range_when_splitting_then_no_slice_exceeds_the_limit_and_they_tile():
    by_time = (BoundaryOrigin.TIME_LOOKUP.value, BoundaryOrigin.TIME_LOOKUP.value, BoundaryOrigin.TIME_LOOKUP, BoundaryOrigin.TIME_LOOKUP)
    bounds = [PartitionBounds(0, 5, 27, *by_time), PartitionBounds(1, 3, 3, *by_time)]
    assert split_slices(bounds, 10) == [OffsetSlice(0, 5, 15), OffsetSlice(0, 15, 25), OffsetSlice(0, 25, 27)]


def test_boundaries_fixed_by_adjacent_neighbours_need_no_lookup_and_plan_without_one():
    before = manifest(HOUR.previous(), {0: (40, 100), 1: (5, 9)})
    after = manifest(HOUR.next().next(), {0: (300, 420)})  # not adjacent: the end must be looked up
    starts, ends = fixed_by_neighbours(HOUR, before, after)
    assert (starts, ends) == ({0, 1}, set())

    bounds = plan([PartitionLog(0, 0, 500, None, 250), PartitionLog(1, 0, 90, None, 50)], before, after)

    assert [(b.start, b.end) for b in bounds] == [(100, 250), (9, 50)]


def test_given_expired_offsets_and_the_loss_accepted_then_the_partition_starts_at_the_log_start_carrying_the_loss():
    before = manifest(HOUR.previous(), {0: (40, 100), 1: (0, 5)})
    logs = [PartitionLog(0, 150, 500, 160, 300), PartitionLog(1, 0, 50, 10, 20)]
    bounds = plan_hour("shop.page_views", HOUR, logs, before, None, LONG_AFTER, GRACE, accept_lost_offsets=True)
    assert [(b.partition, b.start, b.end, b.accepted_loss) for b in bounds] == [(0, 150, 300, (100, 150)), (1, 5, 20, None)]
    assert "loss accepted" in bounds[0].start_from


def test_given_a_partition_new_since_the_landed_hour_before_a_gap_then_it_starts_at_its_log_start():
    two_before = manifest(HOUR.previous().previous(), {0: (0, 10)})
    bounds = plan(logs=[PartitionLog(0, 0, 30, 12, 20), PartitionLog(1, 3, 9, 6, None)], before=two_before)
    assert [(b.partition, b.start, b.end, b.new_partition) for b in bounds] == [(0, 12, 20, False), (1, 3, 9, True)]
