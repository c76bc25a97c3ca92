"""Renders too long for the event loop, kept off it: XML (fhir.resources models, ~40 ms a resource, in one call
that holds the interpreter's lock) in a process of its own (server/http/xml_worker.py, started on the first XML
answer and again if it dies), HTML pages and large pretty JSON in a worker thread. One at a time per worker (a long
render takes its turn behind the one before); the loop only waits, so the probes and every other request keep
their latency."""
from __future__ import annotations

import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.to_thread

from server.declare.rendered import json_bytes
from server.http.negotiation import Format
from server.http.responses import render

WORKER = Path(__file__).with_name("xml_worker.py")


class XmlProcess:
    """The render process and the pipe to it; one render at a time (the lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, close_fds=True)
        return self._proc

    def render(self, body: Any, pretty: bool) -> bytes:
        data = json_bytes(body)
        with self._lock:
            for attempt in (1, 2):
                proc = self._started()
                try:
                    return _exchange(proc.stdin, proc.stdout, data, pretty)  # type: ignore[arg-type]
                except (BrokenPipeError, EOFError):  # it died (killed, out of memory): once more in a new one
                    proc.kill()
                    proc.wait()
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def _exchange(sink: IO[bytes], source: IO[bytes], data: bytes, pretty: bool) -> bytes:
    sink.write(struct.pack(">IB", len(data), 1 if pretty else 0) + data)
    sink.flush()
    head = source.read(5)
    if len(head) < 5:
        raise EOFError("the XML render process ended")
    size, kind = struct.unpack(">IB", head)
    answer = source.read(size)
    if len(answer) < size:
        raise EOFError("the XML render process ended")
    if kind:
        raise RuntimeError(f"the XML render failed: {answer.decode('utf-8', 'replace')}")
    return answer


XML = XmlProcess()


async def render_apart(body: Any, fmt: Format, base: str, namespace: str) -> bytes:
    """What `server.http.responses.render(body, fmt, base, namespace=namespace)` gives, off the loop."""
    if fmt.xml and not fmt.html:
        return await anyio.to_thread.run_sync(XML.render, body, fmt.pretty)
    return await anyio.to_thread.run_sync(lambda: render(body, fmt, base, namespace=namespace))
