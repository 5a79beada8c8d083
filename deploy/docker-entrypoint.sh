#!/bin/sh
# The image's entrypoint: renders $DAGSTER_HOME/dagster.yaml (Postgres when DAGSTER_PG_* is set; see
# deploy/instance.py), then runs the command, so the runs launched here record into the shared instance.
set -e
python -m deploy.instance "$DAGSTER_HOME"
exec "$@"
