"""Concurrency pools (every pool's limit is 1 unless dagster.yaml says otherwise): one landing of a topic
at a time, and one process at a time in the embedded Derby metastore."""

from kafka_lake.table_spec import TableSpec

EMBEDDED_METASTORE = "embedded_metastore"


def landing_pool(topic: TableSpec, together: tuple[TableSpec, ...] = ()) -> str:
    """Two runs landing one table at once would race for the same hours' boundaries; the tables of one Kafka topic
    landed by one asset share a pool named for the topic (a run lands one, some or all of them)."""
    return f"landing/{topic.database}/{topic.table}" if not together else f"landing/topic/{topic.topic}"


def table_pool(topic: TableSpec, layer: str, embedded_metastore: bool) -> str:
    """Compaction, registration and retention write the table catalog; Derby admits one process."""
    return EMBEDDED_METASTORE if embedded_metastore else f"{layer}/{topic.database}/{topic.table}"
