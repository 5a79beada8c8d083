"""A stand-in Iceberg REST catalog server: the REST protocol's table and namespace endpoints over pyiceberg's own
SQL catalog, on a loopback port.

No REST catalog server can run on this machine (Polaris, Lakekeeper, Gravitino and Nessie are JVM or native servers,
none on PyPI), so this serves the requests pyiceberg's `RestCatalog` client sends, as the Iceberg REST spec defines
them, and nothing more: namespaces, create, load, exists and commit of tables. The client side is the real one.
"""

from __future__ import annotations

import threading
import time

import uvicorn
from pyiceberg.catalog.rest import CreateTableRequest, TableResponse
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import CommitTableRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dev_services.ports import free_port

_STATUS = {NoSuchTableError: 404, NoSuchNamespaceError: 404, NamespaceAlreadyExistsError: 409,
           TableAlreadyExistsError: 409, CommitFailedException: 409}
_TYPE = {NoSuchTableError: "NoSuchTableException", NoSuchNamespaceError: "NoSuchNamespaceException",
         NamespaceAlreadyExistsError: "AlreadyExistsException", TableAlreadyExistsError: "AlreadyExistsException",
         CommitFailedException: "CommitFailedException"}


def _app(catalog: SqlCatalog) -> Starlette:
    def answer(handler):
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except tuple(_STATUS) as error:
                status = _STATUS[type(error)]
                return JSONResponse({"error": {"message": str(error), "type": _TYPE[type(error)], "code": status}}, status)
        return endpoint

    def model(value) -> Response:
        return Response(value.model_dump_json(by_alias=True, exclude_none=True), media_type="application/json")

    async def config(request: Request) -> Response:
        return JSONResponse({"defaults": {}, "overrides": {}})

    async def namespaces(request: Request) -> Response:
        if request.method == "POST":
            body = await request.json()
            catalog.create_namespace(tuple(body["namespace"]), body.get("properties") or {})
            return JSONResponse({"namespace": body["namespace"], "properties": body.get("properties") or {}})
        return JSONResponse({"namespaces": [list(n) for n in catalog.list_namespaces()]})

    async def namespace(request: Request) -> Response:
        name = request.path_params["namespace"]
        properties = catalog.load_namespace_properties(name)
        return Response(status_code=204) if request.method == "HEAD" else JSONResponse({"namespace": [name], "properties": properties})

    async def tables(request: Request) -> Response:
        create = CreateTableRequest.model_validate_json(await request.body())
        table = catalog.create_table((request.path_params["namespace"], create.name), create.table_schema,
                                     create.location, create.partition_spec, create.write_order, create.properties)
        return model(TableResponse(metadata_location=table.metadata_location, metadata=table.metadata))

    async def table(request: Request) -> Response:
        identifier = (request.path_params["namespace"], request.path_params["table"])
        if request.method == "POST":
            commit = CommitTableRequest.model_validate_json(await request.body())
            return model(catalog.commit_table(catalog.load_table(identifier), commit.requirements, commit.updates))
        loaded = catalog.load_table(identifier)
        if request.method == "HEAD":
            return Response(status_code=204)
        return model(TableResponse(metadata_location=loaded.metadata_location, metadata=loaded.metadata))

    return Starlette(routes=[
        Route("/v1/config", answer(config), methods=["GET"]),
        Route("/v1/namespaces", answer(namespaces), methods=["GET", "POST"]),
        Route("/v1/namespaces/{namespace}", answer(namespace), methods=["GET", "HEAD"]),
        Route("/v1/namespaces/{namespace}/tables", answer(tables), methods=["POST"]),
        Route("/v1/namespaces/{namespace}/tables/{table}", answer(table), methods=["GET", "HEAD", "POST"]),
    ])


class RestCatalogServer:
    """Serves a SQL catalog (SQLite at `database`) over the REST protocol until stopped."""

    def __init__(self, database: str, port: int | None = None):
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        catalog = SqlCatalog("rest_backend", uri=f"sqlite:///{database}")
        self._server = uvicorn.Server(uvicorn.Config(_app(catalog), host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> RestCatalogServer:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the REST catalog stand-in did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
