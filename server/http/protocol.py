"""The HTTP/1.1 protocol `serve` runs: uvicorn's httptools protocol, made to answer as a FHIR server where the parser
would answer by itself.

- Raw non-ASCII bytes in a request line (`GET /fhir/Location?name=Dédougou`, as curl sends what it is given) are
  refused by the parser (llhttp accepts only ASCII in a target). They are percent-encoded before it sees them, so
  the target reads as the UTF-8 text it is, and the request is served.
- Any request the parser still refuses gets an OperationOutcome (application/fhir+json), not uvicorn's plain
  text: 414 `too-long` for a target too long for it (about 64 KB), else 400 `invalid`.
- Limits at the edge (EdgeLimits, from the settings), each answered with an OperationOutcome and the connection
  closed once the requests read before are answered (what the client still sends is dropped): a request line longer
  than server.max_url_length + 32 (414); header fields, with any body and chunked trailers, longer than
  server.max_header_bytes in all (431; server.http.framing finds where each request ends before the parser sees
  it, so a pipelined request is held to the same caps); a request not complete within
  server.header_timeout_seconds of the connection or of its first byte (408: slowloris, trickled bodies and
  trailers too).
- Flow control: the parser is handed one whole request at a time; at most READ_AHEAD requests wait behind the one
  being answered, and no request is read while the connection's unsent output is above WRITE_HIGH_WATER. Output
  that has not drained for server.write_timeout_seconds (the client does not read) resets the connection (RST: the
  kernel drops what it holds for the client at once), a closing one included.
- Output counts until the client has it: the transport's buffer and what the kernel holds for the client (Linux's
  SIOCOUTQ; up to tcp_wmem's 4 MB). A connection the server closes (a refusal after its linger, the keep-alive
  timeout) is closed once that is delivered, with its FIN after the output. A plain close with output held would
  leave the kernel an orphan the client never hears of: its FIN waits behind answers the client does not read.
  A client's half-close gets every request it sent answered, then this close. Where the connection is closed at
  once (room at the cap, `Connection: close`, shutdown), TCP_USER_TIMEOUT (Linux) holds the kernel to the write
  timeout: output not acknowledged for that long is dropped.
- Past server.max_connections open connections, a new one is served for the probes only (/healthz, /readyz); a
  request for anything else first closes the connection whose output has waited longest above the high-water mark
  (a slow reader) and is served, else it gets 503. Past the probes' room, the connection that has waited longest
  without a request in progress (idle, or still sending its headers) is closed (else a slow reader).

Under another server: `uvicorn --factory server.asgi:create --http server.http.protocol:FhirHttpToolsProtocol`.
"""
from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from server.errors import operation_outcome
from server.http.framing import Framer, Verdict
from server.http.kernel import reset_on_close, unacknowledged_at_most, unsent_in_kernel
from server.settings import Settings, load_settings

_HIGH = re.compile(rb"[\x80-\xff]")
_LEADING = b"\r\n"
LONG_TARGET = 8192  # a target the parser refused after this many bytes is too long (414), not malformed
LINE_SLACK = 32  # a request line's method, spaces and version beside its target
PROBE_ROOM = 16  # connections past server.max_connections, for the probes
PROBES = frozenset({b"/healthz", b"/readyz"})
LINGER_S = 1.0  # a refused connection's input is read and dropped this long before it is closed...
LINGER_BYTES = 256 * 1024  # ...or until this much was dropped
READ_AHEAD = 4  # requests of a connection parsed and queued behind the one being answered
WRITE_HIGH_WATER = 64 * 1024  # unsent output past which a connection's requests are no longer read
DELIVERY_POLL_S = 1.0  # how often a closing connection looks whether its client has its output
FD_MARGIN = 128  # open files beside the connections: the listening socket, the database's, logs, export files
log = logging.getLogger("orgunit_fhir.http")


@dataclass(frozen=True)
class EdgeLimits:
    max_line: int
    max_fields: int  # header fields, body and trailers of a request, in all
    header_timeout_s: float
    max_connections: int
    write_timeout_s: float = 30.0

    @staticmethod
    def of(settings: Settings) -> EdgeLimits:
        server = settings.server
        return EdgeLimits(server.max_url_length + LINE_SLACK, server.max_header_bytes,
                          float(server.header_timeout_seconds), server.max_connections,
                          float(server.write_timeout_seconds))


def open_files_needed(settings: Settings) -> int:
    """The open files a worker may need at its connection cap (`serve` raises its soft limit to it)."""
    return settings.server.max_connections + PROBE_ROOM + FD_MARGIN


@cache  # no argument: the one value of the process, read once (the settings do not change while it serves)
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


class Waiting:
    """The connections of one uvicorn server that may make room past the cap, in the order they are closed for it:
    those without a request in progress (idle, or still sending their headers), oldest first, and those whose
    output is above the high-water mark (slow readers), longest first. It lives beside the connection set it
    orders, in the server's ServerState (uvicorn's per-server state every protocol instance of it shares): one per
    worker, as the connections are, and gone with its server."""

    _KEY = "orgunit_fhir_waiting"  # its attribute on the ServerState

    def __init__(self) -> None:
        self.idle: dict[FhirHttpToolsProtocol, None] = {}
        self.stalled: dict[FhirHttpToolsProtocol, None] = {}

    @classmethod
    def of(cls, state: ServerState) -> Waiting:
        """The server's (made by its first connection)."""
        held = vars(state)
        found = held.get(cls._KEY)
        if not isinstance(found, Waiting):
            found = held[cls._KEY] = Waiting()
        return found


class FhirHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with UTF-8 request targets, FHIR answers to what the parser refuses, the limits
    at the edge and flow control: the parser is handed one whole request at a time (server.http.framing)."""

    limits: EdgeLimits | None = None  # None: edge_limits(), the worker's settings

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        waiting = Waiting.of(self.server_state)
        self.idle, self.stalled = waiting.idle, waiting.stalled  # the server's, shared by its connections
        self._limits = self.limits or edge_limits()
        self._framer = Framer(self._limits.max_line, self._limits.max_fields)
        self._buf = bytearray()  # bytes read and not yet handed to the parser (at most one request past a read)
        self._first = True  # no request has arrived yet: the header timeout runs from the connection
        self._timer: asyncio.TimerHandle | None = None  # the header timeout
        self._write_timer: asyncio.TimerHandle | None = None
        self._unsent = 0  # output not yet delivered at the last progress
        self._period = 0.0  # the write timer's
        self._quiet_s = 0.0  # time the write timer has seen pass without progress
        self._closing = False  # closed by the server: what it reads is dropped, it closes once its output is delivered
        self._probes_only = False
        self._refusal: tuple[int, str, str, bytes] | None = None  # the answer refusing the connection's next request
        self._dropped = 0  # bytes read and dropped since the refusal
        self._answered = False  # whether it was written (it waits for the requests read before to be answered)
        self._eof = False  # the client half-closed: the requests it sent are answered, then the connection is closed
        self._running: Any = None  # the request being answered (uvicorn keeps only the newest one read, self.cycle)

    # ------------------------------------------------------------------ connections
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        limits, open_now = self._limits, len(self.connections)
        if open_now > limits.max_connections + PROBE_ROOM:
            oldest = next(iter(self.idle), None)
            if oldest is not None:
                oldest._make_room()
            elif not self._evict_slow():  # every connection is busy with a request: this one waits for none
                transport.close()
                return
        self._probes_only = open_now > limits.max_connections
        self._waiting(True)
        self._arm()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        self._running = cycle
        super()._start_asgi_task(cycle, app)

    def _disconnect(self) -> None:
        """Every answer in progress stops at its next send, quietly. uvicorn marks only the newest request read, at
        connection_lost (a loop turn after an abort); an older one, pipelined, wrote on and uvloop raised on the closed
        transport: a traceback logged as the application's error for every connection reset (found by a walk)."""
        for cycle in (self._running, self.cycle, *(queued for queued, _ in self.pipeline)):
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        self.flow.resume_writing()  # a send waiting for the output to drain wakes, and returns

    def connection_lost(self, exc: Exception | None) -> None:
        self._disconnect()
        self._waiting(False)
        self._disarm()
        self._disarm_write()
        self._buf.clear()
        super().connection_lost(exc)

    def _waiting(self, idle: bool) -> None:
        if idle:
            self.idle[self] = None
        else:
            self.idle.pop(self, None)

    def _close(self) -> None:
        """Close once the client has its output (FIN after it), else reset after the write timeout; what it sends
        meanwhile is read and dropped."""
        self._waiting(False)
        self._disarm()
        if self._closing or self.transport.is_closing():
            return
        self._closing = True
        if not self._output_unsent():
            self.transport.close()
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the client that reads sees the end right after its output
        self._disarm_write()  # from now on it looks every DELIVERY_POLL_S, a paused connection's timer too
        self.stalled[self] = None  # it holds a slot for a client that has not read: room is made from it first
        self._arm_write()

    def _make_room(self) -> None:
        """Closed at once for a new connection; output the kernel holds is delivered to a client that reads (unacknowledged
        bytes may be in flight to one), and dropped after the write timeout for one that does not."""
        self._waiting(False)
        self._disarm()
        self.transport.close()
        self._unsent_bounded()

    def eof_received(self) -> bool:
        """The client's half-close (it sent its requests and shut its side): each request it sent is answered, then the
        connection is closed as the server closes one (uvicorn's default closed it at once: no answer at all)."""
        self._eof = True
        self._close_when_answered()
        return True  # the transport stays open for the answers

    def _close_when_answered(self) -> None:
        if not self._eof or self._refusal is not None:
            return  # not half-closed; or refused, which closes by itself
        if (self.cycle is not None and not self.cycle.response_complete) or self.pipeline:
            return
        if self._buf and self._framer.frame(self._buf).verdict is not Verdict.MORE:
            return  # a whole request held back: it is answered first (a part of one never completes: dropped)
        self._close()

    def shutdown(self) -> None:
        super().shutdown()
        if self.transport.is_closing():
            self._unsent_bounded()

    def _abort(self, why: str) -> None:
        """Reset (RST): the client learns it at once, and the kernel drops the output it still holds."""
        log.warning("connection from %s closed: %s", _peer(self.client), why)
        self._waiting(False)
        self._disarm()
        self._disarm_write()
        reset_on_close(self.transport)
        self._disconnect()
        self.transport.abort()

    def _evict_slow(self) -> bool:
        """Close the connection whose output has waited longest above the high-water mark (its client does not
        read), to make room; whether there was one."""
        slow = next(iter(self.stalled), None)
        if slow is None:
            return False
        slow._abort("a request needed the room of a connection whose output did not drain")
        return True

    def timeout_keep_alive_handler(self) -> None:
        """Idle past the keep-alive timeout: closed as the server closes a connection (uvicorn's closes at once, and a
        client that has not read its answers would never hear of it)."""
        self._close()

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
        if self._refused() or self._blocked():
            return  # the server holds the request back, not the client
        if self._first or self._buf:
            self._refuse_after(408, "timeout", f"the request line, headers and body did not arrive within "
                                         f"{self._limits.header_timeout_s:g} s")

    # ------------------------------------------------------------------ the write timeout
    def pause_writing(self) -> None:
        super().pause_writing()
        self.stalled[self] = None
        self._arm_write()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._closing or self.transport.is_closing():  # its close waits for the output delivered, not for the
            return                                        # transport's buffer below its low-water mark
        self._disarm_write()
        self._feed()
        self._close_when_answered()

    def _output_unsent(self) -> int:
        """Output the client does not have yet: the transport's buffer and what the kernel holds for it."""
        return self.transport.get_write_buffer_size() + unsent_in_kernel(self.transport)

    def _arm_write(self) -> None:
        if self._write_timer is None:
            self._unsent, self._quiet_s = self._output_unsent(), 0.0
            self._schedule_write()

    def _schedule_write(self) -> None:
        """The next look: after the write timeout; a closing connection every DELIVERY_POLL_S, so that it is closed
        soon after its client has its output, not a write timeout later."""
        timeout = self._limits.write_timeout_s
        self._period = min(DELIVERY_POLL_S, timeout) if self._closing else timeout
        self._write_timer = self.loop.call_later(self._period, self._write_timed_out)

    def _disarm_write(self) -> None:
        self.stalled.pop(self, None)
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timed_out(self) -> None:
        self._write_timer = None
        unsent = self._output_unsent()
        if not unsent:
            self.stalled.pop(self, None)
            if self._closing and not self.transport.is_closing():
                self.transport.close()  # delivered: the close it waited for
            return
        if unsent < self._unsent:  # it drains, slowly: the write timeout runs again from now
            self._unsent, self._quiet_s = unsent, 0.0
        else:
            self._quiet_s += self._period
            if self._quiet_s >= self._limits.write_timeout_s:
                self._abort(f"its output ({unsent:,} bytes) did not drain within {self._limits.write_timeout_s:g} s")
                return
        self._schedule_write()

    def _unsent_bounded(self) -> None:
        """A connection closed at once (room at the cap, a response without keep-alive, shutdown): the
        write timeout bounds its unsent output, ours while the transport holds it, the kernel's after the socket is
        closed (TCP_USER_TIMEOUT: output unacknowledged that long is dropped). Set at the close only: on an open
        connection the kernel would drop it silently, before the server resets it and the client is told."""
        unacknowledged_at_most(self.transport, self._limits.write_timeout_s)
        if self._output_unsent():
            self._arm_write()

    # ------------------------------------------------------------------ reading
    def _refused(self) -> bool:
        return self._refusal is not None or self._closing or self.transport.is_closing()

    def _blocked(self) -> bool:
        """Whether no further request is handed to the parser now: enough are read ahead, or output waits."""
        return len(self.pipeline) >= READ_AHEAD or self.flow.write_paused

    def data_received(self, data: bytes) -> None:
        if self._refused():  # refused or closing: what more comes is dropped
            self._dropped += len(data)
            if self._refusal is not None and not self._answered:
                self.flow.pause_reading()  # the requests read before are still answered: none of their output is cut
            elif self._dropped > LINGER_BYTES and not self.transport.is_closing():
                self._close()
            return
        self._buf += data
        self._feed()

    def _feed(self) -> None:
        """Hand the parser each whole request buffered, as long as the connection is not blocked."""
        if self._buf:  # a request is on its way or held back: not idle (uvicorn's keep-alive timer counts only the
            self._unset_keepalive_if_required()  # requests handed to it)
        while self._buf and not self._refused():
            if self._blocked():
                self.flow.pause_reading()
                self._disarm()
                return
            frame = self._framer.frame(self._buf)
            if frame.verdict is Verdict.MORE:
                break
            if frame.verdict is Verdict.LINE_TOO_LONG:
                self._refuse_after(414, "too-long", f"the request line is longer than {self._limits.max_line:,} bytes")
                return
            if frame.verdict is Verdict.FIELDS_TOO_LONG:
                self._refuse_after(431, "too-long", f"the request header fields (with any body and trailers) are "
                                                    f"longer than {self._limits.max_fields:,} bytes in all")
                return
            request = bytes(self._buf[:frame.end])
            del self._buf[:frame.end]
            self._first = False
            self._disarm()
            super().data_received(encode_request_line(request)[0])
        if self._refused():
            return
        self.flow.resume_reading()
        if self._buf:
            self._arm()  # from the first byte of a request the server is not holding back

    def on_headers_complete(self) -> None:
        self._waiting(False)
        path = self.url.split(b"?", 1)[0]
        if self._probes_only and path not in PROBES and self._evict_slow():
            self._probes_only = False  # a slow reader made room
        if self._probes_only and path not in PROBES:
            self._refuse_after(503, "transient", f"the server holds its {self._limits.max_connections:,} "
                                                 "connections; try again shortly", b"retry-after: 1\r\n")
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused():
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused():
            super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._running is not None and self._running.response_complete:
            self._running = None  # its request and answer are not kept while the connection waits for the next
        super().on_response_complete()
        if self.transport.is_closing():
            self._unsent_bounded()
            return
        if self.cycle is not None and self.cycle.response_complete:
            if self._refusal is not None:
                if not self._answered:
                    self._refuse(*self._refusal)
                return
            self._waiting(True)
        self._feed()
        self._close_when_answered()

    def _unsupported_upgrade_warning(self) -> None:
        """An `Upgrade` (WebSocket, h2c): this server serves none (`serve` runs uvicorn with ws="none"), so the request
        is answered as the plain HTTP request it also is; not a warning (uvicorn's would advise installing a WebSocket
        library, twice per request: a log any client could flood)."""
        log.debug("an upgrade to %r is not served: answered as plain HTTP", self._get_upgrade())

    # ------------------------------------------------------------------ answering what is refused
    def send_400_response(self, msg: str) -> None:
        target = len(getattr(self, "url", b""))  # what the parser had read of the target
        if target > LONG_TARGET:
            self._refuse_after(414, "too-long", f"the request target is too long ({target:,} bytes)")
        else:
            self._refuse_after(400, "invalid", "the HTTP request could not be parsed (a malformed request line or "
                                               "header); percent-encode the request target")

    def _refuse_after(self, status: int, code: str, diagnostics: str, extra: bytes = b"") -> None:
        """Refuse once the requests read before are answered (what the client sends meanwhile is dropped)."""
        if self._refusal is not None:
            return  # already refused
        if self.cycle is None or self.cycle.response_complete:
            self._refuse(status, code, diagnostics, extra)
            return
        self._refusal = (status, code, diagnostics, extra)
        self._buf.clear()
        self._disarm()
        self.flow.pause_reading()

    def _refuse(self, status: int, code: str, diagnostics: str, extra: bytes = b"") -> None:
        """Answer and close; what the client still sends meanwhile is read and dropped for up to LINGER_S (closing
        with unread bytes would reset the connection, and the client could lose the answer)."""
        self._buf.clear()
        self._refusal = (status, code, diagnostics, extra)  # nothing more is handed on
        self._answered = True
        self.transport.write(_outcome_response(status, code, diagnostics, self.server_state.default_headers, extra))
        self._waiting(False)
        self._disarm()
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self._close)
        else:
            self._close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"
