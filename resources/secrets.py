"""Secrets the resources take from the environment as `dagster.EnvVar`s: the UI shows a variable's name, never its
value; Dagster resolves it when a run or a sensor tick initializes the resource.
"""

from __future__ import annotations

from dagster import EnvVar

from kafka_lake.settings import is_set


def resolved(value: str | None) -> str | None:
    """A resource field's value: Dagster resolves an `EnvVar` when a run or tick initializes the resource; a resource
    used outside of one (a script, a test) still holds the EnvVar, whose value is read here."""
    return value.get_value() if isinstance(value, EnvVar) else value


def secret_from_env(name: str) -> EnvVar | None:
    """A secret a resource takes from the environment as a `dagster.EnvVar` (the UI shows the name, never the value),
    or None where the variable is unset: Dagster would fail every run on an EnvVar that is not set."""
    return EnvVar(name) if is_set(name) else None
