"""A slice task's garbage collection: off during the task, the process's objects from before its first task frozen
out of every later sweep once, and what each task makes still collected. Each test runs in a fresh process: what is
frozen depends on what the process held before its first task."""

from __future__ import annotations

import subprocess
import sys

TASKS_ONE_AFTER_ANOTHER = """
import gc, weakref
from spark_jobs.worker_process import collector_held

class Node:
    pass

with collector_held():
    assert not gc.isenabled()
frozen = gc.get_freeze_count()
assert gc.isenabled()
for _ in range(3):
    with collector_held():
        made = Node()
        made.itself = made  # a reference cycle: only a sweep frees it
        freed = weakref.ref(made)
        del made
    assert gc.get_freeze_count() == frozen, (gc.get_freeze_count(), frozen)
    gc.collect()  # what Spark's Python worker does after each task
    assert freed() is None
print(frozen, len(gc.get_objects()))
"""


def test_given_tasks_one_after_another_then_the_objects_from_before_the_first_are_frozen_once_and_sweeps_skip_them():
    ran = subprocess.run([sys.executable, "-c", TASKS_ONE_AFTER_ANOTHER], capture_output=True, text=True)

    assert ran.returncode == 0, ran.stderr
    frozen, swept = map(int, ran.stdout.split())
    # The modules' objects (pyarrow's, numpy's, ours) are out of every sweep after the tasks: a full collection
    # walks a small part of the process, not all of it after every task.
    assert frozen > 10 * swept
