"""Event times: the time in a record's value that places it, parsed to UTC in the years 0001..9999 from a timestamp,
a plain long counting the topic's unit since the epoch, or RFC 3339 text; one value at a time, or a column at once.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# What a plain long event time counts since the epoch (`time_partitioning.unit`), as units per second.
TIME_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
DEFAULT_TIME_UNIT = "ms"
_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}

# [0001-01-01, 10000-01-01) in seconds since the epoch: the years Python's datetime, Parquet timestamps, Spark and a
# lake path hold.
FIRST_SECOND, END_SECOND = -62_135_596_800, 253_402_300_800
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Where a plain long that is out of range in its unit would be a time of the Unix era in another unit: a hint.
_PLAUSIBLE_S = (0, 4_102_444_800)  # [1970, 2100)
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))?"
)


def parse_event_time(value: Any, unit: str | None = None) -> datetime:
    """An event time as an aware UTC datetime in the years 0001..9999: from fastavro's timestamp, a plain long
    counting `unit`s since the epoch (milliseconds when None) or RFC 3339 text."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int) and not isinstance(value, bool):
        return _epoch_time(value, unit)
    elif isinstance(value, str):
        moment = _parse_rfc3339(value)
    else:
        raise ValueError(f"{type(value).__name__} {value!r} is not a timestamp, an epoch time or RFC 3339 text")
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()} has no time zone (a local timestamp cannot be placed in UTC)")
    return moment.astimezone(timezone.utc)


def _epoch_time(value: int, unit: str | None) -> datetime:
    per_second = TIME_UNITS[unit or DEFAULT_TIME_UNIT]
    if not FIRST_SECOND * per_second <= value < END_SECOND * per_second:
        raise ValueError(f"{value} epoch {_UNIT_NAMES[unit or DEFAULT_TIME_UNIT]} is outside the years 0001..9999"
                         + _unit_hint(value, unit))
    return EPOCH + timedelta(microseconds=value * 1_000_000 // per_second)


def _unit_hint(value: int, unit: str | None) -> str:
    """What the value would be in another unit, where that is a time of the Unix era: the likely mistake."""
    for other, per_second in TIME_UNITS.items():
        if other != (unit or DEFAULT_TIME_UNIT) and _PLAUSIBLE_S[0] * per_second <= value < _PLAUSIBLE_S[1] * per_second:
            told = "set" if unit is None else f"is {unit}; set"
            return (f"; it looks like epoch {_UNIT_NAMES[other]}: time_partitioning.unit {told} `unit: {other}` in "
                    f"topic.yaml")
    return ""


def _parse_rfc3339(text: str) -> datetime:
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"{_quoted(text)} is not an RFC 3339 time like 2026-11-01T13:05:00Z")
    year, month, day, hour, minute, second, fraction, zulu, sign, offset_h, offset_m = match.groups()
    if zulu is None and sign is None:
        raise ValueError(f"{_quoted(text)} has no UTC offset (end it with Z or ±hh:mm)")
    offset = timedelta(0) if zulu else int(sign + "1") * timedelta(hours=int(offset_h), minutes=int(offset_m))
    microsecond = int((fraction or "0")[:6].ljust(6, "0"))  # nanosecond producers: keep microseconds
    try:
        # Leap seconds and impossible dates land here; an offset past the end of year 9999 overflows.
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), microsecond)
        return moment.replace(tzinfo=timezone(offset)).astimezone(timezone.utc)
    except (ValueError, OverflowError) as error:
        raise ValueError(f"{_quoted(text)} is not a real time: {error}") from None


def _quoted(text: str) -> str:
    """Text as an error shows it: in JSON's quotes, as the producers of JSON and Avro alike write text, cut short."""
    return json.dumps(text[:80]) if len(text) <= 80 else f"{json.dumps(text[:80])[:-1]}…\""


# --- the same times, a column at once: (epoch hour per row, rows left to `parse_event_time`) ------------------


def hours_of_timestamps(column: pa.Array) -> np.ndarray:
    """The epoch hour of each value of a UTC timestamp column."""
    ticks = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column) + column.offset)[column.offset:]
    return ticks // (3600 * TIME_UNITS[column.type.unit])


def hours_of_epoch_counts(column: pa.Array, unit: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(epoch hour per row, rows outside the years 0001..9999) of a long column counting `unit`s since the epoch."""
    ticks = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column) + column.offset)[column.offset:]
    per_second = TIME_UNITS[unit or DEFAULT_TIME_UNIT]
    in_years = ticks >= max(FIRST_SECOND * per_second, _INT64_MIN)
    if END_SECOND * per_second <= _INT64_MAX:  # nanoseconds reach only 1677..2262: every value is in range
        in_years &= ticks < END_SECOND * per_second
    return ticks // (3600 * per_second), ~in_years


# The RFC 3339 texts the columns place themselves: ASCII digits, a fixed-width date and time, an optional fraction
# and a zone. Whatever else `_RFC3339` admits (other digits, odd fields) is left to `parse_event_time`, record by record.
_DAY_MINUTES = 24 * 60
_PLAIN_RFC3339 = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"


def hours_of_rfc3339(column: pa.Array, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(epoch hour per row, rows left to `parse_event_time`): the hour `parse_event_time` gives, computed as columns
    for the texts whose fields are all in range, and for years 0002..9998, where no zone offset can take the UTC
    time out of 0001..9999. The rest (an impossible date, a leap second, an offset of 24 hours or more, any other
    form) is left to the record path, which places it or says why it cannot."""
    plain = pc.fill_null(pc.match_substring_regex(column, _PLAIN_RFC3339), False).to_numpy(zero_copy_only=False)
    plain &= present
    texts = column.filter(pa.array(plain))

    year, month, day = _number_at(texts, 0, 4), _number_at(texts, 5, 7), _number_at(texts, 8, 10)
    hour, minute, second = _number_at(texts, 11, 13), _number_at(texts, 14, 16), _number_at(texts, 17, 19)
    utc = pc.match_substring_regex(texts, "[Zz]$").to_numpy(zero_copy_only=False)
    zone = pc.if_else(pa.array(utc), pa.scalar("+00:00"), pc.utf8_slice_codeunits(texts, -6))
    zone_sign = np.where(pc.starts_with(zone, "-").to_numpy(zero_copy_only=False), -1, 1)
    zone_minutes = _number_at(zone, 1, 3) * 60 + _number_at(zone, 4, 6)

    months = ((year - 1970) * 12 + month - 1).astype("datetime64[M]")
    first_day = months.astype("datetime64[D]")
    month_days = ((months + 1).astype("datetime64[D]") - first_day).astype(np.int64)
    in_range = ((year >= 2) & (year <= 9998) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= month_days)
                & (hour <= 23) & (minute <= 59) & (second <= 59) & (zone_minutes < _DAY_MINUTES))
    local_minutes = (first_day.astype(np.int64) + day - 1) * _DAY_MINUTES + hour * 60 + minute
    utc_hours = (local_minutes - zone_sign * zone_minutes) // 60

    hours = np.zeros(len(column), dtype=np.int64)
    placed = np.flatnonzero(plain)[in_range]
    hours[placed] = utc_hours[in_range]
    unplaced = np.ones(len(column), dtype=bool)
    unplaced[placed] = False
    return hours, unplaced


def _number_at(texts: pa.Array, start: int, stop: int) -> np.ndarray:
    """The digits at [start, stop) of each text, as a number."""
    return pc.cast(pc.utf8_slice_codeunits(texts, start, stop), pa.int64()).to_numpy()
