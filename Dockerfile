# The code location's image: `dagster code-server start` serving platform_assets.definitions over gRPC.
# Dagster's default run launcher runs each run in a process of this container, so it is also where
# the Spark driver runs: it carries Java 17 for Spark and the exact packages of requirements.lock.
#   docker build -t kafka-lake-code .
#   docker run -p 4000:4000 -e DAGSTER_PG_HOST=… -e KAFKA_BOOTSTRAP_SERVERS=… -e LAKE_ROOT=s3://… kafka-lake-code
# The same image serves the Prometheus metrics beside the daemon (docs/OPERATING_METRICS.md), on every address of the
# container: the server's default, loopback, is the container's own, which Prometheus outside it cannot reach:
#   docker run -p 9464:9464 -e KAFKA_BOOTSTRAP_SERVERS=… -e LAKE_ROOT=s3://… kafka-lake-code python -m deploy.metrics --port 9464 --host 0.0.0.0
FROM python:3.11-slim-bookworm

# Spark's JVM; procps because Spark's launch scripts call `ps`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 kafka-lake
WORKDIR /opt/kafka-lake

# The pinned packages first, in their own layer: a code change does not reinstall them.
COPY requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock

COPY --chown=kafka-lake . .
RUN pip install --no-cache-dir --no-deps -e . \
    && mkdir -p /opt/dagster/home && chown kafka-lake /opt/kafka-lake /opt/dagster/home

# PYSPARK_PYTHON: executors started from this image run the same Python as the driver. Executors in
# another image need the same packages there and this variable pointing at that image's Python.
# DAGSTER_EVENT_BATCH_SIZE: a run of hundreds of topics is created with a planned event per asset and check, which
# Postgres then takes in batches (docs/DEPLOYING.md).
ENV DAGSTER_HOME=/opt/dagster/home \
    DAGSTER_EVENT_BATCH_SIZE=100 \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=/usr/local/bin/python
USER kafka-lake
EXPOSE 4000 9464

# Renders $DAGSTER_HOME/dagster.yaml (Postgres when DAGSTER_PG_* is set) before the command.
ENTRYPOINT ["/bin/sh", "deploy/docker-entrypoint.sh"]
CMD ["dagster", "code-server", "start", "-m", "platform_assets.definitions", "--location-name", "kafka_lake", "-h", "0.0.0.0", "-p", "4000"]
