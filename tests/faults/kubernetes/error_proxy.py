"""An error-injecting HTTP proxy on 127.0.0.1 in front of the local kube-apiserver.

Why: a chaos tool is itself run on an unreliable network. The proxy forwards every request to
the real apiserver (TLS, bearer token passed through) and, when armed, answers the next write
badly: ``lost`` forwards it (the change happens) and then answers 500, as a dropped answer
does; ``409``/``429``/``500``/``503`` answer without forwarding (the change does not happen).
Reads are never disturbed, so a fault can always learn the truth by reading.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

MODES = ("lost", "409", "429", "500", "503")
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class ErrorProxy:
    """``arm(mode)`` makes the next write (or the next ``count``) fail in that mode."""

    def __init__(self, upstream: str, ca_file: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 443
        self.context = ssl.create_default_context(cafile=ca_file)
        self._lock = threading.Lock()
        self._armed: list[str] = []
        self.injected: list[tuple[str, str, str]] = []  # (mode, method, path)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def arm(self, mode: str, count: int = 1) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: use one of {MODES}")
        with self._lock:
            self._armed = [mode] * count

    def disarm(self) -> None:
        with self._lock:
            self._armed = []

    def _take(self, method: str) -> str | None:
        if method not in WRITE_METHODS:
            return None
        with self._lock:
            return self._armed.pop(0) if self._armed else None

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        mode = self._take(request.command)
        if mode is not None:
            self.injected.append((mode, request.command, request.path))
        if mode in ("409", "429", "500", "503"):
            self._answer(request, int(mode), _status_body(int(mode)))
            return
        status, headers, data = self._forward(request, body)
        if mode == "lost":  # the change happened; the answer is lost
            self._answer(request, 500, _status_body(500))
            return
        self._answer(request, status, data, headers)

    def _forward(
        self, request: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPSConnection(
            self.upstream_host, self.upstream_port, context=self.context, timeout=60
        )
        try:
            headers = {
                k: v
                for k, v in request.headers.items()
                if k.lower() not in ("host", "connection", "accept-encoding")
            }
            conn.request(request.command, request.path, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            kept = [
                (k, v)
                for k, v in response.getheaders()
                if k.lower() not in ("transfer-encoding", "connection", "content-length")
            ]
            return response.status, kept, data
        finally:
            conn.close()

    @staticmethod
    def _answer(
        request: BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        request.send_response(status)
        for key, value in headers or [("Content-Type", "application/json")]:
            request.send_header(key, value)
        if status == 429:
            request.send_header("Retry-After", "0")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _status_body(code: int) -> bytes:
    reason = {
        409: "Conflict",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
    }
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": f"injected by the pathways-chaos error proxy ({code})",
            "reason": reason.get(code, "InternalError"),
            "code": code,
        }
    ).encode()


@contextlib.contextmanager
def error_proxy(server: str, ca_file: str) -> Iterator[ErrorProxy]:
    proxy = ErrorProxy(server, ca_file)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def client_through(proxy: ErrorProxy, token: str) -> Any:
    """An ApiClient whose every request goes through the proxy (bearer token as usual)."""
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = proxy.url
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    cfg.retries = 0
    return client.ApiClient(cfg)
