"""The topics the catalog's archive rule has taken on: found on the cluster, recorded in the lake, and loaded as raw
tables with the catalog at the next load of the code location (`loader.load_catalog(archived_topics=…)`).
"""


from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from kafka_lake.lake.layout import ARCHIVED_TOPICS_PATH
from kafka_lake.lake.storage import LakeStorage
from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.loader import ARCHIVE_FILE, TopicCatalog, load_catalog, whole_catalog_topics

log = logging.getLogger(__name__)


class ArchivedTopics:
    """`_archive/topics.json` in the lake: each archived topic and when the archive took it on.

    The record is the lake's, not the broker's: the set of archived tables stays the same while the broker is away,
    and a topic once archived keeps its table after Kafka deleted it."""

    def __init__(self, storage: LakeStorage):
        self._storage = storage

    def read(self) -> dict[str, str]:
        """Topic → the time (ISO 8601, UTC) it was archived from."""
        data = self._storage.read_bytes(ARCHIVED_TOPICS_PATH)
        if data is None:
            return {}
        try:
            document = json.loads(data)
            topics = document["topics"]
            if not isinstance(topics, dict) or not all(isinstance(v, str) for v in topics.values()):
                raise ValueError("topics is no mapping of topic names to times")
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{self._storage.uri(ARCHIVED_TOPICS_PATH)} cannot be read: {error}; it lists the archived "
                             f"topics as {{\"topics\": {{name: since}}}}") from None
        return topics

    def names(self) -> list[str]:
        return sorted(self.read())

    def add(self, topics: Iterable[str], now: datetime) -> list[str]:
        """Records the topics not recorded yet, archived from `now`; returns those."""
        recorded = self.read()
        new = sorted(set(topics) - set(recorded))
        if new:
            since = now.isoformat(timespec="seconds")
            recorded.update(dict.fromkeys(new, since))
            self._storage.write_bytes(ARCHIVED_TOPICS_PATH, json.dumps({"topics": recorded}, indent=1, sort_keys=True).encode())
        return new


def topics_to_archive(cluster_topics: Iterable[str], catalog: TopicCatalog) -> list[str]:
    """Topics on the cluster that the archive rule takes and that no table of the whole catalog lands yet; none in a
    slice of the catalog that does not hold the archive's database (that slice archives)."""
    if catalog.archive is None or not catalog.holds_database(catalog.archive.database):
        return []
    taken = whole_catalog_topics(catalog)
    return sorted(t for t in cluster_topics if t not in taken and catalog.archive.matches(t))



def load_platform_catalog(settings: PlatformSettings) -> TopicCatalog:
    """The catalog as the platform serves it (tolerant: broken entries set aside), with the topics its archive rule
    took on, as the lake records them: each a raw table."""
    archived: list[str] = []
    if (Path(settings.schema_catalog_dir) / ARCHIVE_FILE).exists():
        try:
            archived = ArchivedTopics(LakeStorage(settings.lake_root)).names()
        except (OSError, ValueError) as error:  # the lake away: every catalogued table still loads
            log.error("the archived topics could not be read, so their tables are not loaded this time: %s", error)
    catalog = load_catalog(settings.schema_catalog_dir, tolerant=True, table_format=settings.table_format,
                           archived_topics=archived, databases=settings.schema_catalog_databases)
    return with_open_hour(catalog, settings.open_hour_minutes).carrying(settings.run_tables)


def with_open_hour(catalog: TopicCatalog, minutes: int | None) -> TopicCatalog:
    """The catalog with the deployment's `OPEN_HOUR_EVERY_MINUTES` for the tables whose entry does not say (an entry's
    own `open_hour`, or `open_hour: off`, wins)."""
    if minutes is None:
        return catalog
    return replace(catalog, topics=tuple(t.model_copy(update={"open_hour_minutes": minutes}) if t.open_hour is None else t
                                         for t in catalog.topics))
