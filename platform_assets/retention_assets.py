"""`retention/<db>/<table>`: GDPR expiry and erasure over the whole table, audited.
The work is `kafka_lake.retention`."""

from datetime import datetime, timezone

from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.catalog import TopicSpec
from kafka_lake.pii import pseudonymizer_for
from kafka_lake.expiry import is_expired, retention_cutoff
from kafka_lake.retention import apply_retention
from kafka_lake.table_state import storage_partitions
from platform_assets.failures import failures_explained
from platform_assets.keys import asset_key, layer_attributes
from platform_assets.pools import table_pool
from platform_assets.table_publishing import table_publisher
from resources import LakeStorageResource, PiiKeyResource
from resources.table_catalog import TableCatalogResource
from spark_jobs.compaction_job import run_compactions_on_spark

NOTHING_EXPIRED_REMAINS = "nothing_expired_remains"


def retention_asset(topic: TopicSpec, embedded_metastore: bool = True):
    key = asset_key("retention", topic)
    keeps = f"{topic.retention_days} days" if topic.retention_days else "forever"

    @asset(
        key=key,
        description=f"Retention layer: GDPR for `{topic.name}`: partitions kept {keeps}, erasure requests on "
        f"`{topic.subject_field or '(no subject_field)'}` applied, every deletion audited under `_audit/`.",
        deps=[asset_key("catalog", topic)],
        check_specs=[AssetCheckSpec(NOTHING_EXPIRED_REMAINS, asset=key,
                                    description="No partition older than retention_days remains in storage.")],
        op_tags={"topic": topic.topic},
        pool=table_pool(topic, "retention", embedded_metastore),
        **layer_attributes("retention", topic, "spark", "parquet"),
    )
    def retain(
        context: AssetExecutionContext,
        pyspark: LazyPySparkResource,
        lake: LakeStorageResource,
        table_catalog: TableCatalogResource,
        pii: PiiKeyResource,
    ):
        with failures_explained(context):
            pii_key = pii.key()
            if topic.subject_field and topic.pii_fields:
                pseudonymizer_for(topic, pii_key)  # erasure matches pseudonymized subjects: no key, no erasure
            now = datetime.now(timezone.utc)
            storage = lake.storage()
            spark = pyspark.spark_session
            publish = table_publisher(table_catalog, spark, topic, storage)
            report = apply_retention(
                storage, topic, now, pii_key,
                lambda tasks: run_compactions_on_spark(spark, tasks, f"erase subjects in {topic.topic}"),
                publish.switch_to_generations, publish.drop,
            )
            yield MaterializeResult(metadata={
                "expired_partitions": len(report.expired_partitions),
                "expired_rows": report.expired_rows,
                "expired_dead_letter_files": report.expired_dead_letter_files,
                "erased_partitions": len(report.erased_partitions),
                "erased_rows": report.erased_rows,
                "audit_entries": MetadataValue.json([storage.uri(path) for path in report.audit_paths]),
                "retention_days": topic.retention_days or 0,
            })
            cutoff = retention_cutoff(topic, now)
            left = [str(p) for p in storage_partitions(storage, topic.database, topic.table)
                    if is_expired(p.hour, cutoff)]
            yield AssetCheckResult(
                check_name=NOTHING_EXPIRED_REMAINS,
                passed=not left,
                description=f"expired partitions still in storage: {', '.join(left)}" if left
                else f"no partition ends before {cutoff:%Y-%m-%d %H:%M}Z" if cutoff else "the topic keeps data forever",
                metadata={"expired_partitions_left": len(left)},
            )

    return retain
