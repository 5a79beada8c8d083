"""Schema resolution: which catalog version the schema id in a record's Confluent header stands for, through the
catalog's `registry_id`s or a Confluent Schema Registry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import fastavro
from fastavro.schema import to_parsing_canonical_form

from kafka_lake.settings import url_without_credentials
from kafka_lake.table_spec import SchemaVersion, TableSpec

_SCHEMA_NOT_FOUND = 40403  # Confluent Schema Registry's error code for an unknown id


class SchemaResolver(Protocol):
    """Which catalog version the schema id in a record's Confluent header stands for."""

    def version_for(self, schema_id: int) -> SchemaVersion | None: ...

    def unknown_reason(self, schema_id: int) -> str:
        """Why `version_for(schema_id)` is None, for the dead letter's error column."""
        ...


class SchemaRegistryUnavailable(RuntimeError):
    """The schema registry did not answer; retry the run rather than dead-letter every record."""

    def __init__(self, url: str, schema_id: int, error: Exception):
        super().__init__(
            f"schema registry at {url} failed to answer for schema id {schema_id}: "
            f"{type(error).__name__}: {error}; check SCHEMA_REGISTRY_URL and that the registry is up"
        )


def value_subject(topic: str) -> str:
    """The subject of a topic's values under Confluent's default naming (TopicNameStrategy)."""
    return f"{topic}-value"


def key_subject(topic: str) -> str:
    """The subject of a topic's keys under Confluent's default naming (TopicNameStrategy)."""
    return f"{topic}-key"


def add_topic_command(topic: TableSpec) -> str:
    """The command that adds the new versions of the topic's subject to its catalog entry."""
    return f"python -m deploy.add_topic --topic {topic.topic} --database {topic.database} --table {topic.table} --update"


@dataclass(frozen=True)
class NewSchemaVersion:
    """A schema id records carry that the catalog lacks and the registry has, as a version of a subject."""

    schema_id: int
    subject: str
    version: int
    command: str  # what adds it to the catalog

    def sentence(self, topic: str) -> str:
        return (f"records of topic {topic} carry schema id {self.schema_id}, version {self.version} of subject "
                f"{self.subject} in the schema registry, which the catalog lacks; add it with `{self.command}`, then "
                f"land their hours again")


def new_schema_version(client: Any, topic: TableSpec, schema_id: int) -> NewSchemaVersion | None:
    """What the registry (confluent-kafka's `SchemaRegistryClient`) says `schema_id` is: a version of the topic's value
    subject, else of any subject holding it; None when it holds the id under no subject."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        held = client.get_schema_versions(schema_id)
    except SchemaRegistryError as error:
        if error.error_code == _SCHEMA_NOT_FOUND:
            return None
        raise
    if not held:
        return None
    own = value_subject(topic.topic)
    chosen = next((v for v in held if v.subject == own), held[0])
    return NewSchemaVersion(schema_id, chosen.subject, chosen.version, add_topic_command(topic))


def new_schema_versions(topic: TableSpec, unknown_ids: dict, registry_url: str | None) -> list[NewSchemaVersion]:
    """Of the schema ids a landed hour's dead letters carry and the catalog lacks (`HourManifest.unknown_schema_ids`),
    those the registry holds, each as its version; `SchemaRegistryUnavailable` when the registry does not answer."""
    if not registry_url or not unknown_ids:
        return []
    client = registry_client(registry_url)
    found = []
    for schema_id in sorted(int(i) for i in unknown_ids):
        try:
            new = new_schema_version(client, topic, schema_id)
        except Exception as error:
            raise SchemaRegistryUnavailable(url_without_credentials(registry_url), schema_id, error) from error
        if new is not None:
            found.append(new)
    return found


class CatalogSchemas:
    """Resolves schema ids through the catalog's `registry_id`s (no schema registry configured, or a JSON table, whose
    ids name JSON Schemas); with a registry at `registry_url`, an unknown id's reason says which version it is there."""

    def __init__(self, topic: TableSpec, registry_url: str | None = None):
        self._topic = topic
        self._registry_url = registry_url

    def version_for(self, schema_id: int) -> SchemaVersion | None:
        return self._topic.version_for_registry_id(schema_id)

    def unknown_reason(self, schema_id: int) -> str:
        known = ", ".join(str(v.registry_id) for v in self._topic.schema_versions)
        where = f"schema id {schema_id} is no registry_id of topic {self._topic.topic} in {self._topic.source_file} (known: {known})"
        new = self._in_registry(schema_id)
        if new is not None:
            return f"{where}; it is version {new.version} of subject {new.subject} in the schema registry: add it with `{new.command}`"
        return f"{where}; add its schema there as a new version"

    def _in_registry(self, schema_id: int) -> NewSchemaVersion | None:
        if not self._registry_url:
            return None
        try:
            return new_schema_version(registry_client(self._registry_url), self._topic, schema_id)
        except Exception:  # the registry only names the id here: its being away must not fail what the catalog decides
            return None


class RegisteredForms(Protocol):
    """How the schemas of one payload format compare between the catalog and a registry: equal forms, same bytes on
    the wire."""

    schema_type: str  # as the registry names the kind: AVRO, PROTOBUF
    label: str  # as a person names it

    def of_version(self, version: SchemaVersion) -> str: ...

    def of_registered(self, registered: Any, client: Any) -> str:
        """The form of a registered schema (`confluent_kafka.schema_registry.Schema`; `client` fetches what it
        references); raises `ValueError` saying why it is none the catalog could decode with."""
        ...


class AvroForms:
    """Avro's parsing canonical form: the same schema whatever its docs, defaults or ids."""

    schema_type = "AVRO"
    label = "Avro"

    def of_version(self, version: SchemaVersion) -> str:
        return to_parsing_canonical_form(version.parsed)

    def of_registered(self, registered: Any, client: Any) -> str:
        try:
            return to_parsing_canonical_form(fastavro.parse_schema(json.loads(registered.schema_str or ""), _write_hint=False))
        except Exception as error:  # json or fastavro: either way not a schema we can decode with
            raise ValueError(f"not a self-contained Avro schema: {error}") from None


class RegistrySchemas:
    """Resolves schema ids through a Confluent Schema Registry, to the catalog version with the same schema.

    "Same" is the format's form (`RegisteredForms`; Avro's parsing canonical form by default): same bytes on the wire,
    whatever the docs, defaults or ids. Each id is asked once; an id the registry lacks, or whose schema the catalog
    lacks, resolves to None.
    """

    def __init__(self, topic: TableSpec, url: str, client_config: dict | None = None,
                 forms: RegisteredForms | None = None):
        # Imported only with a registry: its HTTP and auth stack costs ~0.4 s that catalog-only runs skip.

        self._topic = topic
        self._url = url_without_credentials(url)
        self._client = registry_client(url, client_config)
        self._kind = forms or AvroForms()
        self._forms_of = [(self._kind.of_version(v), v) for v in topic.schema_versions]
        self._resolved: dict[int, tuple[SchemaVersion | None, str]] = {}

    def version_for(self, schema_id: int) -> SchemaVersion | None:
        return self._resolve(schema_id)[0]

    def unknown_reason(self, schema_id: int) -> str:
        return self._resolve(schema_id)[1]

    def _resolve(self, schema_id: int) -> tuple[SchemaVersion | None, str]:
        if schema_id not in self._resolved:
            self._resolved[schema_id] = self._fetch(schema_id)
        return self._resolved[schema_id]

    def _fetch(self, schema_id: int) -> tuple[SchemaVersion | None, str]:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            registered = self._client.get_schema(schema_id)
        except SchemaRegistryError as error:
            if error.error_code == _SCHEMA_NOT_FOUND:
                return None, f"schema id {schema_id} is not known to the schema registry at {self._url}"
            raise SchemaRegistryUnavailable(self._url, schema_id, error) from error
        except Exception as error:  # the HTTP client's connection errors, timeouts, unreadable answers
            raise SchemaRegistryUnavailable(self._url, schema_id, error) from error
        where = f"schema id {schema_id} in the schema registry at {self._url}"
        schema_type = registered.schema_type or "AVRO"  # the registry leaves out the type of an Avro schema
        if schema_type != self._kind.schema_type:
            return None, f"{where} is a {schema_type} schema, not {self._kind.label}"
        try:
            form = self._kind.of_registered(registered, self._client)
        except ValueError as error:
            return None, f"{where} is {error}"
        except Exception as error:  # fetching what it references: the registry's errors, connection errors
            raise SchemaRegistryUnavailable(self._url, schema_id, error) from error
        # Equal forms mean equal bytes on the wire; the catalog's registry_id breaks ties.
        matches = [version for catalog_form, version in self._forms_of if catalog_form == form]
        if not matches:
            missing = f"{where} is none of the catalog's schema versions of topic {self._topic.topic} ({self._topic.source_file})"
            try:
                new = new_schema_version(self._client, self._topic, schema_id)
            except Exception as error:
                raise SchemaRegistryUnavailable(self._url, schema_id, error) from error
            if new is None:
                return None, f"{missing}; add it there as a new version"
            return None, f"{missing}: it is version {new.version} of subject {new.subject}; add it with `{new.command}`"
        return next((v for v in matches if v.registry_id == schema_id), matches[-1]), ""


def registry_client(url: str, client_config: dict | None = None) -> Any:
    """confluent-kafka's registry client for `url`, its user info passed as basic auth rather than left in the URL:
    the HTTP client logs every URL it calls. Imported only with a registry: its HTTP and auth stack costs ~0.4 s."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    parts = urlsplit(url)
    config = {**(client_config or {}), "url": url_without_credentials(url)}
    if parts.username is not None:
        config["basic.auth.user.info"] = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return SchemaRegistryClient(config)
