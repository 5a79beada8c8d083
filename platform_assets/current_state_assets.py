"""`current/<db>/<table>`: a change topic's current-state table, the Iceberg table of the newest row per key, with each
landed Kafka hour applied to it. The work is `kafka_lake.current`; a run of several hours applies them in order and
records each hour as it is applied, with its own metadata and check result.
"""

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    MetadataValue,
    PreviewWarning,
    multi_asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_lake.current.apply import apply_landed_hours, current_state_check
from kafka_lake.current.ledger import AppliedHour
from kafka_lake.current.state_table import current_location, current_table_name, key_names
from kafka_lake.hours import KafkaHour
from kafka_lake.table_spec import TableSpec
from kafka_lake.tables.iceberg.catalog import open_catalog
from platform_assets.checks import evaluated_against
from platform_assets.failures import failures_explained
from platform_assets.keys import asset_key, layer_attributes, raw_key
from platform_assets.partitions import hourly_partitions, quiet_warnings
from platform_assets.tables import topic_tables
from resources import LakeStorageResource, PiiKeyResource, TableCatalogResource

LAYER = "current"
CURRENT_STATE_MATCHES_LANDING = "current_state_matches_landing"


def current_key(topic: TableSpec) -> AssetKey:
    return asset_key(LAYER, topic)


def current_state_pool(topic: TableSpec) -> str:
    """Two applications of one table at once are correct (a commit that meets another's key ranges is planned again),
    but one at a time never does the work twice."""
    return f"{LAYER}/{topic.database}/{topic.table}"


def current_state_asset(topic: TableSpec):
    key = current_key(topic)
    name = current_table_name(topic)
    state = topic.current_state
    assert state is not None, topic.name
    what = (f"the row in `{'.'.join(state.row)}` of its newest change" if state.row else "its newest change's value")
    deletes = f", or `{state.delete_when}`" if state.delete_when is not None else ""

    with quiet_warnings(BetaWarning, PreviewWarning):
        # A multi-asset of one: each hour of a run is recorded as it is applied.
        @multi_asset(
            name=f"current__{topic.database}__{topic.table}",
            specs=[AssetSpec(
                key,
                description=f"Current-state layer: `{name}`, an Iceberg table of one row per key of `{topic.topic}` "
                f"({', '.join(key_names(topic))}): for every key {what}, by Kafka offset; no row once its newest "
                f"change deletes it (a tombstone{deletes}). Each landed Kafka hour is applied once it lands.",
                deps=[AssetDep(raw_key(topic))],  # hour H applies raw hour H
                metadata={"topic": topic.topic, "table": name, "dagster/table_name": name, "catalog_file": topic.source_file},
                **layer_attributes(LAYER, topic, "iceberg"),
            )],
            partitions_def=hourly_partitions(topic),
            check_specs=[AssetCheckSpec(
                CURRENT_STATE_MATCHES_LANDING, asset=key, partitions_def=hourly_partitions(topic),
                description="No key has two rows, and the table is not behind the landed hours: the hour's landing is "
                            "the one applied, and every hour landed in the day up to it is applied.")],
            op_tags={"topic": topic.topic, "owner": topic.owner},
            pool=current_state_pool(topic),
            # A range is one run applying its hours in order (and the CLI's `--partition-range` needs a single run).
            backfill_policy=BackfillPolicy.single_run(),
            can_subset=True,
        )
        def apply_hours(context: AssetExecutionContext, pyspark: LazyPySparkResource, lake: LakeStorageResource,
                        table_catalog: TableCatalogResource, pii: PiiKeyResource):
            with failures_explained(context, topic.name):
                storage = lake.storage()
                catalog = open_catalog(table_catalog.iceberg_catalog(storage.root))
                raw = topic_tables(topic, lake, table_catalog, pyspark)  # reads the raw hours as its table holds them
                hours = [KafkaHour.from_partition_key(partition) for partition in context.partition_keys]
                for applied in apply_landed_hours(topic, storage, catalog, raw, hours, run_id=context.run.run_id,
                                                  pii_key=pii.key()):
                    context.log.info(_summary_line(applied))
                    yield AssetMaterialization(key, partition=applied.hour, metadata=_metadata(applied, storage, topic))
                    table = catalog.load_table((topic.database, state.table))
                    outcome = current_state_check(topic, storage, table, applied.kafka_hour)
                    yield AssetCheckEvaluation(
                        asset_key=key, check_name=CURRENT_STATE_MATCHES_LANDING, partition=applied.hour,
                        passed=outcome.passed, severity=AssetCheckSeverity.ERROR, description=outcome.description,
                        metadata=outcome.metadata, target_materialization_data=_latest(context, key, applied.hour))

    return apply_hours


def _summary_line(applied: AppliedHour) -> str:
    return (f"{applied.current_table} {applied.hour}: {applied.inserts} inserted, {applied.updates} updated, "
            f"{applied.deletes} deleted, {applied.unchanged} change(s) already older than the table, "
            f"{applied.keyless} without a key; {applied.rows} rows; {applied.files_rewritten} file(s) rewritten "
            f"({applied.bytes_read} bytes) into {applied.files_written} ({applied.bytes_written} bytes)")


def _metadata(applied: AppliedHour, storage, topic: TableSpec) -> dict:
    return {
        "dagster/row_count": applied.rows,
        "inserts": applied.inserts,
        "updates": applied.updates,
        "deletes": applied.deletes,
        "unchanged": applied.unchanged,
        "changes": applied.changes,
        "rows_read": applied.rows_read,
        "keyless": applied.keyless,
        "iceberg_snapshot_id": applied.snapshot_id or 0,
        "files_rewritten": applied.files_rewritten,
        "files_written": applied.files_written,
        "bytes_read": applied.bytes_read,
        "bytes_written": applied.bytes_written,
        "commit_attempts": applied.attempts,
        "duration_s": applied.duration_s,
        "landing_applied": MetadataValue.json({"landed_at": applied.landed_at, "run_id": applied.run_id}),
        "offset_ranges": MetadataValue.json(applied.offsets),
        "table": applied.current_table,
        "location": MetadataValue.path(current_location(storage, topic)),
    }


def _latest(context: AssetExecutionContext, key: AssetKey, hour: str):
    """The hour's materialization just recorded: its check result points at it, so the UI shows it as current."""
    from dagster import AssetRecordsFilter

    records = context.instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[hour]),
                                                      limit=1).records
    return evaluated_against(records[0] if records else None)
