"""An app served by uvicorn on a free port of 127.0.0.1 in a background thread, for client libraries that need a
real HTTP server (they open their own connections)."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.applications import Starlette

from tests.support.live import free_port


@contextmanager
def served(app: Starlette) -> Iterator[str]:
    """The server's root URL (http://127.0.0.1:PORT) while the app is served."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        if not thread.is_alive() or time.time() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
