"""Running the code location in production: the Dagster instance file, the gRPC workspace, the image.

`python -m deploy.instance` renders $DAGSTER_HOME/dagster.yaml; `deploy/workspace.yaml` is the webserver's.
"""
