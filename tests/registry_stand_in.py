"""A stand-in for Confluent Schema Registry, which cannot run here (no registry server installs from the package
registries this machine reaches): the part of its REST API the platform and confluent-kafka's `SchemaRegistryClient`
use, answering as the real one does, errors and their codes included.

`POST /subjects/{s}/versions` (register: the same schema text and type get the same id under any subject; a schema
already under the subject is not a new version), `GET /subjects`, `GET /subjects/{s}/versions`,
`GET /subjects/{s}/versions/{v|latest}`, `GET /schemas/ids/{id}`, `GET /schemas/ids/{id}/versions`.
"""

from __future__ import annotations

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
        if not (parts[:1] == ["subjects"] and len(parts) == 3 and parts[2] == "versions"):
            return self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        registered = Registered(body["schema"], body.get("schemaType") or "AVRO", tuple(
            json.dumps(reference, sort_keys=True) for reference in body.get("references") or ()))
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
