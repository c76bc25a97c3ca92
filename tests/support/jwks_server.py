"""A local identity provider's JWKS endpoint on 127.0.0.1 (a free port) in a background thread: it serves
`document`, counts the requests, can answer an error status or stall until released, and can go down."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JwksServer:
    def __init__(self, keys: list[dict[str, Any]] | None = None) -> None:
        self.document: Any = {"keys": list(keys or [])}
        self.status = 200
        self.requests = 0
        self._count = threading.Lock()
        self.stalled = threading.Event()   # set: requests wait for `released` before answering (stall_s at most)
        self.stall_s = 10.0
        self.released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                with server._count:
                    server.requests += 1
                if server.stalled.is_set():
                    server.released.wait(server.stall_s)
                body = server.document if isinstance(server.document, bytes) else json.dumps(server.document).encode()
                try:
                    self.send_response(server.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (timeout)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/.well-known/jwks.json"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        self._up = True

    def set_keys(self, keys: list[dict[str, Any]]) -> None:
        self.document = {"keys": list(keys)}

    def stop(self) -> None:
        """Go down: connections to the port are refused from now on."""
        if self._up:
            self._up = False
            self.released.set()
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(5)

    def __enter__(self) -> JwksServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
