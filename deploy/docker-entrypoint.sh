#!/bin/sh
# The image's entrypoint: renders $DAGSTER_HOME/dagster.yaml (Postgres when DAGSTER_PG_* is set; see
# deploy/instance.py), then runs the command, so the runs launched here record into the shared instance. The metrics
# server (python -m deploy.metrics) reads the lake and the brokers, not the instance: it starts without it.
set -e
case "$*" in
  *deploy.metrics*) ;;
  *) python -m deploy.instance "$DAGSTER_HOME" ;;
esac
exec "$@"
