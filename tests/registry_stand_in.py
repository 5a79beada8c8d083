"""A stand-in for Confluent Schema Registry, which cannot run here (no registry server installs from the package
registries this machine reaches): the part of its REST API the platform and confluent-kafka's `SchemaRegistryClient`
use, answering as the real one does, errors and their codes included.

`POST /subjects/{s}/versions` (register: the same schema text and type get the same id under any subject; a schema
already under the subject is not a new version), `POST /subjects/{s}` (look a schema up under a subject),
`GET /subjects`, `GET /subjects/{s}/versions`, `GET /subjects/{s}/versions/{v|latest}`, `GET /schemas/ids/{id}`,
`GET /schemas/ids/{id}/versions`. A Protobuf schema registered as a base64 `FileDescriptorProto` (what
confluent-kafka's `ProtobufSerializer` sends) is kept and served as `.proto` text, as the real registry serves it.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, SCHEMA_NOT_FOUND = 40401, 40402, 40403


@dataclass(frozen=True)
class Registered:
    schema: str  # the schema's text, as registered
    schema_type: str  # AVRO, JSON or PROTOBUF
    references: tuple = ()


class RegistryStandIn(ThreadingHTTPServer):
    """On a free loopback port; `schemas`: ids known without a subject (`GET /schemas/ids/{id}` only), Avro as dicts.
    `requests` lists every path asked, in order."""

    def __init__(self, schemas: dict[int, dict] | None = None, first_id: int = 1):
        super().__init__(("127.0.0.1", 0), _RegistryHandler)
        self.by_id: dict[int, Registered] = {i: Registered(json.dumps(s), "AVRO") for i, s in (schemas or {}).items()}
        self.subjects: dict[str, list[int]] = {}  # subject → the id of each version, in order
        self.next_id = first_id
        self.requests: list[str] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> RegistryStandIn:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()

    def register(self, subject: str, registered: Registered) -> int:
        with self._lock:
            known = next((i for i, r in self.by_id.items() if r == registered), None)
            if known is None:
                known, self.next_id = self.next_id, self.next_id + 1
                self.by_id[known] = registered
            versions = self.subjects.setdefault(subject, [])
            if known not in versions:
                versions.append(known)
            return known


class _RegistryHandler(BaseHTTPRequestHandler):
    server: RegistryStandIn

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        self.server.requests.append(path)
        parts = [unquote(part) for part in path.strip("/").split("/")]
        registry = self.server
        if parts == ["subjects"]:
            return self._answer(200, sorted(registry.subjects))
        if parts[:1] == ["subjects"] and len(parts) in (3, 4) and parts[2] == "versions":
            versions = registry.subjects.get(parts[1])
            if versions is None:
                return self._error(SUBJECT_NOT_FOUND, f"Subject '{parts[1]}' not found.")
            if len(parts) == 3:
                return self._answer(200, list(range(1, len(versions) + 1)))
            number = len(versions) if parts[3] == "latest" else int(parts[3]) if parts[3].isdigit() else 0
            if not 1 <= number <= len(versions):
                return self._error(VERSION_NOT_FOUND, f"Version {parts[3]} not found.")
            schema_id = versions[number - 1]
            return self._answer(200, {"subject": parts[1], "version": number, "id": schema_id,
                                      **self._schema(registry.by_id[schema_id])})
        if parts[:2] == ["schemas", "ids"] and len(parts) in (3, 4) and parts[2].isdigit():
            schema_id = int(parts[2])
            if schema_id not in registry.by_id:
                return self._error(SCHEMA_NOT_FOUND, "Schema not found")
            if len(parts) == 3:
                return self._answer(200, self._schema(registry.by_id[schema_id]))
            if parts[3] == "versions":
                return self._answer(200, [{"subject": subject, "version": versions.index(schema_id) + 1}
                                          for subject, versions in sorted(registry.subjects.items())
                                          if schema_id in versions])
        self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        self.server.requests.append(f"POST {path}")
        parts = [unquote(part) for part in path.strip("/").split("/")]
        if not (parts[:1] == ["subjects"] and (len(parts) == 2 or (len(parts) == 3 and parts[2] == "versions"))):
            return self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        schema_type = body.get("schemaType") or "AVRO"
        schema = body["schema"]
        if schema_type == "PROTOBUF":
            schema = proto_text(schema)
        registered = Registered(schema, schema_type, tuple(
            json.dumps(reference, sort_keys=True) for reference in body.get("references") or ()))
        if len(parts) == 2:  # a lookup: the version of the subject that holds this schema
            versions = self.server.subjects.get(parts[1])
            if versions is None:
                return self._error(SUBJECT_NOT_FOUND, f"Subject '{parts[1]}' not found.")
            found = next((i for i in versions if self.server.by_id[i] == registered), None)
            if found is None:
                return self._error(SCHEMA_NOT_FOUND, "Schema not found")
            return self._answer(200, {"subject": parts[1], "version": versions.index(found) + 1, "id": found,
                                      **self._schema(registered)})
        self._answer(200, {"id": self.server.register(parts[1], registered)})

    @staticmethod
    def _schema(registered: Registered) -> dict:
        answer: dict = {"schema": registered.schema}
        if registered.schema_type != "AVRO":  # the real registry leaves Avro's type out
            answer["schemaType"] = registered.schema_type
        if registered.references:
            answer["references"] = [json.loads(reference) for reference in registered.references]
        return answer

    def _error(self, code: int, message: str) -> None:
        self._answer(404, {"error_code": code, "message": message})

    def _answer(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # keep test output quiet
        pass


# --- a Protobuf schema registered as a descriptor, as the registry's text ------------------------------------------

_SCALAR_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
                 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}


def proto_text(schema: str) -> str:
    """A Protobuf schema as `.proto` text: text stays as it is; a base64 `FileDescriptorProto` is written out as the
    text of the same messages, enums, fields and imports (what decoding depends on; comments and options aside)."""
    from google.protobuf import descriptor_pb2

    try:
        data = base64.b64decode(schema, validate=True)
        descriptor = descriptor_pb2.FileDescriptorProto.FromString(data)
    except (binascii.Error, ValueError):
        return schema
    if not descriptor.message_type and not descriptor.enum_type:
        return schema
    lines = [f'syntax = "{descriptor.syntax or "proto2"}";']
    if descriptor.package:
        lines.append(f"package {descriptor.package};")
    lines += [f'import "{name}";' for name in descriptor.dependency]
    for enum in descriptor.enum_type:
        lines += _enum_text(enum, "")
    for message in descriptor.message_type:
        lines += _message_text(message, "", descriptor.syntax or "proto2")
    return "\n".join(lines) + "\n"


def _enum_text(enum, indent: str) -> list[str]:
    values = [f"{indent}  {value.name} = {value.number};" for value in enum.value]
    alias = [f"{indent}  option allow_alias = true;"] if enum.options.allow_alias else []
    return [f"{indent}enum {enum.name} {{", *alias, *values, f"{indent}}}"]


def _message_text(message, indent: str, syntax: str) -> list[str]:
    inner = indent + "  "
    entries = {entry.name: entry for entry in message.nested_type if entry.options.map_entry}
    lines = [f"{indent}message {message.name} {{"]
    for enum in message.enum_type:
        lines += _enum_text(enum, inner)
    for nested in message.nested_type:
        if not nested.options.map_entry:
            lines += _message_text(nested, inner, syntax)
    synthetic = {field.oneof_index for field in message.field if field.proto3_optional}
    written_oneofs: set[int] = set()
    for field in message.field:
        if field.HasField("oneof_index") and field.oneof_index not in synthetic:
            if field.oneof_index in written_oneofs:
                continue
            written_oneofs.add(field.oneof_index)
            members = [f for f in message.field if f.HasField("oneof_index") and f.oneof_index == field.oneof_index]
            lines.append(f"{inner}oneof {message.oneof_decl[field.oneof_index].name} {{")
            lines += [f"{inner}  {_field_text(member, entries, syntax, in_oneof=True)}" for member in members]
            lines.append(f"{inner}}}")
            continue
        lines.append(f"{inner}{_field_text(field, entries, syntax)}")
    return [*lines, f"{indent}}}"]


def _field_text(field, entries: dict, syntax: str, in_oneof: bool = False) -> str:
    def type_of(described) -> str:
        return _SCALAR_NAMES.get(described.type) or described.type_name

    entry = entries.get(field.type_name.rsplit(".", 1)[-1]) if field.type_name else None
    if entry is not None and field.label == 3:
        key, value = entry.field[0], entry.field[1]
        return f"map<{type_of(key)}, {type_of(value)}> {field.name} = {field.number};"
    label = ("" if in_oneof else "repeated " if field.label == 3 else "optional " if field.proto3_optional
             else "required " if field.label == 2 else "optional " if syntax == "proto2" else "")
    options = []
    if field.HasField("default_value"):
        default = field.default_value
        options.append(f"default = {json.dumps(default) if field.type in (9, 12) else default}")
    if field.options.HasField("packed"):
        options.append(f"packed = {str(field.options.packed).lower()}")
    suffix = f" [{', '.join(options)}]" if options else ""
    return f"{label}{type_of(field)} {field.name} = {field.number}{suffix};"
