"""A catalog entry written from the schema registry (`topic.yaml` and one schema file per version of `<topic>-value`,
each with its registry id), or the versions an entry lacks added to it; what `deploy/add_topic.py` runs.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from kafka_lake.decoding.formats import PAYLOAD_FORMATS
from kafka_lake.decoding.protobuf.avro_shape import NoColumns, avro_schema_of
from kafka_lake.decoding.protobuf.format import referenced_files, write_proto_files
from kafka_lake.hours import floor_hour
from kafka_lake.kafka.schema_resolution import key_subject, value_subject
from kafka_lake.schemas.avro_types import field_type_at
from kafka_lake.schemas.json_schema import NotTranslatable, avro_record_of
from kafka_lake.settings import url_without_credentials
from kafka_lake.table_spec import SchemaFileError
from kafka_lake.topics.loader import CatalogError, load_catalog, load_topic

# Confluent Schema Registry's error codes.
_SUBJECT_NOT_FOUND, _VERSION_NOT_FOUND = 40401, 40402
# The registry's schema types, and the catalog's format for each it can land.
_FORMATS = {"AVRO": "avro", "JSON": "json", "PROTOBUF": "protobuf"}


class OnboardingError(ValueError):
    """The entry cannot be written; the message names the subject (or file) and what is missing."""


@dataclass(frozen=True)
class RegisteredVersion:
    """One version of a subject as the registry holds it."""

    subject: str
    version: int
    schema_id: int
    schema_type: str  # AVRO, JSON or PROTOBUF
    schema: str
    references: tuple[str, ...] = ()  # the subjects it refers to
    imports: tuple[tuple[str, str], ...] = ()  # a Protobuf schema's imported files: (the name it imports, the text)

    @property
    def label(self) -> str:
        return f"subject {self.subject} version {self.version} (id {self.schema_id})"


def registered_versions(client: Any, subject: str, url: str) -> list[RegisteredVersion]:
    """Every version of `subject`, in order, through confluent-kafka's `SchemaRegistryClient`."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    where = f"the schema registry at {url_without_credentials(url)}"
    try:
        numbers = client.get_versions(subject)
        registered = [client.get_version(subject, number) for number in numbers]
    except SchemaRegistryError as error:
        if error.error_code == _SUBJECT_NOT_FOUND:
            raise OnboardingError(f"subject {subject} is not in {where}: no schema was registered for the topic's "
                                  f"values (is the topic name right, and does its producer register its schemas?)") from None
        raise OnboardingError(f"{where} refused to list subject {subject}: {error}") from None
    except Exception as error:  # the HTTP client's connection errors, timeouts
        raise OnboardingError(f"{where} did not answer for subject {subject}: {type(error).__name__}: {error}; "
                              f"check SCHEMA_REGISTRY_URL") from None
    found = [RegisteredVersion(subject, r.version, r.schema_id, r.schema.schema_type or "AVRO", r.schema.schema_str or "",
                               tuple(f"{ref.subject} version {ref.version}" for ref in r.schema.references or ()))
             for r in registered]
    return [_with_imports(version, r.schema.references or [], client, where) if version.schema_type == "PROTOBUF"
            else version for version, r in zip(found, registered)]


def _with_imports(version: RegisteredVersion, references: list, client: Any, where: str) -> RegisteredVersion:
    """A Protobuf version with the files it imports, fetched from the subjects its references name."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        imports = referenced_files(references, client)
    except ValueError as error:
        raise OnboardingError(f"{version.label} is {error}") from None
    except SchemaRegistryError as error:
        raise OnboardingError(f"{version.label} imports {', '.join(version.references)}, which {where} does not "
                              f"hold as referenced: {error}") from None
    return RegisteredVersion(version.subject, version.version, version.schema_id, version.schema_type, version.schema,
                             version.references, tuple(imports.items()))


def registered_key(client: Any, topic: str, url: str) -> RegisteredVersion | None:
    """The newest version of the topic's key subject (`<topic>-key`), or None when the registry has no such subject."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    subject = key_subject(topic)
    where = f"the schema registry at {url_without_credentials(url)}"
    try:
        newest = client.get_latest_version(subject)
    except SchemaRegistryError as error:
        if error.error_code == _SUBJECT_NOT_FOUND:
            return None
        raise OnboardingError(f"{where} refused to give subject {subject}: {error}") from None
    except Exception as error:  # the HTTP client's connection errors, timeouts
        raise OnboardingError(f"{where} did not answer for subject {subject}: {type(error).__name__}: {error}; "
                              f"check SCHEMA_REGISTRY_URL") from None
    found = RegisteredVersion(subject, newest.version, newest.schema_id, newest.schema.schema_type or "AVRO",
                              newest.schema.schema_str or "",
                              tuple(f"{ref.subject} version {ref.version}" for ref in newest.schema.references or ()))
    if found.schema_type == "PROTOBUF":
        return _with_imports(found, newest.schema.references or [], client, where)
    return found


@dataclass(frozen=True)
class EntryKey:
    """The key's schema file written from the key subject, or why none is (`note`): the key then lands as bytes."""

    file: str | None = None
    text: str = ""
    registered: RegisteredVersion | None = None
    note: str = ""


def entry_key(key: RegisteredVersion | None, payload_format: str, folder: Path) -> EntryKey:
    """`key.avsc` (`key.proto` for Protobuf) from the key subject's newest version when it is a record of the values'
    format, whose fields then land as `_kafka_key_<field>` columns; else a note of why the key lands as bytes."""
    if key is None:
        return EntryKey()
    kind = _FORMATS.get(key.schema_type)
    if kind != payload_format:
        return EntryKey(note=f"{key.label} is a {key.schema_type} schema and the values are {payload_format}: the key "
                             f"lands as _kafka_key bytes (a key_schema is read in the values' format)")
    if kind == "protobuf":
        _proto_version(0, "key.proto", key, None)  # it loads as the catalog will load it, or says why not
        return EntryKey("key.proto", key.schema, key)
    try:
        avro = as_avro(key, _record_name(folder.name) + "Key")
    except OnboardingError as error:
        return EntryKey(note=f"{error}: the key lands as _kafka_key bytes")
    return EntryKey("key.avsc", json.dumps(avro, indent=2) + "\n", key)


@dataclass(frozen=True)
class CatalogVersion:
    """A version as the catalog entry takes it: its number there, its file and what is written into it, and the Avro
    schema its columns follow (the `.proto` message's shape for Protobuf)."""

    number: int
    file: str
    registered: RegisteredVersion
    avro: dict
    text: str
    message: str | None = None  # the message of a `.proto` file its records are
    # The file's other messages with their Avro shapes, when none was named: the one the records are may be another.
    others: tuple[tuple[str, dict], ...] = ()

    @property
    def yaml_line(self) -> str:
        message = f" message: {self.message}," if self.message is not None else ""
        return (f"{{version: {self.number}, file: {self.file},{message} registry_id: {self.registered.schema_id}}}"
                f"  # {self.registered.subject} version {self.registered.version}")


def catalog_format(versions: list[RegisteredVersion]) -> str:
    """The entry's `format` for the subject's versions: one for all of them, or the reason none is."""
    subject = versions[0].subject
    for version in versions:
        if version.schema_type not in _FORMATS:
            raise OnboardingError(f"subject {subject} version {version.version} (id {version.schema_id}) is a "
                                  f"{version.schema_type} schema, which is none of Avro, JSON Schema or Protobuf")
    kinds = {v.schema_type for v in versions}
    if len(kinds) > 1:
        described = ", ".join(f"version {v.version} {v.schema_type}" for v in versions)
        raise OnboardingError(f"subject {subject} mixes schema types ({described}); one table reads one format")
    return _FORMATS[kinds.pop()]


def as_avro(version: RegisteredVersion, record_name: str) -> dict:
    """The version's schema as the `.avsc` the catalog decodes it with: an Avro record as registered, or a JSON Schema
    translated (`schemas.json_schema`)."""
    label = version.label
    if version.references:
        raise OnboardingError(f"{label} refers to other subjects ({', '.join(version.references)}); a catalog schema "
                              f"file stands alone: write it by hand with the referred types inlined")
    try:
        schema = json.loads(version.schema)
    except ValueError as error:
        raise OnboardingError(f"{label} is no JSON text: {error}") from None
    if version.schema_type == "JSON":
        try:
            return avro_record_of(schema, record_name)
        except NotTranslatable as error:
            raise OnboardingError(f"{label} is a JSON Schema with no Avro record for it: {error}; write the .avsc by "
                                  f"hand beside topic.yaml and add the version to schema_versions") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise OnboardingError(f"{label} is an Avro {_kind(schema)}, not a record; a table's rows are records")
    return schema


@dataclass(frozen=True)
class EntryPlan:
    """What writing the entry changes in its folder."""

    folder: Path
    topic_yaml: str
    added: tuple[CatalogVersion, ...]
    imports: tuple[tuple[str, str], ...] = ()  # the files a `.proto` imports, written in the folder: (path, text)
    key: EntryKey = EntryKey()


def new_entry(folder: Path, topic: str, versions: list[RegisteredVersion], time_field: str | None, owner: str,
              start_hour: datetime, message: str | None = None, key: RegisteredVersion | None = None) -> EntryPlan:
    """The entry of a topic not in the catalog yet: every version of its subject, placed by `time_field` (None: by
    Kafka time); a Protobuf subject's versions land `message` (None: the first message of each file, which Confluent's
    serializer frames by default); `key`, the key subject's newest version, becomes its `key_schema` (`entry_key`)."""
    subject = value_subject(topic)
    if (folder / "topic.yaml").exists():
        raise OnboardingError(f"{folder / 'topic.yaml'} exists already; --update adds the versions of {subject} it lacks")
    payload_format = catalog_format(versions)
    added = _catalog_versions(versions, 1, folder, _message_for(payload_format, message, subject))
    key_file = entry_key(key, payload_format, folder)
    if time_field is not None:
        path = tuple(time_field.split("."))
        lacking = [v for v in added if field_type_at(v.avro, path) is None]
        if lacking:
            fields = ", ".join(f["name"] for f in lacking[0].avro["fields"])
            which = ", ".join(f"version {v.registered.version} (id {v.registered.schema_id})" for v in lacking)
            having = [name for name, shape in lacking[0].others if field_type_at(shape, path) is not None]
            if having:
                raise OnboardingError(
                    f"time field {time_field!r} is not in message {lacking[0].message}, the first of {which} of subject "
                    f"{subject}, whose file holds several messages: {', '.join(name for name, _ in lacking[0].others)} "
                    f"too. If the records are {' or '.join(having)}, which has it, name it with --message {having[0]}")
            raise OnboardingError(f"time field {time_field!r} is not in {which} of subject {subject}; the fields of "
                                  f"version {lacking[0].registered.version} are: {fields}. Name another with "
                                  f"--time-field, or place the records by Kafka time with --kafka-time")
    placement = ("time_partitioning:\n  source: event_time\n  field: " + json.dumps(time_field) if time_field is not None
                 else "time_partitioning:\n  source: kafka_time")
    lines = [
        f"# From subject {subject} of the schema registry; `python -m deploy.add_topic ... --update` adds its new versions.",
        f"topic: {json.dumps(topic)}",
        f"owner: {json.dumps(owner)}",
        *([f"format: {payload_format}"] if payload_format != "avro" else []),
        placement,
        f"start_hour: \"{floor_hour(start_hour):%Y-%m-%dT%H:%MZ}\"",
        *([f"key_schema: {key_file.file}  # from subject {key_file.registered.subject} version "
           f"{key_file.registered.version}"] if key_file.file is not None and key_file.registered is not None else []),
        "schema_versions:",
        *(f"  - {version.yaml_line}" for version in added),
    ]
    imports = _imports_beside(folder, [*added, *([key_file] if key_file.file is not None else [])])
    return EntryPlan(folder, "\n".join(lines) + "\n", tuple(added), imports, key_file)


def updated_entry(folder: Path, versions: list[RegisteredVersion], message: str | None = None) -> EntryPlan:
    """The entry with the versions of its subject it lacks (by registry id) added after its own, the rest of its
    `topic.yaml` as written; new Protobuf versions land `message` (None: the message of the entry's newest version)."""
    path = folder / "topic.yaml"
    try:
        text = path.read_text()
        document = yaml.safe_load(text)
        listed = document["schema_versions"]
        known = {entry["registry_id"] for entry in listed}
    except (OSError, yaml.YAMLError, TypeError, KeyError) as error:
        raise OnboardingError(f"{path}: cannot be updated, it has no readable schema_versions ({error}); without "
                              f"--update the entry is written anew") from None
    subject = versions[0].subject
    if document.get("topic") is not None and value_subject(str(document["topic"])) != subject:
        raise OnboardingError(f"{path} lands topic {document['topic']!r}, whose subject is not {subject}")
    format_there = document.get("format", "avro")
    payload_format = catalog_format(versions)
    if format_there != payload_format:
        raise OnboardingError(f"{path} reads format {format_there}, but subject {subject} holds {payload_format} schemas")
    lacking = [v for v in versions if v.schema_id not in known]
    message = _message_for(payload_format, message, subject) or (listed[-1].get("message") if listed else None)
    added = _catalog_versions(lacking, len(listed) + 1, folder, message)
    return EntryPlan(folder, _with_versions_appended(text, document, [v.yaml_line for v in added], path), tuple(added),
                     _imports_beside(folder, added))


def write_entry(plan: EntryPlan, catalog_dir: Path) -> None:
    """Writes the plan's schema files, then its `topic.yaml`, and checks the catalog loads the entry (alone, and beside
    every other entry, as `make check-catalog` does); an entry that would not load is taken back and the error raised."""
    plan.folder.mkdir(parents=True, exist_ok=True)
    topic_yaml = plan.folder / "topic.yaml"
    before = topic_yaml.read_text() if topic_yaml.exists() else None
    folders_before = {path for path in plan.folder.rglob("*") if path.is_dir()}
    written: list[Path] = []
    try:
        key = [(plan.key.file, plan.key.text)] if plan.key.file is not None else []
        written += write_proto_files(plan.folder, [*((version.file, version.text) for version in plan.added),
                                                   *key, *plan.imports])
        topic_yaml.write_text(plan.topic_yaml)
        load_topic(topic_yaml)
        broken = next((entry for entry in load_catalog(catalog_dir, tolerant=True).broken
                       if Path(entry.path).resolve() == topic_yaml.resolve()), None)
        if broken is not None:
            raise broken.error
    except CatalogError as error:
        for path in written:
            path.unlink(missing_ok=True)
        for made in sorted({path for path in plan.folder.rglob("*") if path.is_dir()} - folders_before, reverse=True):
            if not any(made.iterdir()):
                made.rmdir()
        if before is None:
            topic_yaml.unlink(missing_ok=True)
            if not any(plan.folder.iterdir()):
                plan.folder.rmdir()
        else:
            topic_yaml.write_text(before)
        raise OnboardingError(f"the entry would not load, so nothing was written: {error}") from None


def _catalog_versions(versions: list[RegisteredVersion], first: int, folder: Path,
                      message: str | None) -> list[CatalogVersion]:
    found = []
    for number, version in enumerate(versions, start=first):
        file = f"v{number}.proto" if version.schema_type == "PROTOBUF" else f"v{number}.avsc"
        if (folder / file).exists():
            raise OnboardingError(f"{folder / file} exists and no version of topic.yaml names it; move it away to add "
                                  f"subject {version.subject} version {version.version} as version {number}")
        if version.schema_type == "PROTOBUF":
            found.append(_proto_version(number, file, version, message))
        else:
            avro = as_avro(version, _record_name(folder.name))
            found.append(CatalogVersion(number, file, version, avro, json.dumps(avro, indent=2) + "\n"))
    return found


def _message_for(payload_format: str, message: str | None, subject: str) -> str | None:
    if message is not None and not PAYLOAD_FORMATS[payload_format].needs_message:
        raise OnboardingError(f"--message names the message of a Protobuf file, but subject {subject} holds "
                              f"{payload_format} schemas, one record each")
    return message


def _proto_version(number: int, file: str, version: RegisteredVersion, message: str | None) -> CatalogVersion:
    """A Protobuf version compiled as the catalog will compile it, its imports beside it, for the message it lands
    (`message`, else the file's first) and that message's Avro shape."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        write_proto_files(folder, [*version.imports, (file, version.schema)])
        try:
            loaded = PAYLOAD_FORMATS["protobuf"].load_schema(folder / file, version.schema, message)
        except SchemaFileError as error:
            what = str(error).replace(f"{folder / file}: ", "").replace(f"{folder}/", "")
            raise OnboardingError(f"{version.label} does not load as {file}: {what}"
                                  + ("" if message is None else "; --message names the message its records are")) from None
        others = () if message is not None else _other_messages(loaded.parsed)
    return CatalogVersion(number, file, version, loaded.schema, version.schema, loaded.parsed.message.full_name,
                          others)


def _other_messages(compiled: Any) -> tuple[tuple[str, dict], ...]:
    """The file's top-level messages after its first, each with its Avro shape (those with no column left out)."""
    found = []
    for message in compiled.top_level[1:]:
        try:
            found.append((message.full_name, avro_schema_of(message)))
        except NoColumns:
            continue
    return tuple(found)


def _imports_beside(folder: Path, added: Sequence[CatalogVersion | EntryKey]) -> tuple[tuple[str, str], ...]:
    """The files the added versions import that the entry's folder lacks yet, by the path they are imported by (below
    the folder). Every version of the entry reads the same file of a path: one the folder or another version holds
    with other text refuses the entry."""
    wanted: dict[str, tuple[str, RegisteredVersion]] = {}
    for version in added:
        registered = version.registered
        if registered is None:
            continue
        for name, text in registered.imports:
            there = folder / name
            held = there.read_text() if there.exists() else None
            earlier = wanted.get(name)
            other = (f"{there} holds" if held is not None and held != text else
                     f"{earlier[1].label} imports" if earlier is not None and earlier[0] != text else None)
            if other is not None:
                raise OnboardingError(f"{registered.label} imports {name} with other text than {other}; the "
                                      f"versions of one table read the same files of its folder: give the changed "
                                      f"file a new name in the registry, or land the version in a table of its own")
            if held is None:
                wanted[name] = (text, registered)
    return tuple((name, text) for name, (text, _) in wanted.items())


def _record_name(table: str) -> str:
    return "".join(part.capitalize() for part in table.split("_")) or "Record"


def _with_versions_appended(text: str, document: dict, lines: list[str], path: Path) -> str:
    """`topic.yaml`'s text with `lines` appended to its `schema_versions` list, every other line kept as written; a
    list written in flow style is written anew in block style."""
    if not lines:
        return text
    rows = text.splitlines(keepends=True)
    start = next((i for i, row in enumerate(rows) if re.match(r"schema_versions\s*:", row)), None)
    if start is None:
        raise OnboardingError(f"{path}: schema_versions is not a top-level key written at the start of a line")
    end = start + 1
    while end < len(rows) and (rows[end][:1] in (" ", "\t", "-") or not rows[end].strip()):
        end += 1
    while end > start + 1 and not rows[end - 1].strip():
        end -= 1  # blank lines before the next key stay where they are
    items = [row for row in rows[start + 1:end] if row.lstrip().startswith("- ")]
    if items:
        indent = items[0][: len(items[0]) - len(items[0].lstrip())]
        block = rows[start:end]
        if not block[-1].endswith("\n"):
            block[-1] += "\n"
    else:  # a flow list, `schema_versions: [...]`: its entries in block style
        indent = "  "
        block = ["schema_versions:\n", *(f"{indent}- {json.dumps(entry)}\n" for entry in document["schema_versions"])]
    new_text = "".join([*rows[:start], *block, *(f"{indent}- {line}\n" for line in lines), *rows[end:]])
    expected = {**document, "schema_versions": [*document["schema_versions"], *map(_entry_of, lines)]}
    if yaml.safe_load(new_text) != expected:
        raise OnboardingError(f"{path}: the new versions could not be added without changing what else it says; add "
                              f"these entries to schema_versions by hand: " + "; ".join(lines))
    return new_text


def _entry_of(line: str) -> dict:
    return yaml.safe_load(line.split("  #", 1)[0])


def _kind(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return "union" if isinstance(schema, list) else str(schema)
