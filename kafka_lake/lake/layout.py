"""The lake layout of SPEC: where data, dead letters and manifests of a topic live.

Every path the platform builds comes from here, relative to `LAKE_ROOT`, with `/` separators.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from kafka_lake.hours import KafkaHour

DEAD_LETTERS_PREFIX = "_dead_letters"
MANIFESTS_PREFIX = "_manifests"
# The topics the archive rule has taken on (`archive.ArchivedTopics`).
ARCHIVED_TOPICS_PATH = "_archive/topics.json"
AUDIT_PREFIX = "_audit"
# What a change topic's current-state table remembers beside it: the hours applied, the deletions each hour made.
CURRENT_STATE_PREFIX = "_current_state"
ERASURE_REQUESTS_PREFIX = "_erasure_requests"
# The embedded Iceberg catalog of a local lake: one SQLite file beside the tables, under a folder no table can take
# (database folders start with a letter).
EMBEDDED_ICEBERG_CATALOG_PATH = "_iceberg/catalog.db"
# The table's partition columns, which live in the path (`schema_version=1/date=2026-11-01/hour=13`), and the type a
# table catalog declares for each.
PARTITION_COLUMN_TYPES = {"schema_version": "int", "date": "string", "hour": "string"}
PARTITION_COLUMNS = tuple(PARTITION_COLUMN_TYPES)
# The prefix of the lake's own columns in every file (`_kafka_offset`, …).
KAFKA_COLUMN_PREFIX = "_kafka_"
_HOUR_IN_PATH = re.compile(r"date=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/")
_DATA_FILE = re.compile(
    r"^(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)\+(?P<offset>\d{19})(?:\.(?P<attempt>[0-9a-f]{12}))?\.parquet$")


def is_lake_column(name: str) -> bool:
    """Whether a column name, compared ignoring case as table catalogs do, is taken by the lake's own columns: a
    partition column or a `_kafka_*` one. No field may land as such a column."""
    return name.lower().startswith(KAFKA_COLUMN_PREFIX) or name.lower() in PARTITION_COLUMNS


def partition_values(schema_version: int, hour: datetime) -> dict[str, str]:
    """The partition columns' values of the rows of a schema version placed in an hour, as their folders spell them."""
    return dict(zip(PARTITION_COLUMNS, (str(schema_version), date_text(hour), f"{hour:%H}")))


def date_text(hour: datetime) -> str:
    """`YYYY-MM-DD` of an hour in UTC, the year in four digits also before 1000 (where `%Y` gives fewer)."""
    return f"{hour.year:04d}-{hour:%m-%d}"


def hour_directory(hour: datetime) -> str:
    """`date=YYYY-MM-DD/hour=HH` of an hour in UTC."""
    return f"date={date_text(hour)}/hour={hour:%H}"


def hour_of_path(path: str) -> datetime | None:
    """The hour of the first `date=…/hour=…/` folder in a path."""
    match = _HOUR_IN_PATH.search(path)
    if not match:
        return None
    return datetime.strptime(f"{match[1]} {match[2]}", "%Y-%m-%d %H").replace(tzinfo=timezone.utc)


def table_prefix(database: str, table: str) -> str:
    return f"{database}/{table}"


def data_directory(database: str, table: str, schema_version: int, hour: datetime) -> str:
    partition = "/".join(f"{column}={value}" for column, value in partition_values(schema_version, hour).items())
    return f"{table_prefix(database, table)}/{partition}"


def dead_letter_prefix(database: str, table: str) -> str:
    return f"{DEAD_LETTERS_PREFIX}/{database}/{table}"


def dead_letter_directory(database: str, table: str, kafka_hour: datetime) -> str:
    return f"{dead_letter_prefix(database, table)}/{hour_directory(kafka_hour)}"


def unrouted_prefix(topic: str) -> str:
    """The dead letters of a routed topic that no table takes, kept once per topic whichever tables land it."""
    return f"{DEAD_LETTERS_PREFIX}/_unrouted/{topic}"


def unrouted_directory(topic: str, kafka_hour: datetime) -> str:
    return f"{unrouted_prefix(topic)}/{hour_directory(kafka_hour)}"


def partition_directory(schema_version: int, hour: datetime) -> str:
    """`schema_version=…/date=…/hour=…`: a table partition, relative to the table's folder."""
    return f"schema_version={schema_version}/{hour_directory(hour)}"


def partition_directory_of_values(values: dict) -> str:
    """The partition folder of a partition's column values (`PARTITION_COLUMNS`, as a table's partition tuple has them)."""
    return "/".join(f"{name}={values[name]}" for name in PARTITION_COLUMNS)


_SCHEMA_VERSION_IN_PATH = re.compile(r"schema_version=(\d+)/date=")


def schema_version_of_path(path: str) -> int | None:
    """The schema version of a path in a partition folder; None for any other path."""
    match = _SCHEMA_VERSION_IN_PATH.search(path)
    return int(match[1]) if match else None


def compacted_directory(database: str, table: str, schema_version: int, hour: datetime, generation: int) -> str:
    """A compaction generation: a hidden folder inside the partition, so readers of the raw folder never see it, and
    the catalog switches a partition to it in one metastore update."""
    return f"{data_directory(database, table, schema_version, hour)}/_compacted_{generation:06d}"


def compaction_manifest_path(database: str, table: str, schema_version: int, hour: datetime) -> str:
    return (f"{manifest_prefix(database, table)}/_compaction/schema_version={schema_version}/"
            f"hour={date_text(hour)}-{hour:%H}.json")


def audit_prefix(database: str, table: str) -> str:
    return f"{AUDIT_PREFIX}/{database}/{table}"


def audit_path(database: str, table: str, stamp: str, action: str, token: str) -> str:
    """One immutable entry: named by when, what, and a token that keeps two entries of one second apart."""
    return f"{audit_prefix(database, table)}/{stamp}-{action}-{token}.json"


def erasure_request_id(path: str) -> str | None:
    """`_erasure_requests/<id>.json` → `<id>`; None for any other file."""
    name = path.rsplit("/", 1)[-1]
    return name[: -len(".json")] if path.startswith(f"{ERASURE_REQUESTS_PREFIX}/") and name.endswith(".json") else None


def current_state_prefix(database: str, table: str) -> str:
    """The records of the current-state table of topic table `database/table`."""
    return f"{CURRENT_STATE_PREFIX}/{database}/{table}"


def applied_hour_directory(database: str, table: str) -> str:
    """One document per Kafka hour applied to the current-state table, named as the hour's manifest."""
    return f"{current_state_prefix(database, table)}/applied"


def deletions_directory(database: str, table: str) -> str:
    """One Parquet file per Kafka hour: the keys its changes deleted, with their offsets, named by the hour."""
    return f"{current_state_prefix(database, table)}/deletions"


def manifest_prefix(database: str, table: str) -> str:
    return f"{MANIFESTS_PREFIX}/{database}/{table}"


MANIFEST_NAME_PREFIX = "hour="


def hour_name(hour: KafkaHour) -> str:
    """`hour=YYYY-MM-DD-HH`: a Kafka hour as its manifest, its attempt journal and the placement index name it."""
    return f"{MANIFEST_NAME_PREFIX}{hour.start:%Y-%m-%d-%H}"


def manifest_name(hour: KafkaHour) -> str:
    return f"{hour_name(hour)}.json"


def manifest_path(database: str, table: str, hour: KafkaHour) -> str:
    return f"{manifest_prefix(database, table)}/{manifest_name(hour)}"


def hour_of_manifest_path(path: str) -> KafkaHour | None:
    """The Kafka hour a manifest, or an entry of the placement index, is named by."""
    match = re.search(r"hour=(\d{4}-\d{2}-\d{2}-\d{2})(\.json)?$", path)
    if not match:
        return None
    return KafkaHour.from_partition_key(match.group(1) + ":00")


# The lake's log of manifest changes (`manifests.ManifestChanges`): one empty object per hour manifest written, in a
# folder per day, named by when. No table can take `_changes` (database folders start with a letter).
MANIFEST_CHANGES_PREFIX = f"{MANIFESTS_PREFIX}/_changes"
_MANIFEST_CHANGE = re.compile(r"^(?P<time>\d{12})\.(?P<database>[a-z0-9_]+)\.(?P<table>[a-z0-9_]+)\."
                              r"hour=(?P<hour>\d{4}-\d{2}-\d{2}-\d{2})$")


def manifest_changes_day(at: datetime) -> str:
    """`date=YYYY-MM-DD`: the folder of the changes of a day (UTC)."""
    return f"date={date_text(at)}"


def manifest_change_name(database: str, table: str, hour: KafkaHour, at: datetime) -> str:
    """`HHMMSSffffff.<database>.<table>.hour=YYYY-MM-DD-HH`: names sort by when, within their day's folder."""
    return f"{at:%H%M%S%f}.{database}.{table}.{hour_name(hour)}"


def manifest_change_path(database: str, table: str, hour: KafkaHour, at: datetime) -> str:
    return f"{MANIFEST_CHANGES_PREFIX}/{manifest_changes_day(at)}/{manifest_change_name(database, table, hour, at)}"


def parse_manifest_change(day: str, name: str) -> tuple[str, str, KafkaHour, datetime] | None:
    """(database, table, hour, when) of a change's name in its day folder; None for any other name."""
    match = _MANIFEST_CHANGE.match(name)
    if not match or not day.startswith("date="):
        return None
    at = datetime.strptime(f"{day[len('date='):]} {match['time']}", "%Y-%m-%d %H%M%S%f").replace(tzinfo=timezone.utc)
    return match["database"], match["table"], KafkaHour.from_partition_key(match["hour"] + ":00"), at


def attempt_journal_directory(database: str, table: str, hour: KafkaHour) -> str:
    """Where the attempts at landing a Kafka hour record the folders they write into, one empty object each."""
    return f"{manifest_prefix(database, table)}/_attempts/{hour_name(hour)}"


def hour_lease_path(database: str, table: str, hour: KafkaHour) -> str:
    """Where a landing of an open hour, or of one landed in increments, holds the hour while it runs."""
    return f"{manifest_prefix(database, table)}/_leases/{hour_name(hour)}.json"


def placement_index_directory(database: str, table: str, folder: str) -> str:
    """Where the Kafka hours whose landings wrote files into `folder` are recorded, one empty object each."""
    return f"{manifest_prefix(database, table)}/_placed/{folder_as_name(folder)}"


def placement_index_path(database: str, table: str, folder: str, hour: KafkaHour) -> str:
    return f"{placement_index_directory(database, table, folder)}/{hour_name(hour)}"


def folder_as_name(folder: str) -> str:
    """A lake folder as one object name: its `/` as `+`, which no folder name of the lake holds (catalog names are
    `[a-z0-9_]`, Kafka topic names `[a-zA-Z0-9._-]`)."""
    return folder.replace("/", "+")


def folder_of_name(name: str) -> str:
    return name.replace("+", "/")


def data_file_name(topic: str, partition: int, first_offset: int, attempt: str = "") -> str:
    """Named by topic, partition and first offset, so a re-run of a slice rewrites the same files; with an `attempt`
    (`new_attempt`), each landing writes files of its own, and a file once committed never changes (Iceberg
    snapshots kept for time travel still name it)."""
    return f"{topic}+{partition}+{first_offset:019d}{'.' + attempt if attempt else ''}.parquet"


def new_attempt() -> str:
    """A landing attempt's token in its file names: 12 random hex digits."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class DataFileName:
    topic: str
    partition: int
    first_offset: int
    attempt: str = ""  # empty: the deterministic name


def parse_data_file_name(path: str) -> DataFileName | None:
    match = _DATA_FILE.match(path.rsplit("/", 1)[-1])
    if not match:
        return None
    return DataFileName(match["topic"], int(match["partition"]), int(match["offset"]), match["attempt"] or "")


def is_landed_file(path: str) -> bool:
    """Whether `path` is a file a landing wrote (named by topic, partition and first offset), not a generation's."""
    return parse_data_file_name(path) is not None
