"""The HTTP/1.1 protocol `serve` runs: uvicorn's httptools protocol, made to answer as a FHIR server where the parser
would answer by itself.

- Raw non-ASCII bytes in a request line (`GET /fhir/Location?name=Dédougou`, as curl sends what it is given) are
  refused by the parser (llhttp accepts only ASCII in a target). They are percent-encoded before it sees them, so
  the target reads as the UTF-8 text it is, and the request is served.
- Any request the parser still refuses gets an OperationOutcome (application/fhir+json), not uvicorn's plain
  text: 414 `too-long` for a target too long for it (about 64 KB), else 400 `invalid`.
- Limits at the edge (EdgeLimits, from the settings), each answered with an OperationOutcome and the connection
  closed, nothing read past them: a request line longer than server.max_url_length (414) or header fields longer
  than server.max_header_bytes in all (431); a request line and headers not complete within
  server.header_timeout_seconds of the connection or of the request's first byte (408: slowloris); past
  server.max_connections open connections, a new one is served for the probes only (/healthz, /readyz: 503 for
  anything else), and past that room the connection that has waited longest without a request in progress (idle,
  or still sending its headers) is closed to make room.

Under another server: `uvicorn --factory server.asgi:create --http server.http.protocol:FhirHttpToolsProtocol`.
"""
from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from server.errors import operation_outcome
from server.settings import Settings, load_settings

_HIGH = re.compile(rb"[\x80-\xff]")
_LEADING = b"\r\n"
LONG_TARGET = 8192  # a target the parser refused after this many bytes is too long (414), not malformed
LINE_SLACK = 32  # a request line's method, spaces and version beside its target
PROBE_ROOM = 16  # connections past server.max_connections, for the probes
PROBES = frozenset({b"/healthz", b"/readyz"})
FD_MARGIN = 128  # open files beside the connections: the listening socket, the database's, logs, export files
_END = b"\r\n\r\n"


@dataclass(frozen=True)
class EdgeLimits:
    max_line: int
    max_head: int  # request line and headers
    header_timeout_s: float
    max_connections: int

    @staticmethod
    def of(settings: Settings) -> EdgeLimits:
        server = settings.server
        line = server.max_url_length + LINE_SLACK
        return EdgeLimits(line, line + server.max_header_bytes, float(server.header_timeout_seconds),
                          server.max_connections)


def open_files_needed(settings: Settings) -> int:
    """The open files a worker may need at its connection cap (`serve` raises its soft limit to it)."""
    return settings.server.max_connections + PROBE_ROOM + FD_MARGIN


@cache
def edge_limits() -> EdgeLimits:
    """The worker's limits, from the settings `serve` hands its workers ($ORGUNIT_FHIR_SETTINGS)."""
    return EdgeLimits.of(load_settings())


def _outcome_response(status: int, code: str, diagnostics: str, default_headers: list[tuple[bytes, bytes]],
                      extra: bytes = b"") -> bytes:
    body = orjson.dumps(operation_outcome("error", code, diagnostics))
    head = [STATUS_LINE[status]]
    for name, value in default_headers:
        head.extend([name, b": ", value, b"\r\n"])
    head.extend([b"content-type: application/fhir+json\r\n", extra,
                 b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                 b"connection: close\r\n\r\n", body])
    return b"".join(head)


def encode_request_line(data: bytes) -> tuple[bytes, bool]:
    """`data` with the non-ASCII bytes of its first line percent-encoded, and whether that line is complete."""
    start = len(data) - len(data.lstrip(_LEADING))
    end = data.find(b"\n", start)
    line = data[start:] if end < 0 else data[start:end]
    if _HIGH.search(line):
        line = _HIGH.sub(lambda m: b"%%%02X" % m.group()[0], line)
        data = data[:start] + line + (b"" if end < 0 else data[end:])
    return data, end >= 0


class FhirHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with UTF-8 request targets, FHIR answers to what the parser refuses and the
    limits at the edge."""

    limits: EdgeLimits | None = None  # None: edge_limits(), the worker's settings
    idle: dict[FhirHttpToolsProtocol, None] = {}  # per worker: connections without a request in progress, oldest first

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_line = True  # the next bytes start a request line
        self._limits = self.limits or edge_limits()
        self._head: int | None = 0  # bytes of the current request's line and headers; None once they are complete
        self._tail = b""  # the last bytes of the head read so far (its end may span two reads)
        self._timer: asyncio.TimerHandle | None = None
        self._probes_only = False

    # ------------------------------------------------------------------ connections
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits, open_now = self._limits, len(self.connections)
        if open_now > limits.max_connections + PROBE_ROOM:
            oldest = next(iter(self.idle), None)
            if oldest is None:  # every connection is busy with a request: this one waits for none
                transport.close()
                return
            oldest._close()
        self._probes_only = open_now > limits.max_connections
        self._waiting(True)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._waiting(False)
        self._disarm()
        super().connection_lost(exc)

    def _waiting(self, idle: bool) -> None:
        if idle:
            self.idle[self] = None
        else:
            self.idle.pop(self, None)

    def _close(self) -> None:
        self._waiting(False)
        self._disarm()
        self.transport.close()

    # ------------------------------------------------------------------ the header timeout
    def _arm(self) -> None:
        if self._timer is None:
            self._timer = self.loop.call_later(self._limits.header_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._head is not None and not self.transport.is_closing():
            self._refuse(408, "timeout", f"the request line and headers did not arrive within "
                                         f"{self._limits.header_timeout_s:g} s")

    # ------------------------------------------------------------------ reading
    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # refused: nothing more is read
        if self._head is not None:
            self._arm()
            if self._over(data):
                return
        if self._request_line:
            data, complete = encode_request_line(data)
            self._request_line = not complete
        super().data_received(data)

    def _over(self, data: bytes) -> bool:
        """Whether this read takes the request's line or head past its limit (then answered, and closed)."""
        assert self._head is not None
        seen = self._tail + data
        end = seen.find(_END)
        taken = len(data) if end < 0 else end + len(_END) - len(self._tail)
        head = self._head + taken
        line_end = seen.find(b"\n") if self._request_line else 0
        line = self._head + (len(data) if line_end < 0 else line_end - len(self._tail))
        limits = self._limits
        if self._request_line and line > limits.max_line:
            self._refuse(414, "too-long", f"the request line is longer than {limits.max_line:,} bytes")
            return True
        if head > limits.max_head:
            self._refuse(431, "too-long", f"the request header fields are longer than "
                                          f"{limits.max_head - limits.max_line:,} bytes in all")
            return True
        self._head, self._tail = head, seen[-3:]
        return False

    def on_headers_complete(self) -> None:
        self._head, self._tail = None, b""
        self._disarm()
        self._waiting(False)
        path = self.url.split(b"?", 1)[0]
        if self._probes_only and path not in PROBES:
            self._refuse(503, "transient", f"the server holds its {self._limits.max_connections:,} connections; "
                                           "try again shortly", b"retry-after: 1\r\n")
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.transport.is_closing():
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self.transport.is_closing():
            return  # refused
        super().on_message_complete()
        self._request_line = True  # a request pipelined in the same bytes was already fed: the parser answers it
        self._head, self._tail = 0, b""

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle is not None and self.cycle.response_complete:
            self._waiting(True)

    # ------------------------------------------------------------------ answering what is refused
    def send_400_response(self, msg: str) -> None:
        target = len(getattr(self, "url", b""))  # what the parser had read of the target
        if target > LONG_TARGET:
            self._refuse(414, "too-long", f"the request target is too long ({target:,} bytes)")
        else:
            self._refuse(400, "invalid", "the HTTP request could not be parsed (a malformed request line or header); "
                                         "percent-encode the request target")

    def _refuse(self, status: int, code: str, diagnostics: str, extra: bytes = b"") -> None:
        self.transport.write(_outcome_response(status, code, diagnostics, self.server_state.default_headers, extra))
        self._close()
