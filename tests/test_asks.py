"""What a sensor asked for and whether it was done (`kafka_lake.asks`): an ask lives until a run of it succeeds; what
its runs did not land is asked again with back-off, never for a lasting failure, never dropped."""

from datetime import datetime, timedelta, timezone

from kafka_lake.asks import (
    LOST_AFTER,
    Ask,
    RunsOfAsk,
    RunsOutcome,
    backoff,
    due_again,
    requested,
    settle,
)
from kafka_lake.hours import KafkaHour

NOW = datetime(2026, 12, 2, 14, 5, tzinfo=timezone.utc)
H = KafkaHour(datetime(2026, 12, 2, 12, tzinfo=timezone.utc))


def ask(units=("shop/orders", "shop/page_views"), first=H, last=H, attempt=1, key="landing:k") -> Ask:
    return Ask(key=key, units=tuple(units), first=first.partition_key, last=last.partition_key,
               asked_at=NOW - timedelta(minutes=2), attempt=attempt)


def test_given_a_run_still_going_or_succeeded_then_nothing_is_asked_again():
    going = settle([ask()], {"landing:k": RunsOfAsk(RunsOutcome.GOING)}, NOW)
    assert (len(going.kept), going.asked_again, going.done) == (1, [], 0)

    succeeded = settle([ask()], {"landing:k": RunsOfAsk(RunsOutcome.SUCCEEDED)}, NOW)
    assert (succeeded.kept, succeeded.asked_again, succeeded.done) == ([], [], 1)


def test_given_a_run_that_failed_before_it_started_then_every_table_hour_is_asked_again_then_with_backoff():
    failed = RunsOfAsk(RunsOutcome.ENDED_SHORT, why="run 1a2b3c4d failed (START_TIMEOUT)")

    settled = settle([ask()], {"landing:k": failed}, NOW)

    [again] = settled.asked_again
    assert again.units == ("shop/orders", "shop/page_views")
    assert (again.first, again.last, again.attempt) == (H.partition_key, H.partition_key, 2)
    assert again.not_before == NOW and again.why == failed.why, "the first ask again goes with the tick that finds it"
    assert again.key == "landing:k:again2", "a run key of its own: Dagster launches a key once"
    assert settled.kept == [again], "kept until its own run succeeds"
    assert due_again(settled.kept, NOW) == [again]

    [third] = settle([requested(again, NOW)], {again.key: failed}, NOW).asked_again
    assert third.attempt == 3 and due_again([third], NOW) == [], "then not before its back-off"
    assert due_again([third], NOW + timedelta(minutes=1)) == [third]


def test_given_a_run_that_landed_part_of_its_hours_then_only_the_rest_is_asked_again_per_stretch():
    h1, h2, h3 = H.next(), H.next().next(), H.next().next().next()
    landed = {("shop/orders", h.partition_key) for h in (H, h1, h2, h3)} | {("shop/page_views", H.partition_key),
                                                                            ("shop/page_views", h2.partition_key)}
    failed = RunsOfAsk(RunsOutcome.ENDED_SHORT, landed=frozenset(landed), why="run 1a2b3c4d cancelled")

    settled = settle([ask(first=H, last=h3)], {"landing:k": failed}, NOW)

    assert sorted((a.units, a.first, a.last) for a in settled.asked_again) == [
        (("shop/page_views",), h1.partition_key, h1.partition_key),
        (("shop/page_views",), h3.partition_key, h3.partition_key)]
    assert len({a.key for a in settled.asked_again}) == 2


def test_given_a_lasting_failure_then_that_table_is_left_to_a_person_and_the_others_asked_again():
    failed = RunsOfAsk(RunsOutcome.ENDED_SHORT, lasting=frozenset({"shop/orders"}), why="run 1a2b3c4d failed")

    settled = settle([ask()], {"landing:k": failed}, NOW)

    [again] = settled.asked_again
    assert again.units == ("shop/page_views",)
    assert settled.given_up == [("shop/orders", "run 1a2b3c4d failed")]


def test_given_no_run_was_ever_created_then_the_ask_waits_a_while_and_is_then_asked_again():
    young = settle([ask()], {}, NOW)
    assert young.asked_again == [] and len(young.kept) == 1

    lost = settle([ask()], {}, NOW + LOST_AFTER)
    [again] = lost.asked_again
    assert "no run was created" in again.why


def test_backoff_doubles_up_to_an_hour_and_the_asking_never_stops():
    assert [backoff(n).total_seconds() / 60 for n in (1, 2, 3, 4, 5, 8, 9, 20)] == [0, 1, 2, 4, 8, 60, 60, 60]
    again = ask(attempt=9, key="landing:k:again9")
    [tenth] = settle([again], {again.key: RunsOfAsk(RunsOutcome.ENDED_SHORT)}, NOW).asked_again
    assert (tenth.key, tenth.attempt, tenth.not_before) == ("landing:k:again10", 10, NOW + timedelta(hours=1))


def test_a_waiting_ask_once_requested_is_followed_by_its_runs_and_survives_the_cursor():
    [again] = settle([ask()], {"landing:k": RunsOfAsk(RunsOutcome.ENDED_SHORT)}, NOW).asked_again
    assert Ask.from_json(again.to_json()) == again

    asked = requested(again, NOW + timedelta(minutes=1))
    assert not asked.waiting and Ask.from_json(asked.to_json()) == asked
    assert settle([asked], {asked.key: RunsOfAsk(RunsOutcome.SUCCEEDED)}, NOW).done == 1
