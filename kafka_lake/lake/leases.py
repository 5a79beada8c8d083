"""An hour held by one landing at a time: an open hour's increments each add to what the one before landed, so two at
once would each write files the other's manifest does not know. Created exclusively in the lake, released at the end."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kafka_lake.hours import KafkaHour
from kafka_lake.lake import layout
from kafka_lake.lake.storage import LakeStorage

# A lease older than this is a landing's that died (killed, its machine gone) and is taken over: an increment lasts
# seconds to a few minutes, and the next one waits at most this long after a crash.
LEASE_EXPIRY = timedelta(minutes=10)


class HourHeld(RuntimeError):
    """Another landing holds the hour: it is landing it now."""


@dataclass
class HourLease:
    storage: LakeStorage
    database: str
    table: str
    hour: KafkaHour

    @property
    def path(self) -> str:
        return layout.hour_lease_path(self.database, self.table, self.hour)

    def acquire(self, holder: str, now: datetime | None = None, expiry: timedelta = LEASE_EXPIRY) -> None:
        """Holds the hour for `holder` (a run id), or raises `HourHeld` naming who holds it; a lease older than
        `expiry` is taken over (its holder died), in a step of its own so two takers cannot both win."""
        now = now or datetime.now(timezone.utc)
        document = json.dumps({"holder": holder, "since": now.isoformat(timespec="seconds")}).encode()
        if self.storage.create_exclusive(self.path, document):
            return
        held = self.storage.read_bytes(self.path)
        if held is not None:
            found = json.loads(held)
            since = datetime.fromisoformat(found["since"])
            if now - since < expiry:
                raise HourHeld(f"{self.database}/{self.table} hour {self.hour} is being landed by run "
                               f"{found['holder'] or '(no run id)'} since {found['since']}; this landing waits for the "
                               f"next (a lease is taken over after {expiry.total_seconds() / 60:.0f} min, when its "
                               f"landing died)")
            # Expired: delete it, then create anew; a second taker's create fails and it waits like any other.
            self.storage.delete(self.path)
        if not self.storage.create_exclusive(self.path, document):
            raise HourHeld(f"{self.database}/{self.table} hour {self.hour}: another landing took over its lease")

    def release(self) -> None:
        self.storage.delete(self.path)
