"""An hour held by one landing at a time: an open hour's increments each add to what the one before landed, so two at
once would each write files the other's manifest does not know. Created exclusively in the lake, released at the end."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
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

    def acquire(self, holder: str, now: datetime | None = None, expiry: timedelta = LEASE_EXPIRY,
                alive: Callable[[str], bool] | None = None) -> None:
        """Holds the hour for `holder` (a run id), or raises `HourHeld` naming who holds it. A lease is taken over when
        its holder is dead: its process, on this machine, is gone; `alive` (the orchestrator's word on a holder) says
        it is not; or it is older than `expiry`. The take-over is a step of its own, so two takers cannot both win."""
        now = now or datetime.now(timezone.utc)
        document = json.dumps({"holder": holder, "since": now.isoformat(timespec="seconds"),
                               "host": socket.gethostname(), "pid": os.getpid()}).encode()
        if self.storage.create_exclusive(self.path, document):
            return
        held = self.storage.read_bytes(self.path)
        if held is not None:
            found = json.loads(held)
            since = datetime.fromisoformat(found["since"])
            dead = (_process_gone(found) or (alive is not None and not alive(found["holder"]))
                    or now - since >= expiry)
            if not dead:
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


def _process_gone(lease: dict) -> bool:
    """Whether the lease's holder ran on this machine and its process is gone (killed)."""
    if lease.get("host") != socket.gethostname() or not isinstance(lease.get("pid"), int):
        return False
    try:
        os.kill(lease["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
