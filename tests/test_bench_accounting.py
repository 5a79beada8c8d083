"""The bench's CPU accounting, on which its per-record costs rest: it counts every process under the bench, those
still running and those already reaped, as the broker, Spark's JVM and its workers are."""

from __future__ import annotations

import subprocess
import sys

from bench.run import Measured, _process_kind, cpu_by_process, cpu_seconds, result_line

BURN_S = 0.5
# Spends BURN_S of its own CPU, says so, then waits to be told to end: a process that is alive when counted.
BURNER = f"""
import sys, time
while time.process_time() < {BURN_S}:
    pass
print("burnt", flush=True)
sys.stdin.read()
"""


def test_given_a_running_child_that_burnt_cpu_then_the_bench_counts_it():
    before = cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "burnt"

        assert cpu_seconds() - before >= BURN_S * 0.9  # /proc counts in clock ticks
    finally:
        child.communicate("")


def test_given_a_child_already_reaped_then_the_bench_still_counts_it():
    before = cpu_seconds()
    subprocess.run([sys.executable, "-c", BURNER], input="", capture_output=True, text=True, check=True)

    assert cpu_seconds() - before >= BURN_S * 0.9


def test_given_a_child_that_burnt_cpu_then_its_cpu_is_told_apart_from_the_drivers():
    before = cpu_by_process()
    subprocess.run([sys.executable, "-c", BURNER], input="", capture_output=True, text=True, check=True)

    after = cpu_by_process()
    # Reaped, the child counts in this process's own figures: a measure that reaps one moves it (`slice_task_rss`).
    assert after["driver"] - before["driver"] >= BURN_S * 0.9
    assert sum(after.values()) - sum(before.values()) >= BURN_S * 0.9


def test_given_a_running_child_then_it_is_counted_by_its_kind():
    before = cpu_by_process()
    child = subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "burnt"

        after = cpu_by_process()
        assert after["other"] - before["other"] >= BURN_S * 0.9
        assert after["driver"] - before["driver"] < BURN_S * 0.5
    finally:
        child.communicate("")


def test_processes_are_told_apart_by_what_they_run():
    assert _process_kind(1, "java", b"/usr/lib/jvm/bin/java\0-cp\0spark.jar") == "jvm"
    assert _process_kind(1, "python", b"/venv/bin/python\0-m\0pyspark.daemon\0pyspark.worker") == "python workers"
    assert _process_kind(1, "tansu-v0.6.0-51", b"/root/.calfkit/bin/tansu-v0.6.0\0broker\0--listener-url") == "broker"
    assert _process_kind(1, "python", b"/venv/bin/python\0-m\0bench.run\0--one-slice") == "other"


def test_the_result_line_sets_the_landings_cpu_a_record_against_the_ceilings_of_the_same_run():
    ceiling = Measured("ceiling", 1_000_000, 1.0, cpu_seconds=2.0, cpu_split={"driver": 1.5, "broker": 0.5})
    naive = Measured("naive", 100_000, 2.0, cpu_seconds=2.5)
    landing = Measured("landing", 2_000_000, 8.0, cpu_seconds=12.0,
                       cpu_split={"driver": 0.5, "jvm": 1.0, "python workers": 7.5, "broker": 3.0})

    line = result_line(landing, ceiling, naive, 421.4)

    fields = dict(field.split("=") for field in line.removeprefix("RESULT ").split())
    assert fields == {"landing_rows_per_s": "250000", "cpu_us_per_record": "6.00", "ceiling_cpu_us_per_record": "2.00",
                      "cpu_vs_ceiling": "3.00", "cpu_vs_ceiling_without_broker": "3.00",
                      "ceiling_rows_per_s": "1000000", "vs_ceiling": "0.25",
                      "vs_naive": "5.00", "peak_task_rss_mb": "421"}
