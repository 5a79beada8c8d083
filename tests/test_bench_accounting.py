"""The bench's CPU accounting, on which its per-record costs rest: it counts every process under the bench, those
still running and those already reaped, as the broker, Spark's JVM and its workers are."""

from __future__ import annotations

import subprocess
import sys

from bench.run import cpu_seconds

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
