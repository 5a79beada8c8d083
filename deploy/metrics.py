"""`python -m deploy.metrics --port 9464`: the lake's and the brokers' measures in Prometheus text on `/metrics`, and
`200 ok` on `/healthz`, measured at each scrape from the manifests and the brokers (no Dagster run needed).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer

from dev_services.ports import LOOPBACK
from kafka_lake.kafka.cluster import KafkaCluster
from kafka_lake.kafka.log import consumer_config
from kafka_lake.metrics import READERS, Measures, PlatformMeasures
from kafka_lake.settings import PlatformSettings

log = logging.getLogger("deploy.metrics")

TABLE = ("database", "table")
PARTITION = ("database", "table", "topic", "partition")
# The measures are `kafka_lake.metrics`'; this module names them for Prometheus and serves them.
# docs/OPERATING_METRICS.md lists every metric, the dashboard and the alert rules.
# Every metric served, with its help text and labels: the dashboard and the alert rules may name only these.
METRICS = {
    "kafka_lake_lag_records": ("Offsets between the end of the newest landed hour and the log end, per Kafka partition",
                               PARTITION),
    "kafka_lake_lag_seconds": ("Seconds from the end of the newest landed hour to now", TABLE),
    "kafka_lake_landed_rows": ("Rows over every landed hour, as the hour manifests count them", TABLE),
    "kafka_lake_dead_letters": ("Dead letters over every landed hour, as the hour manifests count them", TABLE),
    "kafka_lake_landed_hour_manifests": ("Kafka hours landed: the table's hour manifests", TABLE),
    "kafka_lake_newest_landed_hour_timestamp_seconds": ("Start of the newest landed Kafka hour, in Unix seconds", TABLE),
    "kafka_lake_catalog_rejected_entries": ("Catalog entries that failed to load; their topics are not landed", ()),
    "kafka_lake_brokers_up": ("1 when this scrape read the log ends from the brokers, 0 when they did not answer", ()),
    "kafka_lake_scrape_duration_seconds": ("How long this scrape's measuring took", ()),
    "kafka_lake_tables_counting": ("Tables whose manifests are still being counted, left out of this scrape", ()),
}


def metric_families(measures: Measures, duration_s: float) -> list[Metric]:
    """The measures as Prometheus metric families; a table without a landed hour has no lag or newest hour, and a
    topic the brokers did not report has no lag in records."""
    family = {name: GaugeMetricFamily(name, text, labels=labels) for name, (text, labels) in METRICS.items()}
    for table in measures.tables:
        labels = [table.database, table.table]
        family["kafka_lake_landed_rows"].add_metric(labels, table.totals.rows)
        family["kafka_lake_dead_letters"].add_metric(labels, table.totals.dead_letters)
        family["kafka_lake_landed_hour_manifests"].add_metric(labels, table.totals.hours)
        if table.newest_hour is not None and table.lag_seconds is not None:
            family["kafka_lake_newest_landed_hour_timestamp_seconds"].add_metric(labels, table.newest_hour.start.timestamp())
            family["kafka_lake_lag_seconds"].add_metric(labels, table.lag_seconds)
        for lag in table.lags or ():
            family["kafka_lake_lag_records"].add_metric([*labels, table.topic, str(lag.partition)], lag.records)
    family["kafka_lake_catalog_rejected_entries"].add_metric([], measures.rejected_entries)
    family["kafka_lake_brokers_up"].add_metric([], 1 if measures.brokers_reachable else 0)
    family["kafka_lake_scrape_duration_seconds"].add_metric([], duration_s)
    family["kafka_lake_tables_counting"].add_metric([], measures.counting)
    return list(family.values())


class LakeCollector:
    """A prometheus-client collector measuring at each scrape."""

    def __init__(self, measures: PlatformMeasures, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self._measures = measures
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        measured = self._measures.measure(self._clock())
        yield from metric_families(measured, time.perf_counter() - started)


def metrics_app(registry: CollectorRegistry):
    """`/metrics` from the registry, `/healthz` answering `ok`, anything else 404."""
    metrics = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: /metrics or /healthz\n"]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # a scrape every 15 s is no news; errors still reach stderr
        pass


def serve(measures: PlatformMeasures, host: str, port: int, clock: Callable[[], datetime] | None = None):
    """The HTTP server, bound and ready; `serve_forever()` runs it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LakeCollector(measures, clock) if clock else LakeCollector(measures))
    return make_server(host, port, metrics_app(registry), server_class=ThreadingWSGIServer, handler_class=_QuietHandler)


def keep_recounting(measures: PlatformMeasures, every_s: float, stop: threading.Event) -> None:
    """Reads every manifest again now and then, so an hour re-landed since it was counted shows its new counts."""
    while not stop.wait(every_s):
        try:
            started = time.perf_counter()
            measures.recount()
            log.info("recounted every manifest in %.1fs", time.perf_counter() - started)
        except Exception:  # the lake away for a while: the next recount tries again
            log.exception("the recount of the manifests failed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.metrics", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9464, help="the port to serve on (default 9464)")
    # Nothing listens wider than asked: in a container, where Prometheus scrapes from outside, say `--host 0.0.0.0`.
    parser.add_argument("--host", default=LOOPBACK,
                        help=f"the address to bind (default {LOOPBACK}: this machine only; 0.0.0.0 for all)")
    parser.add_argument("--recount-minutes", type=float, default=60.0,
                        help="how often every manifest is read again, for hours re-landed since they were counted "
                             "(default 60)")
    parser.add_argument("--readers", type=int, default=READERS,
                        help=f"tables refreshed and manifests read at once (default {READERS})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = PlatformSettings.from_env()
    cluster = KafkaCluster(consumer_config(settings.kafka_bootstrap_servers, settings.kafka_client_properties))
    measures = PlatformMeasures(settings, cluster, readers=args.readers)
    server = serve(measures, args.host, args.port)
    stop = threading.Event()
    # The first measure reads every table's history: done before Prometheus asks, not during its first scrape.
    threading.Thread(target=lambda: measures.measure(datetime.now(timezone.utc)), name="warm-up", daemon=True).start()
    threading.Thread(target=keep_recounting, args=(measures, args.recount_minutes * 60, stop), name="recount",
                     daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    log.info("serving http://%s:%d/metrics and /healthz for the catalog at %s and the lake at %s", args.host,
             server.server_port, settings.schema_catalog_dir, settings.lake_root)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.server_close()
        measures.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
