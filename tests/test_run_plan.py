"""How due work becomes runs (`kafka_lake.run_plan`): many topics a run, capped, each topic-hour in one run."""

from datetime import datetime, timedelta, timezone

import pytest

from kafka_lake.hours import KafkaHour
from kafka_lake.run_plan import consecutive_hours, plan_runs

H = KafkaHour(datetime(2026, 11, 20, 10, tzinfo=timezone.utc))


def hour(n: int) -> KafkaHour:
    return KafkaHour(H.start + timedelta(hours=n))


def carried(runs) -> list[tuple[str, KafkaHour]]:
    return sorted((unit, h) for run in runs for unit in run.units for h in run.hours)


def test_hours_are_grouped_into_stretches_of_consecutive_hours_at_most_a_given_length():
    hours = [hour(n) for n in (0, 1, 2, 3, 4, 7, 9, 10)]
    stretches = consecutive_hours(reversed(hours), longest=3)
    assert [[h.start.hour for h in s] for s in stretches] == [[10, 11, 12], [13, 14], [17], [19, 20]]


def test_given_many_topics_due_for_one_hour_when_planned_then_they_share_runs_of_at_most_the_cap_in_name_order():
    due = {f"topic_{n:03d}": [H] for n in range(0, 250)}

    runs = plan_runs(due, name=str, topics_per_run=100)

    assert [len(run.units) for run in runs] == [100, 100, 50]
    assert [run.hours for run in runs] == [(H,)] * 3
    assert [u for run in runs for u in run.units] == sorted(due)
    assert carried(runs) == sorted((u, H) for u in due)


def test_given_topics_catching_up_from_different_hours_when_planned_then_each_run_carries_one_stretch_oldest_first():
    due = {"a": [H, hour(1), hour(2)], "b": [H, hour(1), hour(2)], "c": [hour(2)], "d": [hour(1), hour(3)]}

    runs = plan_runs(due, name=str, topics_per_run=10, hours_per_run=2)

    assert [(run.hours_text(), run.units) for run in runs] == [
        (f"{H}...{hour(1)}", ("a", "b")),
        (str(hour(1)), ("d",)),
        (str(hour(2)), ("a", "b", "c")),
        (str(hour(3)), ("d",)),
    ]
    assert carried(runs) == sorted((u, h) for u, hours in due.items() for h in hours)


def test_a_runs_key_is_the_same_for_the_same_units_and_hours_and_differs_otherwise():
    [run] = plan_runs({"a": [H], "b": [H]}, name=str)
    [same] = plan_runs({"b": [H], "a": [H]}, name=str)
    [other] = plan_runs({"a": [H], "c": [H]}, name=str)
    assert run.key(run.units) == same.key(same.units) != other.key(other.units)
    assert run.key(run.units).startswith(f"{H}:")


def test_a_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="at least one topic"):
        plan_runs({"a": [H]}, name=str, topics_per_run=0)
