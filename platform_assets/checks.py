"""Asset checks of raw landing, evaluated from the manifests the landing just committed."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec

from kafka_lake import landing_checks
from kafka_lake.catalog import TopicSpec
from kafka_lake.hours import KafkaHour
from kafka_lake.manifests import HourManifest, ManifestStore
from platform_assets.keys import raw_key

SLICES_CONTIGUOUS = "slices_contiguous"
COUNTS_BALANCE = "counts_balance"
DEAD_LETTER_RATE = "dead_letter_rate"


def raw_check_specs(topic: TopicSpec) -> list[AssetCheckSpec]:
    key = raw_key(topic)
    return [
        AssetCheckSpec(SLICES_CONTIGUOUS, asset=key, description="Offsets tile with the landed neighbour hours: no gap, no overlap."),
        AssetCheckSpec(COUNTS_BALANCE, asset=key, description="rows + dead letters + tombstones = records read, per partition."),
        AssetCheckSpec(DEAD_LETTER_RATE, asset=key, description=f"Dead letters under {topic.dead_letter_rate_threshold:.0%} of records."),
    ]


def raw_check_results(topic: TopicSpec, manifest: HourManifest, manifests: ManifestStore) -> list[AssetCheckResult]:
    hour: KafkaHour = manifest.kafka_hour
    outcomes = {
        SLICES_CONTIGUOUS: landing_checks.slices_contiguous(manifest, manifests.read(hour.previous()), manifests.read(hour.next())),
        COUNTS_BALANCE: landing_checks.counts_balance(manifest),
        DEAD_LETTER_RATE: landing_checks.dead_letter_rate(manifest, topic.dead_letter_rate_threshold),
    }
    return [
        AssetCheckResult(
            asset_key=raw_key(topic),
            check_name=name,
            passed=outcome.passed,
            severity=AssetCheckSeverity.WARN if name == DEAD_LETTER_RATE else AssetCheckSeverity.ERROR,
            description=outcome.description,
            metadata=outcome.metadata,
        )
        for name, outcome in outcomes.items()
    ]
