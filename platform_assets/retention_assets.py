"""`retention/<db>/<table>`: GDPR expiry and erasure over the whole table, audited.
The work is the topic's table format's (`kafka_lake.tables.formats`): `kafka_lake.upkeep.retention` for the Hive layout;
delete snapshots, snapshot expiry and orphan removal for Iceberg."""

from datetime import datetime, timezone

from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.current.upkeep import retain_current_state
from kafka_lake.decoding.pii import pseudonymizer_for
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.formats import table_format_type
from kafka_lake.tables.iceberg.catalog import open_catalog
from platform_assets.failures import failures_explained
from platform_assets.keys import asset_key, layer_attributes, name_the_run
from platform_assets.pools import table_pool
from platform_assets.tables import dagster_metadata, format_kinds, topic_tables
from resources import LakeStorageResource, PiiKeyResource
from resources.table_catalog import TableCatalogResource


def retention_asset(topic: TableSpec, embedded_metastore: bool = True):
    key = asset_key("retention", topic)
    keeps = f"{topic.retention_days} days" if topic.retention_days else "forever"
    check_name = table_format_type(topic).retention_check
    snapshots = table_format_type(topic).described(topic).retention
    if topic.current_state is not None:
        snapshots += (f" Erasure requests reach the current-state table `{topic.database}.{topic.current_state.table}` "
                      f"too, whose snapshots are kept {topic.snapshot_retention_days} days.")

    @asset(
        key=key,
        description=f"Retention layer: GDPR for `{topic.name}`: partitions kept {keeps}, erasure requests on "
        f"`{topic.subject_field or '(no subject_field)'}` applied, every deletion audited under `_audit/`.{snapshots}",
        deps=[asset_key("catalog", topic)],
        metadata={"table_format": topic.table_format},
        check_specs=[AssetCheckSpec(check_name, asset=key,
                                    description="No partition older than retention_days remains in the table.")],
        op_tags={"topic": topic.topic},
        pool=table_pool(topic, "retention", embedded_metastore),
        **layer_attributes("retention", topic, "parquet", *format_kinds(topic)),
    )
    def retain(
        context: AssetExecutionContext,
        pyspark: LazyPySparkResource,
        lake: LakeStorageResource,
        table_catalog: TableCatalogResource,
        pii: PiiKeyResource,
    ):
        with failures_explained(context, topic.name):
            name_the_run(context, "retention", topic.topic)
            pii_key = pii.key()
            if topic.subject_field and topic.pii_fields:
                pseudonymizer_for(topic, pii_key)  # erasure matches pseudonymized subjects: no key, no erasure
            now = datetime.now(timezone.utc)
            done = topic_tables(topic, lake, table_catalog, pyspark).retain(topic, now, pii_key)
            context.log.info(done.summary)
            metadata = dict(done.metadata)
            if topic.current_state is not None:  # erasure reaches the current-state table too
                storage = lake.storage()
                current = retain_current_state(topic, storage, open_catalog(table_catalog.iceberg_catalog(storage.root)),
                                               now, pii_key)
                context.log.info(f"{topic.topic} current state: {current.erased_rows} row(s) erased, "
                                 f"{current.snapshots_expired} snapshot(s) expired")
                metadata |= current.metadata() | {"audit_entries": [
                    *metadata.get("audit_entries", []), *(storage.uri(path) for path in current.audit_paths)]}
            yield MaterializeResult(metadata=dagster_metadata(metadata))
            yield AssetCheckResult(check_name=check_name, passed=done.check.passed, description=done.check.description,
                                   metadata=dagster_metadata(done.check.metadata))

    return retain
