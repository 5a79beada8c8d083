"""The topic catalog: `schema_catalog/<database>/<table>/topic.yaml` plus its Avro schemas.

Loads and validates every topic up front so a bad entry fails at load, naming the file.
"""


from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from kafka_lake.decoding.formats import PAYLOAD_FORMATS
from kafka_lake.decoding.payload_format import LoadedSchema, PayloadFormat
from kafka_lake.lake.layout import KAFKA_COLUMN_PREFIX, PARTITION_COLUMNS, is_lake_column
from kafka_lake.schemas.avro_types import (
    field_type_at,
    is_time_type,
    json_field_at,
    logical_type,
    named_types,
    record_full_name,
    resolve,
    type_name,
    unwrap_nullable,
)
from kafka_lake.schemas.column_lineage import LineageError, column_paths, lineage
from kafka_lake.schemas.connect_types import TIME_UNIT_OF, connect_name
from kafka_lake.schemas.landed_schema import LandedSchema, LandedSchemaError
from kafka_lake.settings import DEFAULT_TABLE_FORMAT
from kafka_lake.table_spec import (
    RECORD_NAME,
    CurrentState,
    FieldColumns,
    OpenHourKeys,
    Route,
    RoutedSibling,
    SchemaFileError,
    SchemaVersion,
    TableSpec,
    is_table_name,
    shown,
)
from kafka_lake.tables.formats import TABLE_FORMATS, table_format_type
from kafka_lake.topics.topic_yaml import (
    ArchiveYaml,
    CurrentStateYaml,
    RouteYaml,
    SchemaVersionYaml,
    TimePartitioningYaml,
    TopicYaml,
    TopicYamlError,
    archived_topic_yaml,
    read_archive_yaml,
    read_topic_yaml,
)

# A catalog file larger than this is no hand-written topic entry or schema; refused before parsing.
MAX_CATALOG_FILE_BYTES = 1024 * 1024
# The catalog's archive rule: new topics matching its pattern land as raw tables without a folder of their own.
ARCHIVE_FILE = "_archive.yaml"


class CatalogError(ValueError):
    """A topic catalog entry is wrong; the message names the file and the problem."""


@dataclass(frozen=True)
class BrokenEntry:
    """A catalog entry that failed to load: its `topic.yaml` (or `_archive.yaml`) and why. Its table is not landed."""

    path: str
    error: CatalogError
    # The table it would have been; by default its folder's, which an archived topic has not.
    table_database: str | None = None
    table_name: str | None = None
    topic: str | None = None  # the Kafka topic it names, where its file says one: rejected, not missing

    @property
    def database(self) -> str:
        return self.table_database or Path(self.path).parent.parent.name

    @property
    def table(self) -> str:
        return self.table_name or Path(self.path).parent.name


@dataclass(frozen=True)
class TopicCatalog:
    topics: tuple[TableSpec, ...]
    directory: str = ""
    broken: tuple[BrokenEntry, ...] = ()  # only from `load_catalog(..., tolerant=True)`

    def by_name(self, database: str, table: str) -> TableSpec:
        for topic in self.topics:
            if topic.database == database and topic.table == table:
                return topic
        raise KeyError(f"no topic {database}/{table} in the catalog at {self.directory}")

    archive: ArchiveRule | None = None  # from `_archive.yaml`, if the catalog has one
    # The slice of the catalog loaded (database name patterns, `SCHEMA_CATALOG_DATABASES`); empty: the whole catalog.
    databases: tuple[str, ...] = ()

    def holds_database(self, database: str) -> bool:
        return in_slice(database, self.databases)

    def by_topic(self, topic_name: str) -> TableSpec:
        """The one table of a Kafka topic; a topic landed into several tables has `tables_of`."""
        tables = self.tables_of(topic_name)
        if len(tables) != 1:
            names = ", ".join(t.name for t in tables)
            raise KeyError(f"Kafka topic {topic_name!r} is landed by {len(tables)} tables in {self.directory}"
                           + (f" ({names})" if names else ""))
        return tables[0]

    def tables_of(self, topic_name: str) -> tuple[TableSpec, ...]:
        """Every table landing the Kafka topic, ordered by database and table."""
        return tuple(sorted((t for t in self.topics if t.topic == topic_name), key=lambda t: t.name))

    @property
    def kafka_topics(self) -> tuple[str, ...]:
        return tuple(sorted({t.topic for t in self.topics}))

    def carrying(self, tables: Iterable[str]) -> TopicCatalog:
        """The catalog a run's process needs: every table of the Kafka topics of `tables` (`database/table`; one asset
        lands a topic's tables together) and the rejected entries; no `tables`: the whole catalog."""
        names = set(tables)
        if not names:
            return self
        kafka_topics = {t.topic for t in self.topics if t.name in names}
        return replace(self, topics=tuple(t for t in self.topics if t.topic in kafka_topics))


def in_slice(database: str, databases: tuple[str, ...]) -> bool:
    """Whether a slice of the catalog (database names or shell-style patterns, `shop,pay*`) holds the database."""
    return not databases or any(fnmatch.fnmatchcase(database, pattern) for pattern in databases)


def kafka_topics_in(directory: str | Path) -> set[str]:
    """The Kafka topics every folder of the catalog names, read from each `topic.yaml` without validating it: what a
    slice of the catalog needs to know of the others (the topics they land)."""
    names = set()
    for path in Path(directory).glob("*/*/topic.yaml"):
        try:
            entry = yaml.load(path.read_text(), Loader=_YAML_LOADER)
        except (OSError, yaml.YAMLError):
            continue  # the slice that holds it reports it
        if isinstance(entry, dict) and isinstance(entry.get("topic"), str):
            names.add(entry["topic"])
    return names


def whole_catalog_topics(catalog: TopicCatalog) -> set[str]:
    """The Kafka topics the whole catalog lands: a slice's own (archived ones included) and, where `catalog` is a
    slice, those the other slices' folders name."""
    return set(catalog.kafka_topics) | (kafka_topics_in(catalog.directory) if catalog.databases else set())


def load_catalog(directory: str | Path, tolerant: bool = False, table_format: str = "hive",
                 archived_topics: Iterable[str] = (), databases: tuple[str, ...] = ()) -> TopicCatalog:
    """Loads every `<database>/<table>/topic.yaml` under `directory`, validated, and the archive rule of
    `_archive.yaml` if there is one, which makes a raw table of each of `archived_topics` (the topics the archive has
    taken on, `archive.ArchivedTopics`) that no folder names. `table_format` is the deployment's (`TABLE_FORMAT`),
    for the topics whose entry names none.

    `databases` loads a slice of the catalog (a code location of several): the folders of those databases, and the
    archive's tables if its database is one of them. Entries are checked against each other within the slice.

    Strict (the default), the first broken entry raises its `CatalogError`. Tolerant (a code location serving
    many topics), each broken entry is set aside in `broken` with its error and every other topic loads; two
    entries that clash (their routes overlap, they land one topic twice alike, they give one registry id two
    schemas) are both set aside.
    """
    root = Path(directory)
    if not root.is_dir():
        raise CatalogError(f"{root}: the topic catalog directory does not exist (set SCHEMA_CATALOG_DIR)")
    paths = sorted(path for path in root.glob("*/*/topic.yaml") if in_slice(path.parent.parent.name, databases))
    archive_path = root / ARCHIVE_FILE
    if not tolerant:
        topics = [load_topic(path, table_format) for path in paths]
        archive = load_archive_rule(archive_path) if archive_path.exists() else None
        if archive is not None and in_slice(archive.database, databases):
            archived, refused = archive.tables_for(archived_topics, topics)
            if refused:
                raise refused[0].error
            topics += archived
        _check_clashes(topics)
        return TopicCatalog(topics=_with_routed_siblings(topics), directory=str(root), archive=archive,
                            databases=databases)
    topics, broken = [], []
    for path in paths:
        try:
            topics.append(load_topic(path, table_format))
        except CatalogError as error:
            broken.append(BrokenEntry(str(path), error, topic=declared_topic(path)))
        except Exception as error:  # a loader bug must cost only its own entry too
            broken.append(BrokenEntry(str(path), CatalogError(f"{path}: {type(error).__name__}: {error}"),
                                      topic=declared_topic(path)))
    archive = None
    if archive_path.exists():
        try:
            archive = load_archive_rule(archive_path)
        except CatalogError as error:
            broken.append(BrokenEntry(str(archive_path), error, "_archive", "rule"))
    if archive is not None and in_slice(archive.database, databases):
        archived, refused = archive.tables_for(archived_topics, topics)
        topics += archived
        broken += refused
    broken += [BrokenEntry(spec.source_file, error, spec.database, spec.table, spec.topic)
               for spec, error in _check_clashes(topics, tolerant=True)]
    rejected = {(b.path, b.database, b.table) for b in broken}
    kept = tuple(spec for spec in topics if (spec.source_file, spec.database, spec.table) not in rejected)
    return TopicCatalog(topics=_with_routed_siblings(kept), directory=str(root),
                        broken=tuple(sorted(broken, key=lambda b: (b.path, b.table))), archive=archive,
                        databases=databases)


def _with_routed_siblings(topics: Iterable[TableSpec]) -> tuple[TableSpec, ...]:
    """Each routed table told the other routed tables of its topic; the first by name lands the unrouted records."""
    topics = tuple(topics)
    routed: dict[str, list[TableSpec]] = {}
    for spec in sorted(topics, key=lambda t: t.name):
        if spec.route is not None:
            routed.setdefault(spec.topic, []).append(spec)

    def told(spec: TableSpec) -> TableSpec:
        group = routed.get(spec.topic, [])
        if spec.route is None or len(group) < 2:
            return spec
        siblings = tuple(RoutedSibling(other.name, other_route, frozenset(
            v.registry_id for v in other.schema_versions if v.registry_id is not None))
            for other in group if other is not spec and (other_route := other.route) is not None)
        return spec.model_copy(update={"routed_siblings": siblings, "lands_unrouted": group[0] is spec})

    return tuple(told(spec) for spec in topics)


def _check_clashes(topics: list[TableSpec], tolerant: bool = False) -> list[tuple[TableSpec, CatalogError]]:
    """Raises on the first entry that clashes with an earlier one. Tolerant, returns both entries of every clash:
    which of the two is right only a person can say.

    Tables of one Kafka topic clash when a record could land twice in the same way: two routed tables whose routes
    could both take it (another field, a shared value), or two tables without a route in the same placement. One
    registry id clashes when it stands for two schemas, or twice in one table."""
    accepted: list[TableSpec] = []
    ids: dict[int, tuple[TableSpec, int, str]] = {}
    clashing = []
    for spec in topics:
        clash = next(((other, *problems) for other in accepted if other.topic == spec.topic
                      for problems in [_tables_clash(other, spec)] if problems), None)
        clash = clash or next(((other, *problems) for other in accepted
                               for problems in [_table_names_clash(other, spec)] if problems), None)
        new_ids = dict(ids)
        for version in spec.schema_versions:
            if clash is not None or version.registry_id is None:
                continue
            form = PAYLOAD_FORMATS[spec.payload_format].registered_form(version)
            if version.registry_id in new_ids:
                earlier, earlier_version, earlier_form = new_ids[version.registry_id]
                if earlier is spec or earlier_form != form:
                    where = spec.source_file if earlier is spec else earlier.source_file
                    other = "" if earlier is spec else " with another schema"
                    clash = (earlier, f"registry_id {version.registry_id} (version {version.version}) is already used by "
                                      f"{where} version {earlier_version}{other}",
                             f"registry_id {version.registry_id} (version {earlier_version}) is also used by "
                             f"{spec.source_file}{other}")
            new_ids[version.registry_id] = (spec, version.version, form)
        if clash is not None:
            earlier, problem, their_problem = clash
            error = CatalogError(f"{spec.source_file}: {problem}")
            if not tolerant:
                raise error
            clashing.append((spec, error))
            if earlier is not spec:
                clashing.append((earlier, CatalogError(f"{earlier.source_file}: {their_problem}")))
            continue
        accepted.append(spec)
        ids = new_ids
    return clashing


def _table_names(spec: TableSpec) -> dict[str, str]:
    """The table names an entry takes in its database: its own, and its current-state table's."""
    names = {spec.table: "its table"}
    if spec.current_state is not None:
        names[spec.current_state.table] = "its current_state.table"
    return names


def _table_names_clash(earlier: TableSpec, spec: TableSpec) -> tuple[str, str] | None:
    """Two entries taking one table name of a database (a current-state table named like another table)."""
    if spec.database != earlier.database or (spec.current_state is None and earlier.current_state is None):
        return None
    mine, theirs = _table_names(spec), _table_names(earlier)
    shared = sorted(mine.keys() & theirs.keys())
    if not shared:
        return None
    name = f"{spec.database}.{shared[0]}"
    advice = "give current_state.table another name"
    return (f"table {name} ({mine[shared[0]]}) is already {theirs[shared[0]]} of {earlier.source_file}; {advice}",
            f"table {name} ({theirs[shared[0]]}) is also {mine[shared[0]]} of {spec.source_file}; {advice}")


def _tables_clash(earlier: TableSpec, spec: TableSpec) -> tuple[str, str] | None:
    """(the problem as `spec`'s file says it, as `earlier`'s says it) of two tables of one topic, or None."""
    topic = f"Kafka topic {spec.topic!r}"
    if earlier.route is None and spec.route is None and earlier.placement == spec.placement:
        how = f"format {spec.payload_format}, placed by {spec.time_source}" + (
            f" field {'.'.join(spec.time_field)}" if spec.time_field else "")
        advice = "give one a route, or another time_partitioning or format"
        return (f"{topic} is already landed by {earlier.source_file} in the same way ({how}); {advice}",
                f"{topic} is also landed by {spec.source_file} in the same way ({how}); {advice}")
    if earlier.route is None or spec.route is None:
        # A copy placed otherwise (valve's archive by event time and warehouse by Kafka time), or a copy of every record
        # beside a routed table; but a topic's records are in one format: two tables decoding them in two formats are
        # one table too many (a new entry naming a topic another format already lands), a raw copy of the bytes aside.
        typed = [table for table in (earlier, spec) if PAYLOAD_FORMATS[table.payload_format].has_schemas]
        if len(typed) == 2 and earlier.payload_format != spec.payload_format:
            advice = "a topic's records have one format; check the topic name, or keep the bytes with format: raw"
            return (f"{topic} is already read as {earlier.payload_format} by {earlier.source_file}, this entry reads it "
                    f"as {spec.payload_format}; {advice}",
                    f"{topic} is also read as {spec.payload_format} by {spec.source_file}, this entry reads it as "
                    f"{earlier.payload_format}; {advice}")
        return None
    if earlier.payload_format != spec.payload_format:
        return (f"the routed tables of {topic} must read it in one format: this one is {spec.payload_format}, "
                f"{earlier.source_file} is {earlier.payload_format}",
                f"the routed tables of {topic} must read it in one format: this one is {earlier.payload_format}, "
                f"{spec.source_file} is {spec.payload_format}")
    if earlier.route.field != spec.route.field:
        return (f"the routes of {topic} must all name one field, or a record could match two tables: this one routes "
                f"by {spec.route.field_text}, {earlier.source_file} by {earlier.route.field_text}",
                f"the routes of {topic} must all name one field, or a record could match two tables: this one routes "
                f"by {earlier.route.field_text}, {spec.source_file} by {spec.route.field_text}")
    shared = [value for value in spec.route.values if earlier.route.takes(value)]
    if shared:
        listed = ", ".join(map(repr, shared))
        return (f"route {spec.route} of {topic} overlaps route {earlier.route} of {earlier.source_file} "
                f"({spec.route.field_text} {listed} would land in both tables)",
                f"route {earlier.route} of {topic} overlaps route {spec.route} of {spec.source_file} "
                f"({spec.route.field_text} {listed} would land in both tables)")
    return None


@dataclass(frozen=True)
class ArchiveRule:
    """`_archive.yaml`: topics matching `pattern` that no folder names are archived as raw tables of `database`, with
    the keys of the rule's file."""

    rule: ArchiveYaml
    source_file: str

    @property
    def database(self) -> str:
        return self.rule.database

    def matches(self, topic: str) -> bool:
        """Whether the rule archives the topic; Kafka's and tools' internal topics never."""
        return not is_internal_topic(topic) and re.fullmatch(self.rule.pattern, topic) is not None

    def tables_for(self, archived_topics: Iterable[str],
                   catalogued: list[TableSpec]) -> tuple[list[TableSpec], list[BrokenEntry]]:
        """The raw tables of the archived topics that still match and that no folder names. Their table names come
        from the topic's; a name another table has is refused (a broken entry), naming both."""
        named = {t.topic for t in catalogued}
        taken = {(t.database, t.table): t.source_file for t in catalogued}
        tables, refused = [], []
        for topic in sorted(set(archived_topics)):
            if topic in named or not self.matches(topic):
                continue
            table = archived_table_name(topic)
            if (self.database, table) in taken:
                refused.append(BrokenEntry(self.source_file, CatalogError(
                    f"{self.source_file}: archived topic {topic!r} would be table {self.database}/{table}, which "
                    f"{taken[self.database, table]} already is; give the topic a folder of its own"
                ), self.database, table, topic))
                continue
            entry = read_topic_yaml(archived_topic_yaml(self.rule, topic))
            spec = _topic_spec(entry, self.database, table, Path(self.source_file).parent, self.source_file, archived=True)
            taken[self.database, table] = f"the archive's table of topic {topic!r}"
            tables.append(spec)
        return tables, refused


def is_internal_topic(topic: str) -> bool:
    """Kafka's own topics and those of Kafka Connect and other tools, which the platform never lands by itself."""
    return topic.startswith(("_", "connect-", "__"))


def archived_table_name(topic: str) -> str:
    """An archived topic's table: its name in lowercase, every other character than a letter, digit or underscore an
    underscore (`Audit.Log-v2` → `audit_log_v2`), led by `t_` where it would not start with a letter."""
    name = re.sub(r"[^a-z0-9_]", "_", topic.lower())
    return (name if name[:1].isalpha() else f"t_{name}")[:128]


def load_archive_rule(path: str | Path) -> ArchiveRule:
    path = Path(path)
    where = str(path)
    try:
        rule = read_archive_yaml(_read_yaml_mapping(path, where))
    except TopicYamlError as error:
        raise CatalogError(f"{where}: {error}") from None
    return ArchiveRule(rule, where)


def load_topic(path: str | Path, table_format: str = "hive") -> TableSpec:
    """One catalog entry, validated; `table_format`: the deployment's, unless the entry names its own."""
    path = Path(path)
    where = str(path)
    document = _read_yaml_mapping(path, where)
    database, table = path.parent.parent.name, path.parent.name
    for label, name in (("database folder", database), ("table folder", table)):
        if not is_table_name(name):
            raise CatalogError(
                f"{where}: {label} {name!r} must be lowercase letters, digits and underscores, starting with a letter"
            )
    try:
        entry = read_topic_yaml(document)
    except TopicYamlError as error:
        raise CatalogError(f"{where}: {error}") from None
    return _topic_spec(entry, database, table, path.parent, where, table_format=table_format)


# libyaml's loader where PyYAML was built with it: parsing is most of a large catalog's load in pure Python.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
def declared_topic(path: Path) -> str | None:
    """The Kafka topic a catalog entry that failed to load names, if its file still reads as YAML and says one."""
    try:
        topic = _read_yaml_mapping(path, str(path)).get("topic")
    except CatalogError:
        return None
    return topic if isinstance(topic, str) else None


def _read_yaml_mapping(path: Path, where: str) -> dict:
    text = _read_catalog_file(path, where)
    try:
        document = yaml.load(text, Loader=_YAML_LOADER)
    # Beyond YAMLError: a date like 2026-13-45 raises ValueError while being built, deep nesting RecursionError.
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as error:
        raise CatalogError(f"{where}: not valid YAML: {str(error)[:500]}") from None
    if not isinstance(document, dict):
        raise CatalogError(f"{where}: expected a mapping of keys, got {type(document).__name__}")
    return document


def _topic_spec(entry: TopicYaml, database: str, table: str, folder: Path, where: str, archived: bool = False,
                table_format: str = "hive") -> TableSpec:
    """The entry checked against its schema files (what the document alone cannot say), as a `TableSpec`;
    `table_format`: the deployment's, unless the entry names its own."""
    payloads = PAYLOAD_FORMATS[entry.payload_format]
    versions = _load_versions(payloads, entry.schema_versions, folder, where)
    _check_recursion(entry.recursive_records, versions, where)
    field_columns = _field_columns(versions, where)
    rename = _rename_by_column(entry.rename, versions, field_columns, where)
    time_field = _check_time_partitioning(entry.time_partitioning, versions, where)
    time_unit = entry.time_partitioning.unit if entry.time_partitioning is not None else None
    if time_field is not None and time_unit is None:  # Debezium's NanoTimestamp says its unit itself
        time_unit = TIME_UNIT_OF.get(connect_name(unwrap_nullable(field_type_at(versions[-1].schema, time_field))))
    pii_fields = tuple(tuple(p.split(".")) for p in entry.pii_fields)
    for pii in pii_fields:
        _check_field_path(versions, pii, f"pii_fields entry {'.'.join(pii)!r}", where, json_allowed=True)
    pii_fields = _in_every_name(pii_fields, field_columns)
    for subject in entry.subject_fields:
        _check_field_path(versions, subject, f"subject_field {'.'.join(subject)!r}", where)
    route = _check_route(entry.route, versions, where) if entry.route is not None else None
    key_schema = _load_key_schema(payloads, entry.key_schema, folder, where) if entry.key_schema is not None else None
    current_state = (_check_current_state(entry.current_state, table, versions, entry.subject_fields, where)
                     if entry.current_state is not None else None)

    spec = TableSpec.model_construct(
        # A current-state table needs every tombstone as a row: it deletes its key.
        **(entry.keys_by_name() | {"keep_tombstones": entry.keep_tombstones or current_state is not None}),
        payload_format=entry.payload_format,
        database=database,
        table=table,
        source_file=where,
        table_format=_table_format_of(entry, table_format, where),
        time_source=entry.time_source,
        time_field=time_field,
        time_unit=time_unit,
        schema_versions=tuple(versions),
        pii_fields=pii_fields,
        allowed_lateness_hours=entry.lateness_hours,
        open_hour_minutes=entry.open_hour.every_minutes if isinstance(entry.open_hour, OpenHourKeys) else None,
        rename=tuple(sorted(rename.items())),
        route=route,
        key_schema=key_schema,
        archived=archived,
        field_columns=field_columns,
        current_state=current_state,
    )
    _check_landed_schema(spec)
    problem = table_format_type(spec).schema_problem(spec)
    if problem is None and current_state is not None:
        from kafka_lake.current.state_table import current_state_problem  # pyiceberg, for change topics only

        problem = current_state_problem(spec)
    if problem:
        raise CatalogError(problem)
    return spec


def _field_columns(versions: list[SchemaVersion], where: str) -> FieldColumns:
    """Where each version's fields renamed with an Avro alias land (`TableSpec.field_columns`)."""
    try:
        root = lineage([version.schema for version in versions])
    except LineageError as error:
        version = versions[error.version]
        raise CatalogError(f"{where}: version {version.version} ({version.file}): {error}") from None
    return tuple((version.version, path, landed) for index, version in enumerate(versions)
                 for path, landed in sorted(column_paths(root, index, version.schema).items()))


def _in_every_name(paths: tuple[tuple[str, ...], ...], field_columns: FieldColumns) -> tuple[tuple[str, ...], ...]:
    """Field paths (of `pii_fields`) with every other name their fields have in some version: a field renamed with an
    alias is pseudonymized as the field it renamed, whichever name the catalog gives."""
    columns = {next((landed for _, path, landed in field_columns if path == given), given) for given in paths}
    more = sorted({path for _, path, landed in field_columns if landed in columns} | columns)
    return paths + tuple(path for path in more if path not in paths)


def _rename_by_column(rename: dict[str, str], versions: list[SchemaVersion], field_columns: FieldColumns,
                      where: str) -> dict[str, str]:
    """`rename` (a top-level Avro field, of any version → its column name) as column (its first name) → column name,
    checked against every version's columns."""
    def column_of(number: int, name: str) -> str:
        return next((landed[0] for version, path, landed in field_columns if version == number and path == (name,)), name)

    by_column: dict[str, tuple[str, str]] = {}  # column → (the name it lands under, the key that said so)
    for field_name, name in rename.items():
        landed = {column_of(v.version, field_name) for v in versions if field_name in _top_level_names(v)}
        if not landed:
            raise CatalogError(f"{where}: rename.{field_name} names no top-level field of any schema version")
        for column in landed:
            if column in by_column and by_column[column][0] != name:
                raise CatalogError(f"{where}: rename.{field_name} and rename.{by_column[column][1]} name the same column "
                                   f"{column!r} (a field and the field it renamed with an alias) with different names")
            by_column[column] = (name, field_name)
    names = {column: name for column, (name, _) in by_column.items()}

    def labelled(version: SchemaVersion, field_name: str) -> tuple[str, str]:
        column = column_of(version.version, field_name)
        label = f"field {field_name!r}" + (f" (the field {column!r} renamed by its alias)" if column != field_name else "")
        if column in by_column:
            label += f" (renamed to {names[column]!r} by rename.{by_column[column][1]})"
        return names.get(column, column), label

    _check_columns(versions, labelled, where)
    return names


def _table_format_of(entry: TopicYaml, deployment: str, where: str) -> str:
    """The entry's own `table_format`, else the deployment's; a raw archive's table in the default format where the
    chosen one cannot hold a table without schema versions (an Iceberg schema is folded from them)."""
    chosen = entry.table_format or deployment
    if not PAYLOAD_FORMATS[entry.payload_format].has_schemas and not TABLE_FORMATS[chosen]().holds_raw_values:
        if entry.table_format is not None:
            raise CatalogError(f"{where}: table_format {chosen}: a raw archive (format: raw) has no schema versions to "
                               f"make a {chosen} table of; leave table_format out to land it in the {DEFAULT_TABLE_FORMAT} table format")
        return DEFAULT_TABLE_FORMAT
    return chosen


def _check_landed_schema(spec: TableSpec) -> None:
    """Every version's fields must share the table's columns (`landed_schema`)."""
    if not PAYLOAD_FORMATS[spec.payload_format].has_schemas:
        return
    try:
        LandedSchema(spec)
    except LandedSchemaError as error:
        raise CatalogError(f"{spec.source_file}: {error}") from None


def _check_route(route: RouteYaml, versions: list[SchemaVersion], where: str) -> Route:
    """A route's field must hold the same kind of value (text, number, true/false) as its values in every version; a
    route by record name must take every version's record."""
    if route.field == RECORD_NAME:
        for version in versions:
            name = record_full_name(version.schema)
            if name not in route.values:
                raise CatalogError(
                    f"{where}: version {version.version} ({version.file}) is record {name}, which route "
                    f"{RECORD_NAME} does not take ({', '.join(map(str, route.values))}); a table takes the records it "
                    f"has schemas for"
                )
        return Route(None, route.values, route.in_ is None)
    path = _matched_field(route.field, route.values, versions, where, "route.field", "route value",
                          "every record must say where it goes")
    return Route(path, route.values, route.in_ is None)


def _matched_field(field: str, values: tuple, versions: list[SchemaVersion], where: str, label: str, value_label: str,
                   why_every_version: str) -> tuple[str, ...]:
    """The path of a field whose value is matched against `values` (a route's, `delete_when`'s): a field of every
    version holding the same kind of value (text, number, true/false) as the values."""
    path = tuple(field.split("."))
    _check_field_path(versions, path, f"{label} {field!r}", where)
    for version in versions:
        avro_type = field_type_at(version.schema, path)
        if avro_type is None:
            raise CatalogError(f"{where}: {label} {field!r} is not a field of version {version.version} "
                               f"({version.file}): {why_every_version}")
        kind = _ROUTE_KINDS.get(type_name(unwrap_nullable(avro_type)))
        wrong = [v for v in values if kind is None or type(v) is not kind]
        if wrong:
            what = {str: "text", int: "whole numbers", bool: "true or false"}.get(kind, "no value a route can match") if kind else "no value a route can match"
            raise CatalogError(
                f"{where}: {label} {field!r} is {_describe_route_type(avro_type)} in version {version.version} "
                f"({version.file}), which holds {what}; {value_label} {shown(wrong[0])} could never match"
            )
    return path


def _check_current_state(block: CurrentStateYaml, table: str, versions: list[SchemaVersion],
                         subject_fields: tuple[tuple[str, ...], ...], where: str) -> CurrentState:
    """`current_state` against the schema files: a table name of its own, a `row` that is a record in every version,
    a `delete_when` field that can hold its value, and a `subject_field` with a path inside the row (erasure must reach
    it; others, like a delete event's `before.id`, match in the raw table)."""
    name = block.table if block.table is not None else f"{table}_current"
    if not is_table_name(name) or name == table:
        problem = "is the topic's own table" if name == table else "must be lowercase letters, digits and underscores, starting with a letter"
        raise CatalogError(f"{where}: current_state.table {shown(name)} {problem}")
    row = tuple(block.row.split(".")) if block.row is not None else None
    if row is not None:
        _check_field_path(versions, row, f"current_state.row {block.row!r}", where)
        for version in versions:
            record = resolve(unwrap_nullable(field_type_at(version.schema, row)), named_types(version.schema))
            if not isinstance(record, dict) or record.get("type") not in ("record", "error"):
                shown_type = "no field" if record is None else f"a {type_name(record)}"
                raise CatalogError(f"{where}: current_state.row {block.row!r} is {shown_type} in version {version.version} "
                                   f"({version.file}); the row must be a record, whose fields are the table's columns")
            taken = [f["name"] for f in record["fields"] if f["name"].lower().startswith(KAFKA_COLUMN_PREFIX)]
            if taken:
                raise CatalogError(f"{where}: field {taken[0]!r} of current_state.row {block.row!r} (version "
                                   f"{version.version}, {version.file}) takes a name of the table's own "
                                   f"{KAFKA_COLUMN_PREFIX}… columns")
    if subject_fields and row is not None and not any(path[:len(row)] == row for path in subject_fields):
        named = ", ".join(".".join(path) for path in subject_fields)
        said = (f"subject_field {named!r} is not" if len(subject_fields) == 1
                else f"no path of subject_field {named!r} is")
        raise CatalogError(f"{where}: {said} inside current_state.row {block.row!r}, so erasure requests could not "
                           f"remove a subject's row from the current-state table")
    delete_when = None
    if block.delete_when is not None:
        path = _matched_field(block.delete_when.field, (block.delete_when.equals,), versions, where,
                              "current_state.delete_when.field", "current_state.delete_when.equals",
                              "every change must say whether it deletes")
        delete_when = Route(path, (block.delete_when.equals,), True)
    return CurrentState(name, row, delete_when)


# The Avro types a route may match on, and the kind of YAML value that matches each.
_ROUTE_KINDS = {"string": str, "enum": str, "int": int, "long": int, "boolean": bool}


def _describe_route_type(avro_type: Any) -> str:
    inner = unwrap_nullable(avro_type)
    return f"a {type_name(inner)}" if not isinstance(inner, list) else "a union"


def _load_key_schema(payloads: PayloadFormat, file: str, folder: Path, where: str) -> SchemaVersion:
    """The key's schema, as version 0 of its own: a record whose fields become the columns `_kafka_key_<field>`."""
    # No message: a Protobuf key is the first message of its file.
    [key] = _load_versions(payloads, (SchemaVersionYaml(version=1, file=file, registry_id=None, message=None),), folder, where,
                           label="key_schema")
    if key.recursions:
        raise CatalogError(f"{where}: key_schema {file} has a record that contains itself ({key.recursions[0]}); a key "
                           f"must be a plain record")
    return SchemaVersion(0, key.file, None, key.schema, key.parsed)


def _check_field_path(versions: list[SchemaVersion], path: tuple[str, ...], label: str, where: str,
                      json_allowed: bool = False) -> None:
    """A catalog key's field path must name a field of some version, and not reach inside a field landed as JSON
    text (whose parts are no columns); with `json_allowed`, it may name such a field itself."""
    if not any(field_type_at(v.schema, path) is not None for v in versions):
        raise CatalogError(f"{where}: {label} is not a field of any schema version")
    for version in versions:
        step = json_field_at(version.schema, path)
        if step is None or (json_allowed and step == len(path) - 1):
            continue
        json_field = ".".join(path[:step + 1])
        advice = f"name {json_field!r} itself to pseudonymize its whole text" if json_allowed else "choose another field"
        raise CatalogError(
            f"{where}: {label} is in field {json_field!r} of version {version.version} ({version.file}), where a "
            f"record contains itself: that field lands as one column of JSON text; {advice}"
        )


def _check_recursion(choice: str, versions: list[SchemaVersion], where: str) -> None:
    if choice == "refuse":
        for version in versions:
            if version.recursions:
                raise CatalogError(
                    f"{where}: version {version.version} ({version.file}) has a record that contains itself "
                    f"({version.recursions[0]}), and recursive_records is refuse; remove that key to land the field "
                    f"as JSON text"
                )


def _check_columns(versions: list[SchemaVersion], column_of: Callable[[SchemaVersion, str], tuple[str, str]],
                   where: str) -> None:
    """Every version's top-level columns (a field's column and how to name it in a message: `column_of`) against the
    lake's own and each other."""
    for version in versions:
        schema_file = Path(where).parent / version.file
        taken: dict[str, str] = {}
        for field_name in _top_level_names(version):
            column, label = column_of(version, field_name)
            if is_lake_column(column):
                fix = "choose another name in rename" if column != field_name else (
                    f"map it to another column with `rename: {{{field_name}: <column>}}`")
                raise CatalogError(
                    f"{where}: {label} of {schema_file} takes the name of one of the lake's own columns "
                    f"({KAFKA_COLUMN_PREFIX}…, {', '.join(PARTITION_COLUMNS)}); {fix} in topic.yaml"
                )
            if column.lower() in taken:
                raise CatalogError(
                    f"{where}: {label} and {taken[column.lower()]} of {schema_file} would both be column {column!r} "
                    f"(names are compared ignoring case); choose another name in rename"
                )
            taken[column.lower()] = label


def _top_level_names(version: SchemaVersion) -> list[str]:
    return [f["name"] for f in version.schema["fields"]]


def _load_versions(payloads: PayloadFormat, entries: tuple[SchemaVersionYaml, ...], folder: Path, where: str,
                   label: str = "") -> list[SchemaVersion]:
    versions: list[SchemaVersion] = []
    for entry in entries:
        try:
            schema_path = (folder / entry.file).resolve()
        except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop, an overlong name
            schema_path = None
        if schema_path is None or schema_path.parent != folder.resolve():
            what = label or f"schema file {shown(entry.file)} of version {entry.version}"
            raise CatalogError(f"{where}: {what} must sit beside topic.yaml")
        loaded = _load_schema_file(payloads, schema_path, entry.message)
        versions.append(SchemaVersion(entry.version, entry.file, entry.registry_id, loaded.schema, loaded.parsed,
                                      loaded.recursions))
    for older, newer in zip(versions, versions[1:]):
        problem = payloads.evolution_problem(older, newer)
        if problem:
            raise CatalogError(
                f"{where}: version {newer.version} ({newer.file}) is not a compatible evolution of "
                f"version {older.version} ({older.file}): {problem}"
            )
    return versions


def _load_schema_file(payloads: PayloadFormat, schema_path: Path, message: str | None) -> LoadedSchema:
    try:
        exists = schema_path.is_file()
    except OSError:
        exists = False
    if not exists:
        raise CatalogError(f"{schema_path}: schema file does not exist")
    try:
        return payloads.load_schema(schema_path, _read_catalog_file(schema_path, str(schema_path)), message)
    except SchemaFileError as error:
        raise CatalogError(str(error)) from None


def _read_catalog_file(path: Path, where: str) -> str:
    """The text of a catalog file, read with a size cap; anything else is a CatalogError naming it."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_CATALOG_FILE_BYTES + 1)
    except (OSError, ValueError) as error:
        raise CatalogError(f"{where}: cannot be read: {getattr(error, 'strerror', None) or error}") from None
    if len(data) > MAX_CATALOG_FILE_BYTES:
        raise CatalogError(f"{where}: larger than {MAX_CATALOG_FILE_BYTES // 1024} KiB; not a catalog file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CatalogError(f"{where}: not UTF-8 text: {error}") from None


def _check_time_partitioning(block: TimePartitioningYaml | None, versions: list[SchemaVersion],
                             where: str) -> tuple[str, ...] | None:
    """The event-time field's path, checked to place records in every version; None for Kafka time."""
    if block is None or block.field is None:
        return None
    field_name, unit = block.field, block.unit
    path = tuple(field_name.split("."))
    for version in versions:
        avro_type = field_type_at(version.schema, path)
        if avro_type is None:
            raise CatalogError(
                f"{where}: time_partitioning.field {field_name!r} is not a field of version {version.version} ({version.file})"
            )
        if json_field_at(version.schema, path) is not None or not is_time_type(avro_type):
            raise CatalogError(
                f"{where}: time_partitioning.field {field_name!r} in version {version.version} must be a "
                f"timestamp-millis/micros long, a plain long of epoch time (see unit) or an RFC 3339 string"
            )
        plain_long = unwrap_nullable(avro_type)
        if unit is not None and (type_name(plain_long) != "long" or logical_type(plain_long) is not None):
            shown_type = logical_type(plain_long) or type_name(plain_long)
            raise CatalogError(
                f"{where}: time_partitioning.unit is for a plain long event time, but field {field_name!r} is a "
                f"{shown_type} in version {version.version} ({version.file}); remove unit"
            )
    return path
