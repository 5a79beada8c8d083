"""Hour boundaries that a broker's answers cannot fool: transaction markers and out-of-order records at the
log's end, a high watermark that under-reports, transactions committed, aborted, interleaved and left open.

Real brokers: Tansu, and librdkafka's built-in mock cluster where a test needs a broker that answers every time
lookup with -1 ("no record at or after"), as Apache Kafka answers past the last record; Tansu answers from its
write times instead, and never answers -1. Neither hides aborted records from a read_committed consumer, so the
tests expect what a read_committed consumer of that broker is served (see docs/RELIABILITY.md).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_lake.hours import KafkaHour, to_millis
from kafka_lake.kafka.framing import encode_confluent
from kafka_lake.kafka.log import KafkaLog, consumer_config
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.driver import confirm_boundaries
from kafka_lake.settings import KafkaClientConfigError, PlatformSettings
from tests.exactly_once import assert_exactly_once
from tests.landing_fixtures import (
    Produced,
    in_this_process,
    land,
    landing_settings,
    unique_topic_name,
    write_test_topic,
)

H = datetime(2026, 11, 1, 10, tzinfo=timezone.utc)


@pytest.fixture
def mock_cluster():
    """librdkafka's built-in mock cluster on loopback, alive while its owning client lives. Its time lookups answer
    -1 whatever the records, the answer a broker gives for "no record at or after"; it supports transactions."""
    owner = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    yield ",".join(f"{b.host}:{b.port}" for b in owner.list_topics(timeout=10).brokers.values())
    owner.flush(1)


def rows(topic, moments: list[datetime], first_id: int = 1, partition: int = 0) -> list[Produced]:
    """Rows of the test topic stamped (Kafka time and event time alike) at `moments`."""
    version = topic.version(1)
    made = []
    for n, moment in enumerate(moments):
        record = {"event_id": first_id + n, "user_id": None, "meta": {"occurred_at": moment.isoformat().replace("+00:00", "Z")},
                  "amount": Decimal("1.00"), "quantity": 1, "tags": []}
        made.append(Produced(partition, to_millis(moment), None, encode_confluent(version.registry_id, version.parsed, record),
                             "row", record, 1))
    return made


def spread(hour: datetime, count: int, offset: timedelta = timedelta(0)) -> list[datetime]:
    return [hour + offset + timedelta(seconds=n * (3000 // count)) for n in range(count)]


def _delivered(item: Produced):
    def callback(error, message):
        assert error is None, error
        item.offset = message.offset()
    return callback


def produce_plain(bootstrap: str, topic_name: str, items: list[Produced], single_batches: bool = False) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": False})
    for item in items:
        producer.produce(topic_name, value=item.value, partition=item.partition, timestamp=item.timestamp_ms,
                         on_delivery=_delivered(item))
        if single_batches:
            producer.flush(30)
    producer.flush(30)


class Transaction:
    """A transactional producer's transaction, begun at construction."""

    def __init__(self, bootstrap: str, topic_name: str):
        self.topic_name = topic_name
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
                                  "linger.ms": 5, "log_level": 0})
        self.producer.init_transactions(30)
        self.producer.begin_transaction()

    def produce(self, items: list[Produced]) -> Transaction:
        for item in items:
            self.producer.produce(self.topic_name, value=item.value, partition=item.partition,
                                  timestamp=item.timestamp_ms, on_delivery=_delivered(item))
        self.producer.flush(30)  # written to the log now, decided later
        return self

    def commit(self) -> None:
        self.producer.commit_transaction(30)

    def abort(self) -> None:
        self.producer.abort_transaction(30)


def land_in_process(topic, settings, hours: list[datetime], now: datetime):
    """The production path of a range run (`land_hours`), its slices run in this process instead of on Spark."""
    return land(topic, hours, settings, in_this_process, now=now)


def served_read_committed(bootstrap: str, topic_name: str, partition: int = 0) -> list[int]:
    """The offsets a plain read_committed consumer of the broker is served: what a landing must hold."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest", "log_level": 0})
    consumer.assign([TopicPartition(topic_name, partition, 0)])
    offsets = []
    try:
        while True:
            [message] = consumer.consume(1, timeout=10) or [None]
            assert message is not None, "the broker did not report the end of the partition"
            if message.error():
                return offsets
            offsets.append(message.offset())
    finally:
        consumer.close()


# --- A broker's "no record at or after" -----------------------------------------------------------------


def test_given_a_commit_marker_at_the_log_end_and_a_broker_answering_none_then_the_first_landed_hour_holds_its_records(
    mock_cluster, tmp_path,
):
    """Before: the answer -1 was checked against the offset before the log end only, a transaction's commit marker,
    which reads as no record: the hour started at the log end and its 20 committed records were never landed."""
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    committed = rows(topic, spread(H, 20))
    Transaction(mock_cluster, topic.topic).produce(committed).commit()
    lake = str(tmp_path / "lake")

    [result] = land_in_process(topic, landing_settings(lake, mock_cluster), [H], now=H + timedelta(hours=2))

    landed = result.manifest.partition(0)
    assert (landed.start, landed.counts.rows) == (0, 20)
    assert landed.end == committed[-1].offset + 2  # the commit marker is inside the hour: no offset is left between hours
    assert_exactly_once(LakeStorage(lake), topic, committed)


def test_given_an_out_of_order_tail_and_a_broker_answering_none_then_the_records_stamped_in_the_hour_land_in_it(
    mock_cluster, tmp_path,
):
    """The last record carries an older timestamp (a producer whose clock lags): before, it alone stood for the whole
    log, the answer -1 for the hour's start was accepted, and the hour's records before it were never landed."""
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    in_hour = rows(topic, spread(H, 15))
    straggler = rows(topic, [H - timedelta(minutes=3)], first_id=100)
    produce_plain(mock_cluster, topic.topic, in_hour + straggler)
    lake = str(tmp_path / "lake")

    [result] = land_in_process(topic, landing_settings(lake, mock_cluster), [H], now=H + timedelta(hours=2))

    landed = result.manifest.partition(0)
    assert (landed.start, landed.end, landed.counts.rows) == (0, 16, 16)
    assert_exactly_once(LakeStorage(lake), topic, in_hour + straggler)


def test_given_records_stamped_after_a_time_a_little_before_older_ones_then_the_boundary_is_the_first_stamped_after(broker):
    """Kafka's rule with producers whose clocks disagree: a boundary is the first offset stamped at or after the time,
    even when records stamped before it follow. Tansu's own lookup answers from write times, so records decide."""
    topic_name = unique_topic_name()
    broker.create_topic(topic_name, 1)
    minute = timedelta(minutes=1)
    # offsets 0-4 before 11:00; 5 at 11:00:30 from a fast clock; 6-7 before 11:00 again; 8-9 after.
    moments = [H + 55 * minute + n * minute for n in range(5)]
    moments += [H + 60 * minute + timedelta(seconds=30), H + 59 * minute, H + 59 * minute + timedelta(seconds=30)]
    moments += [H + 61 * minute, H + 62 * minute]
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for moment in moments:
        producer.produce(topic_name, value=b"v", partition=0, timestamp=to_millis(moment))
    producer.flush(30)
    producer.produce(topic_name, value=b"v", partition=0, timestamp=to_millis(H + 63 * minute))
    producer.flush(30)

    with KafkaLog(consumer_config(broker.bootstrap_servers), topic_name) as log:
        start, end = log.bounds(0)
        boundary = log.first_offset_at_or_after(0, to_millis(H + 60 * minute), start, end)

    assert boundary == 5


# --- A log end the broker under-reports ---------------------------------------------------------------


def test_given_two_thousand_records_in_one_flush_then_three_closed_hours_land_every_record(broker, tmp_path):
    """Tansu reports a partition's end as the first offset of its last batch + 1: before, the three hours landed the
    first three records and every check passed. Now the end is read, and the manifest says what the broker said."""
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    broker.create_topic(topic.topic, 1)
    hours = [H, H + timedelta(hours=1), H + timedelta(hours=2)]
    produced = rows(topic, [moment for hour in hours for moment in spread(hour, 667)][:2000])
    produce_plain(broker.bootstrap_servers, topic.topic, produced)
    consumer = Consumer(consumer_config(broker.bootstrap_servers))
    _, reported = consumer.get_watermark_offsets(TopicPartition(topic.topic, 0), timeout=10)
    consumer.close()
    assert reported < 2000, "the premise: this broker under-reports the end of a log written in one flush"
    lake = str(tmp_path / "lake")

    results = land_in_process(topic, landing_settings(lake, broker.bootstrap_servers), hours, now=hours[-1] + timedelta(hours=2))

    assert sum(r.manifest.counts.rows for r in results) == 2000
    assert results[-1].manifest.partition(0).end == 2000
    assert f"the broker reported {reported}" in results[-1].manifest.boundaries["0"]["end_from"]
    assert_exactly_once(LakeStorage(lake), topic, produced)


# --- Transactions ---------------------------------------------------------------------------------------


def test_given_committed_aborted_and_interleaved_transactions_with_markers_at_hour_ends_then_each_served_record_lands_once(
    broker, tmp_path,
):
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    broker.create_topic(topic.topic, 1)
    bootstrap = broker.bootstrap_servers
    first = rows(topic, spread(H, 10))
    Transaction(bootstrap, topic.topic).produce(first).commit()  # its marker is the hour's last offset
    aborted = rows(topic, spread(H + timedelta(hours=1), 4), first_id=100)
    Transaction(bootstrap, topic.topic).produce(aborted).abort()
    one, two = Transaction(bootstrap, topic.topic), Transaction(bootstrap, topic.topic)
    interleaved = []
    for n, moment in enumerate(spread(H + timedelta(hours=1), 8, offset=timedelta(minutes=5))):
        [item] = rows(topic, [moment], first_id=200 + n)
        (one if n % 2 else two).produce([item])
        interleaved.append(item)
    one.commit()
    two.commit()
    closing = rows(topic, [H + timedelta(hours=2, minutes=1)], first_id=300)
    Transaction(bootstrap, topic.topic).produce(closing).commit()
    lake = str(tmp_path / "lake")
    hours = [H, H + timedelta(hours=1)]

    results = land_in_process(topic, landing_settings(lake, bootstrap), hours, now=H + timedelta(hours=1, minutes=30))

    served = set(served_read_committed(bootstrap, topic.topic))
    expected = [p for p in first + aborted + interleaved if p.offset in served]
    assert {p.offset for p in first + interleaved} <= served
    count = assert_exactly_once(LakeStorage(lake), topic, expected)
    assert count.rows == len(expected)
    boundary = results[0].manifest.partition(0).end
    assert boundary == results[1].manifest.partition(0).start
    assert first[-1].offset < boundary <= aborted[0].offset  # the commit marker between them belongs to either hour
    counts = [result.manifest.counts for result in results]
    assert all(c.records == c.rows for c in counts)
    assert sum(r.manifest.offsets for r in results) > sum(c.records for c in counts)  # markers: offsets, not records


def test_given_a_transaction_left_open_over_a_closed_hour_then_the_hour_ends_at_the_last_stable_offset_and_the_next_takes_the_rest(
    broker, tmp_path,
):
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name(), allowed_lateness_hours=1)
    broker.create_topic(topic.topic, 1)
    bootstrap = broker.bootstrap_servers
    before = rows(topic, spread(H, 5))
    produce_plain(bootstrap, topic.topic, before)
    held = rows(topic, [H + timedelta(minutes=m) for m in (40, 45, 50)], first_id=50)
    still_open = Transaction(bootstrap, topic.topic).produce(held)
    lake = str(tmp_path / "lake")
    settings = landing_settings(lake, bootstrap)

    [first] = land_in_process(topic, settings, [H], now=H + timedelta(hours=1, minutes=15))

    landed = first.manifest.partition(0)
    assert (landed.start, landed.end, landed.counts.rows) == (0, held[0].offset, 5)
    assert first.manifest.open_transactions == {"0": [held[0].offset, held[-1].offset + 1]}
    assert first.manifest.held_back == first.manifest.open_transactions, "its records are stamped in the hour"
    assert "transaction still open" in first.manifest.boundaries["0"]["end_from"]

    still_open.commit()
    closing = rows(topic, [H + timedelta(hours=2, minutes=1)], first_id=90)
    produce_plain(bootstrap, topic.topic, closing)
    [second] = land_in_process(topic, settings, [H + timedelta(hours=1)], now=H + timedelta(hours=2, minutes=30))

    assert second.manifest.partition(0).start == held[0].offset
    assert second.manifest.partition(0).counts.rows == 3 and second.manifest.counts.late_events == 3
    assert_exactly_once(LakeStorage(lake), topic, before + held)


def test_given_committed_records_stamped_in_hours_behind_an_open_transaction_then_those_hours_fail_naming_them_and_land_them_once_readable(
    broker, tmp_path,
):
    """The dev broker's case: a transaction left open at 10:59 on every partition, committed records stamped in the
    next two hours behind it. Tansu shows it as Apache Kafka would to a read_committed reader (fetches stop at the open
    transaction's first offset) and reads past it with read_uncommitted; it also reports the last stable offset as 0,
    and serves aborted records, so only a commit is played here. A broker whose committed end lags shows the platform
    the same view. Before: hours 11:00 and 12:00 landed empty at the committed end, every check green,
    `open_transactions` empty, and the records stamped in them were not landed."""
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name(), allowed_lateness_hours=1)
    broker.create_topic(topic.topic, 2)
    bootstrap = broker.bootstrap_servers
    hour = lambda n: H + timedelta(hours=n)
    before = [item for p in (0, 1) for item in rows(topic, spread(H, 4), first_id=10 * p, partition=p)]
    produce_plain(bootstrap, topic.topic, before)
    in_transaction = [item for p in (0, 1) for item in rows(topic, [H + timedelta(minutes=59)], first_id=50 + p, partition=p)]
    still_open = Transaction(bootstrap, topic.topic).produce(in_transaction)
    behind = [item for n in (1, 2) for p in (0, 1)
              for item in rows(topic, spread(hour(n), 6), first_id=100 * n + 10 * p, partition=p)]
    produce_plain(bootstrap, topic.topic, behind, single_batches=True)
    lake = str(tmp_path / "lake")
    settings = landing_settings(lake, bootstrap)
    manifests = ManifestStore(LakeStorage(lake), topic.database, topic.table)

    landed = land_in_process(topic, settings, [H, hour(1), hour(2)], now=hour(3) + timedelta(minutes=30))

    for result in landed:
        outcome = confirm_boundaries(topic, result.manifest, manifests, settings.kafka_config)
        assert not outcome.passed, (result.manifest.hour, outcome.description)
        for p in (0, 1):
            committed_end = [i for i in in_transaction if i.partition == p][0].offset
            stamped_in_hour = [i.offset for i in in_transaction + behind
                               if i.partition == p and i.timestamp_ms < to_millis(result.manifest.kafka_hour.end)]
            assert result.manifest.partition(p).end == committed_end
            assert result.manifest.held_back[str(p)] == [committed_end, max(stamped_in_hour) + 1]
            assert f"offsets [{committed_end}, {max(stamped_in_hour) + 1}) past it hold records stamped" in outcome.description
            assert "not readable yet" in result.manifest.boundaries[str(p)]["end_from"]
    assert [r.manifest.counts.rows for r in landed] == [8, 0, 0]

    still_open.commit()
    closing = [item for p in (0, 1) for item in rows(topic, [hour(4) + timedelta(minutes=1)], first_id=900 + p, partition=p)]
    produce_plain(bootstrap, topic.topic, closing, single_batches=True)
    [caught_up] = land_in_process(topic, settings, [hour(3)], now=hour(4) + timedelta(minutes=30))

    assert caught_up.manifest.held_back == {}
    assert caught_up.manifest.counts.rows == len(in_transaction + behind)
    assert confirm_boundaries(topic, caught_up.manifest, manifests, settings.kafka_config).passed
    assert_exactly_once(LakeStorage(lake), topic, before + in_transaction + behind)


def test_an_isolation_level_other_than_read_committed_is_refused_where_it_is_set():
    with pytest.raises(KafkaClientConfigError, match="KAFKA_CLIENT_ISOLATION_LEVEL is 'read_uncommitted'"):
        PlatformSettings.from_env({"KAFKA_CLIENT_ISOLATION_LEVEL": "read_uncommitted"})
    with pytest.raises(KafkaClientConfigError):
        consumer_config("127.0.0.1:9092", {"isolation.level": "read_uncommitted"})
    assert consumer_config("127.0.0.1:9092", {"isolation.level": "read_committed"})["isolation.level"] == "read_committed"
    assert consumer_config("127.0.0.1:9092")["isolation.level"] == "read_committed"


# --- The check that compares what landed with the broker ----------------------------------------------------


def test_given_an_hour_landed_from_a_wrongly_accepted_boundary_then_boundaries_confirmed_fails_naming_the_offsets(
    mock_cluster, tmp_path, monkeypatch,
):
    """The check reads the broker again: had a landing started the first landed hour at the log end (what a wrongly
    accepted "no record" answer did), the records stamped in the hour before that start fail it; a right landing passes."""
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    committed = rows(topic, spread(H, 12))
    Transaction(mock_cluster, topic.topic).produce(committed).commit()
    good_lake, bad_lake = str(tmp_path / "good"), str(tmp_path / "bad")
    config = consumer_config(mock_cluster)

    [good] = land_in_process(topic, landing_settings(good_lake, mock_cluster), [H], now=H + timedelta(hours=2))
    passed = confirm_boundaries(topic, good.manifest, ManifestStore(LakeStorage(good_lake), "e2e", "orders"), config)
    with monkeypatch.context() as patched:
        patched.setattr(KafkaLog, "first_offset_at_or_after", lambda self, partition, ms, start, end: None)
        [bad] = land_in_process(topic, landing_settings(bad_lake, mock_cluster), [H], now=H + timedelta(hours=2))
    failed = confirm_boundaries(topic, bad.manifest, ManifestStore(LakeStorage(bad_lake), "e2e", "orders"), config)

    assert passed.passed, passed.description
    assert "partition(s) 0 (start and end)" in passed.description
    assert (bad.manifest.partition(0).start, bad.manifest.counts.rows) == (committed[-1].offset + 2, 0)
    assert not failed.passed
    assert "12 record(s) before the hour's start" in failed.description and "first at offset 0" in failed.description


def test_given_an_hour_ending_before_records_stamped_in_it_then_boundaries_confirmed_fails(broker, tmp_path, monkeypatch):
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name())
    broker.create_topic(topic.topic, 1)
    produced = rows(topic, spread(H, 10) + [H + timedelta(hours=1, minutes=1)])
    produce_plain(broker.bootstrap_servers, topic.topic, produced, single_batches=True)
    lake = str(tmp_path / "lake")
    real = KafkaLog.first_offset_at_or_after

    def ends_early(self, partition, moment_ms, start, end):
        return 4 if moment_ms == KafkaHour(H).end_ms else real(self, partition, moment_ms, start, end)

    monkeypatch.setattr(KafkaLog, "first_offset_at_or_after", ends_early)
    [landed] = land_in_process(topic, landing_settings(lake, broker.bootstrap_servers), [H], now=H + timedelta(hours=2))
    monkeypatch.undo()

    outcome = confirm_boundaries(topic, landed.manifest, ManifestStore(LakeStorage(lake), "e2e", "orders"),
                                 consumer_config(broker.bootstrap_servers))

    assert not outcome.passed
    assert "the hour ends at offset 4 by time, but the record at offset 4 is stamped before the hour's end" in outcome.description


def test_given_a_transaction_left_open_across_the_hours_end_then_committed_an_hour_landed_again_fails_naming_its_records_until_they_land(
    broker, tmp_path,
):
    """Tansu, the dev broker: a transactional producer leaves a transaction open across 11:00 (records stamped 10:55 to
    11:04) with committed records of the next two hours behind it. Hours 10 to 12 land while it is open, each at the
    committed end, each failing `boundaries_confirmed` naming what is held. Then it commits, and hour 11 is landed again,
    as an operator does with a red hour: its end is hour 12's start, that same committed end, and the records stamped in
    it now sit readable past it, in no landed hour. Before: hour 11 landed again as [e, e) with `held_back` {} and every
    check green ("every boundary is fixed by a landed neighbour hour"). Now its check fails naming them, until a landing
    takes them (hour 12 landed again); then every hour's check passes, and each record is landed once."""
    topic = write_test_topic(tmp_path / "catalog", unique_topic_name(), allowed_lateness_hours=1)
    broker.create_topic(topic.topic, 1)
    bootstrap = broker.bootstrap_servers
    hour = lambda n: H + timedelta(hours=n)
    before = rows(topic, spread(H, 20))
    produce_plain(bootstrap, topic.topic, before)
    across = rows(topic, [H + timedelta(minutes=55 + m) for m in range(10)], first_id=100)
    still_open = Transaction(bootstrap, topic.topic).produce(across)
    behind = [item for n in (1, 2) for item in rows(topic, spread(hour(n), 15), first_id=200 + 100 * n)]
    produce_plain(bootstrap, topic.topic, behind)
    lake = str(tmp_path / "lake")
    settings = landing_settings(lake, bootstrap)
    manifests = ManifestStore(LakeStorage(lake), topic.database, topic.table)
    check = lambda n: confirm_boundaries(topic, manifests.read(KafkaHour(hour(n))), manifests, settings.kafka_config)
    committed_end = across[0].offset

    while_open = land_in_process(topic, settings, [H, hour(1), hour(2)], now=hour(3) + timedelta(minutes=30))
    assert [r.manifest.partition(0).end for r in while_open] == [committed_end] * 3
    assert not any(check(n).passed for n in (0, 1, 2))

    still_open.commit()
    [again] = land_in_process(topic, settings, [hour(1)], now=hour(3) + timedelta(minutes=40))

    assert (again.manifest.partition(0).start, again.manifest.partition(0).end) == (committed_end, committed_end)
    first_after = min(i.offset for i in behind if i.timestamp_ms >= to_millis(hour(2)))
    outcome = check(1)
    assert not outcome.passed, outcome.description
    assert f"offsets [{committed_end}, {first_after}) past it hold records stamped before the hour's end" in outcome.description
    assert "in no landed hour" in outcome.description

    [takes_them] = land_in_process(topic, settings, [hour(2)], now=hour(3) + timedelta(minutes=50))

    assert takes_them.manifest.partition(0).start == committed_end
    assert takes_them.manifest.counts.rows == len(across + behind)
    for n in (0, 1, 2):
        assert check(n).passed, (n, check(n).description)
    assert "landed since" in check(0).description
    assert_exactly_once(LakeStorage(lake), topic, before + across + behind)
