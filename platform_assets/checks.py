"""Asset checks of raw landing: the invariants, evaluated from the manifests the landing just committed,
and the freshness SLA, evaluated from what has landed."""

from datetime import datetime, timezone

from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, asset_check

from kafka_lake import automation, landing_checks
from kafka_lake.catalog import TopicSpec
from kafka_lake.hours import KafkaHour
from kafka_lake.manifests import HourManifest, ManifestStore
from platform_assets.keys import raw_key

SLICES_CONTIGUOUS = "slices_contiguous"
COUNTS_BALANCE = "counts_balance"
DEAD_LETTER_RATE = "dead_letter_rate"
FRESHNESS = "freshness"


def raw_check_specs(topic: TopicSpec) -> list[AssetCheckSpec]:
    key = raw_key(topic)
    return [
        AssetCheckSpec(SLICES_CONTIGUOUS, asset=key, description="Offsets tile with the landed neighbour hours: no gap, no overlap."),
        AssetCheckSpec(COUNTS_BALANCE, asset=key, description="rows + dead letters + tombstones = records read, per partition."),
        AssetCheckSpec(DEAD_LETTER_RATE, asset=key, description=f"Dead letters under {topic.dead_letter_rate_threshold:.0%} of records."),
    ]


def raw_check_results(topic: TopicSpec, landed: list[HourManifest], manifests: ManifestStore) -> list[AssetCheckResult]:
    """The checks over every hour the run landed (a backfill run lands several)."""
    outcomes: dict[str, dict[str, landing_checks.CheckOutcome]] = {SLICES_CONTIGUOUS: {}, COUNTS_BALANCE: {}, DEAD_LETTER_RATE: {}}
    for manifest in landed:
        hour: KafkaHour = manifest.kafka_hour
        outcomes[SLICES_CONTIGUOUS][manifest.hour] = landing_checks.slices_contiguous(
            manifest, manifests.read(hour.previous()), manifests.read(hour.next()))
        outcomes[COUNTS_BALANCE][manifest.hour] = landing_checks.counts_balance(manifest)
        outcomes[DEAD_LETTER_RATE][manifest.hour] = landing_checks.dead_letter_rate(manifest, topic.dead_letter_rate_threshold)
    return [
        AssetCheckResult(
            asset_key=raw_key(topic),
            check_name=name,
            passed=outcome.passed,
            severity=AssetCheckSeverity.WARN if name == DEAD_LETTER_RATE else AssetCheckSeverity.ERROR,
            description=outcome.description,
            metadata=outcome.metadata,
        )
        for name, by_hour in outcomes.items()
        for outcome in [landing_checks.across_hours(by_hour)]
    ]


def freshness_check(topic: TopicSpec):
    """The freshness SLA as a check a person can run from the UI; the `topic_health` sensor evaluates
    the same rule every few minutes and alerts."""

    @asset_check(asset=raw_key(topic), name=FRESHNESS,
                 description=f"The latest closed hour is landed within {topic.freshness_minutes} min of its end.")
    def fresh(context: AssetCheckExecutionContext) -> AssetCheckResult:
        landed, newest = landed_hours(context.instance, topic)
        result = automation.freshness(topic, lambda h: h.partition_key in landed, datetime.now(timezone.utc), newest)
        return AssetCheckResult(passed=result.passed, severity=AssetCheckSeverity.ERROR, description=result.description,
                                metadata=freshness_metadata(topic, result))

    return fresh


def landed_hours(instance, topic: TopicSpec) -> tuple[set[str], KafkaHour | None]:
    """The raw hours Dagster has seen landed (partition keys), and the newest of them."""
    keys = instance.get_materialized_partitions(raw_key(topic))
    return keys, (KafkaHour.from_partition_key(max(keys)) if keys else None)


def freshness_metadata(topic: TopicSpec, result: automation.Freshness) -> dict:
    return {
        "minutes_late": round(result.minutes_late, 1),
        "missing_hours": result.missing_hours,
        "due_hour": str(result.due_hour),
        "freshness_minutes": topic.freshness_minutes,
    }
