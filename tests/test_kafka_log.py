"""Boundary finding against the real broker, whose time lookup is wrong (Tansu answers from
batch write time), and the refusal of an hour that is still open."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import Producer

from kafka_lake.hours import KafkaHour, floor_hour, to_millis
from kafka_lake.kafka.log import KafkaLog, consumer_config
from kafka_lake.lake.manifests import ManifestStore
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.landing.landing_settings import LandingSettings
from kafka_lake.landing.slice_task import land_slice
from kafka_lake.landing.slices import HourNotClosed
from tests.landing_fixtures import land, unique_topic_name, write_test_topic

BASE = datetime(2026, 11, 1, 10, tzinfo=timezone.utc)


def produce_timestamps(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for ts in timestamps[:-1]:
        producer.produce(topic, value=b"v", partition=partition, timestamp=ts)
    producer.flush(30)
    producer.produce(topic, value=b"v", partition=partition, timestamp=timestamps[-1])
    producer.flush(30)


@pytest.fixture(scope="module")
def timed_log(broker):
    """Given 600 records a minute apart from 10:00, on a broker that writes them all now."""
    topic, timestamps = timed_topic(broker)
    with KafkaLog(consumer_config(broker.bootstrap_servers), topic) as log:
        yield log, timestamps


def expected_boundary(timestamps: list[int], moment_ms: int) -> int | None:
    return next((offset for offset, ts in enumerate(timestamps) if ts >= moment_ms), None)


@pytest.mark.parametrize("hours_after_base", [0, 1, 3.5, 9, 9.98, 10, 30])
def test_given_a_wrong_broker_time_lookup_when_finding_a_boundary_then_record_timestamps_decide(timed_log, hours_after_base):
    log, timestamps = timed_log
    moment = to_millis(BASE + timedelta(hours=hours_after_base))
    expected = expected_boundary(timestamps, moment)
    log_start, log_end = log.bounds(0)
    assert (log_start, log_end) == (0, len(timestamps))

    assert log.first_offset_at_or_after(0, moment, log_start, log_end) == expected


def test_the_broker_here_really_answers_time_lookups_wrongly(timed_log):
    # The premise of the test above: Tansu answers from write time, so the check must catch it.
    log, timestamps = timed_log
    moment = to_millis(BASE + timedelta(hours=5))
    answer = log._broker_lookup(0, moment)
    assert answer != expected_boundary(timestamps, moment)
    assert not log._stamped_at_or_after(0, answer, moment, len(timestamps))


def count_probes(log: KafkaLog) -> list[int]:
    """Wraps the log's single-record reads (the unit of a boundary search's cost) and returns their offsets."""
    probed: list[int] = []
    read = log.record_at_or_after

    def counted(partition, offset, limit):
        probed.append(offset)
        return read(partition, offset, limit)

    log.record_at_or_after = counted
    return probed


@pytest.mark.parametrize("hours_after_base", [1, 3.5, 9])
def test_given_steady_timestamps_then_the_search_aims_and_needs_fewer_probes_than_bisection(broker, hours_after_base):
    # The module's log is shared: a fresh reader over it, so counting probes changes nothing for the others.
    topic, timestamps = timed_topic(broker)
    moment = to_millis(BASE + timedelta(hours=hours_after_base))
    with KafkaLog(consumer_config(broker.bootstrap_servers), topic) as log:
        probed = count_probes(log)

        assert log._search(0, moment, 0, len(timestamps)) == expected_boundary(timestamps, moment)

    assert len(probed) <= 6, probed  # bisection over 600 offsets takes 10


def test_given_bunched_timestamps_then_the_search_still_finds_the_boundary_within_thrice_bisection(broker):
    # 500 records in one second, then 100 spread over ten hours: aiming by offset is far off at first.
    topic = unique_topic_name()
    broker.create_topic(topic, 1)
    start = to_millis(BASE)
    timestamps = [start + index for index in range(500)] + [start + 1000 + minute * 6_000_000 for minute in range(100)]
    produce_timestamps(broker.bootstrap_servers, topic, 0, timestamps)
    with KafkaLog(consumer_config(broker.bootstrap_servers), topic) as log:
        for moment in (start + 250, start + 499, start + 500, start + 1000 + 42 * 6_000_000, start + 10**12):
            probed = count_probes(log)
            assert log.first_offset_at_or_after(0, moment, 0, 600) == expected_boundary(timestamps, moment), moment
            # Aiming misses at most twice before each halving: at worst three times bisection's 10, plus the checks.
            assert len(probed) <= 34, (moment, probed)


def test_given_records_far_larger_than_a_probe_fetch_then_boundaries_are_still_found(broker):
    # Probes fetch with a 1 KiB limit: the broker must still hand over a 3 MiB record whole.
    topic = unique_topic_name()
    broker.create_topic(topic, 1)
    start = to_millis(BASE)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "message.max.bytes": 8_000_000})
    for index, size in enumerate([10, 3_000_000, 10, 3_000_000]):
        producer.produce(topic, value=b"x" * size, partition=0, timestamp=start + index * 1000)
        producer.flush(30)
    with KafkaLog(consumer_config(broker.bootstrap_servers), topic) as log:
        assert [log.record_at_or_after(0, offset, 4)[0] for offset in range(4)] == [0, 1, 2, 3]
        assert [log.first_offset_at_or_after(0, start + ms, 0, 4) for ms in (0, 1, 2500, 3000, 3001)] == [0, 1, 3, 3, None]


def timed_topic(broker) -> tuple[str, list[int]]:
    topic = unique_topic_name()
    broker.create_topic(topic, 1)
    timestamps = [to_millis(BASE) + minute * 60_000 for minute in range(600)]
    produce_timestamps(broker.bootstrap_servers, topic, 0, timestamps)
    return topic, timestamps


def test_given_an_hour_with_records_but_none_after_it_and_the_clock_inside_grace_then_it_is_refused(broker, tmp_path):
    kafka_topic = unique_topic_name()
    topic = write_test_topic(tmp_path / "catalog", kafka_topic)
    broker.create_topic(kafka_topic, 2)
    now = datetime.now(timezone.utc)
    current = KafkaHour(floor_hour(now))
    produce_timestamps(broker.bootstrap_servers, kafka_topic, 0, [to_millis(current.start) + 1000] * 3)
    produce_timestamps(broker.bootstrap_servers, kafka_topic, 1, [to_millis(current.start) + 2000] * 2)
    settings = LandingSettings(lake_root=str(tmp_path / "lake"), kafka_config=consumer_config(broker.bootstrap_servers))

    def must_not_run(tasks):
        raise AssertionError("an open hour must not be landed, even partially")

    with pytest.raises(HourNotClosed) as refused:
        land(topic, [current], settings, must_not_run, now=now)

    assert refused.value.open_partitions == [0, 1]
    assert "partition(s) 0, 1" in str(refused.value) and kafka_topic in str(refused.value)
    assert ManifestStore(LakeStorage(settings.lake_root), "e2e", "orders").landed_hours() == []


def test_given_a_record_after_the_hour_on_every_partition_then_the_hour_is_closed_before_the_clock(broker, tmp_path):
    kafka_topic = unique_topic_name()
    topic = write_test_topic(tmp_path / "catalog", kafka_topic)
    broker.create_topic(kafka_topic, 1)
    hour = KafkaHour(BASE)
    produce_timestamps(broker.bootstrap_servers, kafka_topic, 0, [hour.start_ms + 5, hour.start_ms + 9, hour.end_ms + 1])
    settings = LandingSettings(lake_root=str(tmp_path / "lake"), kafka_config=consumer_config(broker.bootstrap_servers),
                               pii_key=b"test-key")
    planned = []

    def run_in_process(tasks):
        planned.extend(tasks)
        return [land_slice(task) for task in tasks]

    [result] = land(topic, [hour], settings, run_in_process, now=hour.end)

    assert [(t.slice.start, t.slice.end) for t in planned] == [(0, 2)]
    [landed] = result.manifest.partitions
    assert (landed.start, landed.end, landed.counts.records, landed.counts.dead_letters) == (0, 2, 2, 2)  # b"v" is no Avro


def produce_many(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 500})
    for index in range(count):
        producer.produce(topic, value=b"%099d" % index, partition=0)
        if index % 10_000 == 0:
            producer.poll(0)
    producer.flush(30)
    producer.produce(topic, value=b"last", partition=0)  # alone in its batch: Tansu's high watermark is then exact
    producer.flush(30)


class RecordingConsumer:
    """The log's consumer, recording how many records each read asked for and from which offset."""

    def __init__(self, consumer, start: int):
        self._consumer, self.position, self.asked = consumer, start, []

    def consume(self, num_messages: int, timeout: float):
        self.asked.append((self.position, num_messages))
        messages = self._consumer.consume(num_messages=num_messages, timeout=timeout)
        if messages:
            self.position = messages[-1].offset() + 1
        return messages

    def __getattr__(self, name):
        return getattr(self._consumer, name)


def test_given_a_slice_ending_where_the_log_ends_then_no_read_asks_for_records_past_its_end(broker):
    # The client waits out a read's whole timeout while fewer records than asked for exist: at the log's end
    # (the latest hour's slices), asking past the slice cost every task half a second.
    topic = unique_topic_name()
    broker.create_topic(topic, 1)
    produce_many(broker.bootstrap_servers, topic, 2_499)
    with KafkaLog(consumer_config(broker.bootstrap_servers), topic) as log:
        assert log.bounds(0) == (0, 2_500)
        log._consumer = recording = RecordingConsumer(log._consumer, 0)
        read = [offset for batch in log.read_slice_batches(0, 0, 2_500, batch_size=1_000) for offset in batch.offsets]

    assert read == list(range(2_500))
    assert recording.asked and all(position + asked <= 2_500 for position, asked in recording.asked), recording.asked


def test_given_a_slice_far_shorter_than_the_log_then_the_reader_fetches_about_a_batch_past_its_end(broker):
    # Every record fetched past a slice's end is broker work for nothing: librdkafka keeps 100k records
    # fetched ahead by default, and would read this whole log for a slice of 1,000.
    topic = unique_topic_name()
    broker.create_topic(topic, 1)
    produce_many(broker.bootstrap_servers, topic, 120_000)
    statistics: list[dict] = []
    config = {**consumer_config(broker.bootstrap_servers),
              "statistics.interval.ms": 100, "stats_cb": lambda text: statistics.append(json.loads(text))}
    with KafkaLog(config, topic) as log:
        read = sum(len(batch) for batch in log.read_slice_batches(0, 0, 1_000, batch_size=1_000))
        time.sleep(0.5)  # the client's fetches settle, then it reports them
        log._consumer.poll(0.2)

    assert read == 1_000
    fetched = statistics[-1]["rxmsgs"]
    # 20k ahead, and the fetches that crossed that mark (Tansu answers ~1 MB each, whatever the fetch limits).
    assert 1_000 <= fetched <= 60_000, fetched
