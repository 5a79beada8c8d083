"""An HTTP proxy in front of the real S3 server that answers chosen requests with S3's own transient
errors (503 SlowDown), so the tests can prove the lake's S3 client retries them with backoff.

Everything it does not fail it forwards byte for byte, Host header included, so SigV4 signatures hold.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from dev_services.ports import LOOPBACK

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


@dataclass
class FaultLog:
    """What the proxy saw: per (method, path) how many times it failed and forwarded the request."""

    failed: Counter = field(default_factory=Counter)
    forwarded: Counter = field(default_factory=Counter)
    failed_at: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class S3FaultProxy:
    """`should_fail(method, path, attempts_so_far)` decides; the proxy listens on a free loopback port."""

    def __init__(self, upstream_url: str, should_fail: Callable[[str, str, int], bool]):
        upstream = urlparse(upstream_url)
        self.log = FaultLog()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: the FaultLog is the record
                pass

            def _body(self) -> bytes:
                """The request body as sent: chunked uploads (UploadPart) are relayed with their framing."""
                if "chunked" not in self.headers.get("Transfer-Encoding", ""):
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                raw = b""
                while True:
                    line = self.rfile.readline()
                    raw += line
                    size = int(line.split(b";")[0], 16)
                    if size == 0:
                        while (trailer := self.rfile.readline()) not in (b"\r\n", b""):
                            raw += trailer
                        return raw + b"\r\n"
                    raw += self.rfile.read(size + 2)

            def _handle(self):
                body = self._body()
                key = (self.command, self.path.split("?")[0])
                with proxy.log.lock:
                    attempts = proxy.log.failed[key] + proxy.log.forwarded[key]
                    fail = should_fail(self.command, self.path, attempts)
                    (proxy.log.failed if fail else proxy.log.forwarded)[key] += 1
                    if fail:
                        proxy.log.failed_at.append(time.monotonic())
                if fail:
                    self._answer(503, [("Content-Type", "application/xml")], SLOW_DOWN)
                    return
                connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
                try:
                    connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        connection.putheader(name, value)
                    connection.endheaders()
                    connection.send(body)
                    answer = connection.getresponse()
                    payload = answer.read()
                    headers = [(n, v) for n, v in answer.getheaders() if n.lower() not in ("transfer-encoding", "connection", "content-length")]
                    self._answer(answer.status, headers, payload, declared_length=answer.getheader("Content-Length"))
                finally:
                    connection.close()

            def _answer(self, status, headers, payload, declared_length=None):
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                # A HEAD answer declares the object's length but carries no body.
                length = declared_length if self.command == "HEAD" and declared_length else str(len(payload))
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def __enter__(self) -> S3FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
