"""The invariants of a landed hour, evaluated from manifests: each returns a `CheckOutcome`.

Asset checks in the Dagster layer and the tests call these; they can fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka_lake.manifests import HourManifest


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict = field(default_factory=dict)


def slices_contiguous(manifest: HourManifest, previous: HourManifest | None, following: HourManifest | None) -> CheckOutcome:
    """Each partition's slice starts where the previous hour's ended and ends where the next one's starts."""
    problems = []
    for neighbour, mine, theirs, label in (
        (previous, "start", "end", "previous"),
        (following, "end", "start", "next"),
    ):
        if neighbour is None:
            continue
        for landed in manifest.partitions:
            other = neighbour.partition(landed.partition)
            if other is None:
                problems.append(f"partition {landed.partition} is missing from the {label} hour {neighbour.hour}")
            elif getattr(landed, mine) != getattr(other, theirs):
                problems.append(
                    f"partition {landed.partition}: {mine} {getattr(landed, mine)} ≠ {label} hour "
                    f"{neighbour.hour}'s {theirs} {getattr(other, theirs)}"
                )
    checked = [n.hour for n in (previous, following) if n is not None]
    if problems:
        return CheckOutcome(False, "; ".join(problems), {"neighbours": ", ".join(checked)})
    described = f"tiles with {', '.join(checked)}" if checked else "no landed neighbour hour to compare with"
    return CheckOutcome(True, described, {"neighbours": ", ".join(checked) or "none"})


def counts_balance(manifest: HourManifest) -> CheckOutcome:
    """rows + dead letters + tombstones = records read, and no more records than offsets, per partition."""
    problems, gaps = [], 0
    for landed in manifest.partitions:
        accounted = landed.rows + landed.dead_letters + landed.tombstones
        if accounted != landed.records:
            problems.append(
                f"partition {landed.partition} [{landed.start}, {landed.end}): {landed.rows} rows + "
                f"{landed.dead_letters} dead letters + {landed.tombstones} tombstones ≠ {landed.records} records read"
            )
        if landed.records > landed.offsets:
            problems.append(f"partition {landed.partition}: {landed.records} records read from {landed.offsets} offsets")
        gaps += landed.offsets - landed.records
    totals = manifest.totals()
    metadata = {key: totals[key] for key in ("offsets", "records", "rows", "dead_letters", "tombstones")}
    metadata["offset_gaps"] = gaps  # transaction markers or compacted-away offsets, not records
    if problems:
        return CheckOutcome(False, "; ".join(problems), metadata)
    return CheckOutcome(True, f"{totals['records']} records = rows + dead letters + tombstones", metadata)


def dead_letter_rate(manifest: HourManifest, threshold: float) -> CheckOutcome:
    totals = manifest.totals()
    read = totals["records"] - totals["tombstones"]
    rate = totals["dead_letters"] / read if read else 0.0
    metadata = {"dead_letters": totals["dead_letters"], "rate": round(rate, 6), "threshold": threshold}
    causes = ", ".join(f"{cause}: {count}" for cause, count in manifest.dead_letter_causes.items())
    if rate > threshold:
        return CheckOutcome(False, f"dead-letter rate {rate:.2%} is above {threshold:.2%} ({causes})", metadata)
    return CheckOutcome(True, f"dead-letter rate {rate:.2%} (threshold {threshold:.2%})", metadata)
