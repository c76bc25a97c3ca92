"""The write timeout of server.http.protocol, on the protocol itself (no server, no clock): output counts until the
client has it (the transport's buffer and what the kernel holds for it), a connection whose output does not drain is
reset, a closing one included, and one the server closes is closed once its output is delivered.

Two defects found by the pipelining-flood test (tests/http/test_abuse.py) under load:
- the server had closed a connection with output unsent; the transport then resumed writing below its low-water
  mark, which cancelled the write timer, and the connection stayed open for good;
- the server refused a request its client had not finished within the header timeout (408) and closed the
  connection after the linger, its transport's buffer empty but ~1 MB of answers in the kernel. The FIN waited behind
  answers the client never read: the client was never told, and the kernel kept the orphan and its output.

The transport is a stand-in; its socket is a real loopback TCP connection whose client does not read, so what the
kernel holds is real."""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from server.http.kernel import unsent_in_kernel
from server.http.protocol import DELIVERY_POLL_S, LINGER_BYTES, WRITE_HIGH_WATER, EdgeLimits, FhirHttpToolsProtocol


class Transport(asyncio.Transport):
    """What the protocol asks of a transport: `unsent` is its write buffer, set by the test; `sock` the socket."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self.unsent, self.closing, self.aborted, self.eof, self.reading = 0, False, False, False, True
        self.written = b""

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000), "socket": self.sock}.get(name,
                                                                                                           default)


@dataclass(frozen=True)
class Connection:
    protocol: FhirHttpToolsProtocol
    transport: Transport
    client: socket.socket  # the client's end: it reads only when the test says so

    def fill_kernel(self) -> int:
        """The server's end writes until the kernel holds all it will for a client that does not read."""
        self.transport.sock.setblocking(False)
        try:
            while True:
                self.transport.sock.send(b"x" * 65536)
        except BlockingIOError:
            pass
        held = unsent_in_kernel(self.transport)
        assert held > 0
        return held

    def client_reads(self, at_most: int | None = None) -> None:
        """The client reads what the kernel holds for it (`at_most` bytes), until the server's end sees it acknowledged."""
        self.client.settimeout(5)
        target = 0 if at_most is None else max(0, unsent_in_kernel(self.transport) - at_most)
        deadline = time.monotonic() + 10
        while unsent_in_kernel(self.transport) > target:
            assert time.monotonic() < deadline, "the kernel did not deliver what the client read"
            self.client.recv(65536 if at_most is None else min(at_most, 65536))
            if at_most is not None:
                at_most -= 65536
                if at_most <= 0:
                    break

    def reset(self) -> bool:
        """Whether the server's end was set to reset (RST) when closed."""
        on, seconds = struct.unpack("ii", self.transport.sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8))
        return bool(on) and seconds == 0


@pytest.fixture
def connection() -> Iterator[Connection]:
    loop = asyncio.new_event_loop()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(listener.getsockname())
        ours, _ = listener.accept()
    protocol = FhirHttpToolsProtocol(Config(app=app, log_level="warning"), ServerState(), {}, _loop=loop)
    protocol._limits = EdgeLimits(max_line=8192, max_fields=65536, header_timeout_s=5, max_connections=10,
                                  write_timeout_s=1)
    transport = Transport(ours)
    protocol.connection_made(transport)
    try:
        yield Connection(protocol, transport, client)
    finally:
        protocol._disarm()
        protocol._disarm_write()
        ours.close()
        client.close()
        loop.close()


def _timed_out(protocol: FhirHttpToolsProtocol) -> None:
    """The write timer's period passes."""
    assert protocol._write_timer is not None, "no write timer: the connection would stay open for good"
    protocol._write_timer.cancel()
    protocol._write_timed_out()


# ------------------------------------------------------------------ output in the transport's buffer
@pytest.mark.parametrize("closed_by", ["a-close", "no-close"])
def test_output_that_does_not_drain_resets_the_connection(connection: Connection, closed_by: str) -> None:
    protocol, transport = connection.protocol, connection.transport
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    if closed_by == "a-close":
        protocol._close()
    _timed_out(protocol)
    assert transport.aborted and connection.reset()


def test_a_closing_connection_resumed_below_its_low_water_mark_still_times_out(connection: Connection) -> None:
    protocol, transport = connection.protocol, connection.transport
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    protocol._close()  # closed, its output waiting
    transport.unsent = 10_000  # the kernel took some: below the low-water mark, the transport resumes writing
    protocol.resume_writing()
    _timed_out(protocol)  # it drained in that period: another one
    assert not transport.aborted
    _timed_out(protocol)  # the client still does not read
    assert transport.aborted and connection.reset()


def test_output_that_drains_keeps_the_connection(connection: Connection) -> None:
    protocol, transport = connection.protocol, connection.transport
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    transport.unsent = WRITE_HIGH_WATER // 2  # the client reads, slowly: another period
    _timed_out(protocol)
    assert not transport.aborted
    transport.unsent = 0
    protocol.resume_writing()
    assert protocol._write_timer is None and not transport.aborted and not transport.closing


# ------------------------------------------------------------------ output the kernel holds: the server's closes
def _refused(protocol: FhirHttpToolsProtocol) -> None:
    protocol._refuse(408, "timeout", "the request did not arrive in time")
    protocol._close()  # its linger ends


CLOSES: list[tuple[str, Callable[[FhirHttpToolsProtocol], None]]] = [
    ("a-refusal-after-its-linger", _refused),
    ("the-keep-alive-timeout", lambda protocol: protocol.timeout_keep_alive_handler()),
    ("a-close", lambda protocol: protocol._close()),
]


@pytest.mark.parametrize("close", [close for _, close in CLOSES], ids=[name for name, _ in CLOSES])
def test_a_close_waits_for_the_output_the_kernel_holds_and_resets_a_client_that_does_not_read(
        connection: Connection, close: Callable[[FhirHttpToolsProtocol], None]) -> None:
    protocol, transport = connection.protocol, connection.transport
    connection.fill_kernel()  # the transport's own buffer is empty
    close(protocol)
    assert not transport.closing, "closed with its output in the kernel: its FIN would wait behind it, unheard"
    assert transport.eof and protocol in protocol.stalled  # FIN after the output; room is made from it first
    protocol.data_received(b"GET /fhir/metadata HTTP/1.1\r\nHost: a\r\n\r\n")
    assert protocol.cycle is None  # what it sends meanwhile is dropped
    _timed_out(protocol)
    assert transport.aborted and connection.reset()


@pytest.mark.parametrize("close", [close for _, close in CLOSES], ids=[name for name, _ in CLOSES])
def test_a_close_whose_output_is_delivered_closes_without_a_reset(
        connection: Connection, close: Callable[[FhirHttpToolsProtocol], None]) -> None:
    protocol, transport = connection.protocol, connection.transport
    held = connection.fill_kernel()
    close(protocol)
    connection.client_reads(at_most=held // 2)  # slowly: another period
    _timed_out(protocol)
    assert not transport.closing
    connection.client_reads()
    _timed_out(protocol)
    assert transport.closing and not transport.aborted and not connection.reset()
    assert protocol not in protocol.stalled


def test_a_closing_connection_looks_for_its_delivery_often_and_resets_after_the_whole_timeout(
        connection: Connection) -> None:
    """Found by review: a close waited for the whole write timeout (30 s by default) after its client had its output,
    acknowledged a round trip later; the slot, and a misleading reset at the cap, were held meanwhile."""
    protocol, transport = connection.protocol, connection.transport
    protocol._limits = replace(protocol._limits, write_timeout_s=30)
    connection.fill_kernel()
    protocol._close()
    assert protocol._period == DELIVERY_POLL_S == 1
    for _ in range(29):  # 29 looks a second apart, nothing delivered
        _timed_out(protocol)
    assert not transport.closing
    connection.client_reads()
    _timed_out(protocol)  # the next look: delivered, closed
    assert transport.closing and not transport.aborted


def test_a_closing_connection_whose_client_does_not_read_is_reset_after_the_write_timeout(
        connection: Connection) -> None:
    protocol, transport = connection.protocol, connection.transport
    protocol._limits = replace(protocol._limits, write_timeout_s=30)
    connection.fill_kernel()
    protocol._close()
    for _ in range(29):
        _timed_out(protocol)
    assert not transport.closing
    _timed_out(protocol)  # 30 s without progress
    assert transport.aborted and connection.reset()


def test_a_close_with_nothing_unsent_is_at_once(connection: Connection) -> None:
    protocol, transport = connection.protocol, connection.transport
    protocol.timeout_keep_alive_handler()
    assert transport.closing and not transport.aborted and protocol._write_timer is None


@pytest.mark.parametrize("held", ["kernel", "nothing"])
def test_room_is_made_at_once_from_an_idle_connection_without_resetting_it(connection: Connection, held: str) -> None:
    """Unacknowledged bytes may be in flight to a client that reads: closed plainly, the kernel bounded instead."""
    protocol, transport = connection.protocol, connection.transport
    if held == "kernel":
        connection.fill_kernel()
    protocol._make_room()
    assert transport.closing and not transport.aborted and not connection.reset()


CLOSED_AT_ONCE: list[tuple[str, Callable[[FhirHttpToolsProtocol], object]]] = [
    ("room-at-the-cap", lambda protocol: protocol._make_room()),
    ("shutdown", lambda protocol: protocol.shutdown()),
]


@pytest.mark.parametrize("close", [close for _, close in CLOSED_AT_ONCE], ids=[name for name, _ in CLOSED_AT_ONCE])
def test_a_close_at_once_holds_the_kernel_to_the_write_timeout(connection: Connection,
                                                               close: Callable[[FhirHttpToolsProtocol], object]) -> None:
    """TCP_USER_TIMEOUT, set at the close: what the kernel still holds is dropped after the write timeout without
    acknowledgement; never on an open connection (the kernel would drop it silently, before the server resets it and
    the client is told)."""
    user_timeout = lambda: connection.transport.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)  # noqa: E731
    assert user_timeout() == 0
    close(connection.protocol)
    assert user_timeout() == 1000


def test_a_refusal_waits_for_the_answers_before_it_however_much_the_client_sends(connection: Connection) -> None:
    """Found by review: past LINGER_BYTES of what followed a refusal the connection was closed while a request read
    before it was still being answered (its answer cut, then `write() after write_eof()`)."""
    protocol, transport = connection.protocol, connection.transport
    protocol.cycle = SimpleNamespace(response_complete=False)  # a request read before is being answered
    protocol._refuse_after(400, "invalid", "the HTTP request could not be parsed")
    protocol.flow.resume_reading()  # uvicorn resumes reading between the answers
    protocol.data_received(b"x" * (LINGER_BYTES + 1))
    assert not transport.closing and not transport.eof and not transport.reading
    protocol.cycle.response_complete = True
    protocol.on_response_complete()  # the answer before it is complete: now the refusal, then the close
    assert b" 400 " in transport.written and transport.eof


@pytest.mark.parametrize("arrives", ["while-held", "before-the-last-answer"])
def test_a_request_held_back_is_not_closed_as_idle(connection: Connection, arrives: str) -> None:
    """Found by review: uvicorn's keep-alive timer counts only the requests handed to it, so a request held back while
    the output was above the high-water mark was dropped as idle."""
    protocol, transport = connection.protocol, connection.transport
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    request = b"GET /fhir/metadata HTTP/1.1\r\nHost: a\r\n\r\n"
    if arrives == "while-held":
        protocol.timeout_keep_alive_task = protocol.loop.call_later(5, protocol.timeout_keep_alive_handler)
        protocol.data_received(request)
    else:
        protocol._buf += request
        protocol.cycle = SimpleNamespace(response_complete=True)
        protocol.on_response_complete()  # uvicorn arms its keep-alive timer: no request is pending that it knows of
    assert bytes(protocol._buf) == request and protocol.timeout_keep_alive_task is None


def test_the_kernel_is_asked_of_the_socket_it_holds_for(connection: Connection) -> None:
    assert unsent_in_kernel(connection.transport) == 0
    held = connection.fill_kernel()
    assert held >= 65536
    connection.client_reads()
    assert unsent_in_kernel(connection.transport) == 0


# ------------------------------------------------------------------ the client's half-close
REQUEST = b"GET /fhir/metadata HTTP/1.1\r\nHost: a\r\n\r\n"


@pytest.mark.parametrize("pending", ["an-answer", "a-request-held-back", "nothing", "part-of-a-request"])
def test_a_half_closed_client_gets_its_answers_then_the_close(connection: Connection, pending: str) -> None:
    """uvicorn's default closed the connection at its EOF: a client that sends its request and shuts its side (as
    `nc -N` does) got no answer at all (found by a walk)."""
    protocol, transport = connection.protocol, connection.transport
    if pending == "an-answer":
        protocol.cycle = SimpleNamespace(response_complete=False)
    elif pending == "a-request-held-back":
        protocol.cycle = SimpleNamespace(response_complete=True)
        protocol._buf += REQUEST
    elif pending == "part-of-a-request":
        protocol._buf += REQUEST[:20]
    assert protocol.eof_received() is True  # the transport stays open for the answers
    answered_first = pending in ("an-answer", "a-request-held-back")
    assert transport.closing is not answered_first
    if answered_first:
        protocol._buf.clear()  # handed on and answered
        protocol.cycle = SimpleNamespace(response_complete=True)
        protocol.on_response_complete()
        assert transport.closing


# ------------------------------------------------------------------ answers in progress at a reset
def _cycle() -> SimpleNamespace:
    return SimpleNamespace(response_complete=False, disconnected=False, message_event=asyncio.Event())


def test_a_reset_stops_every_answer_in_progress_quietly(connection: Connection) -> None:
    """uvicorn marks only the newest request read as disconnected, a loop turn after the reset: the one being answered
    (older, pipelined) wrote on, and uvloop raised on the closed transport (a traceback logged as an error)."""
    protocol, transport = connection.protocol, connection.transport
    running, queued = _cycle(), _cycle()
    protocol._running, protocol.cycle = running, queued
    protocol.pipeline.appendleft((queued, None))
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    _timed_out(protocol)  # no progress: reset
    assert transport.aborted and running.disconnected and queued.disconnected
    assert not protocol.flow.write_paused  # a send waiting for the output to drain wakes, and returns


def test_the_request_being_answered_is_known_to_the_protocol() -> None:
    """It is known through uvicorn's `_start_asgi_task` (0.54): an upgrade that renames it fails here, not silently."""
    assert "_start_asgi_task" in vars(HttpToolsProtocol) and "_start_asgi_task" in vars(FhirHttpToolsProtocol)


def test_an_answered_request_is_not_kept_while_the_connection_waits(connection: Connection) -> None:
    protocol = connection.protocol
    protocol._running = protocol.cycle = SimpleNamespace(response_complete=True)
    protocol.on_response_complete()
    assert protocol._running is None


def test_a_paused_connection_closed_looks_every_second_too(connection: Connection) -> None:
    """Its write timer was armed for the whole write timeout when its output passed the high-water mark; the close
    looks for its delivery every second from then on."""
    protocol, transport = connection.protocol, connection.transport
    protocol._limits = replace(protocol._limits, write_timeout_s=30)
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    assert protocol._period == 30
    protocol._close()
    assert protocol._period == DELIVERY_POLL_S and protocol in protocol.stalled
    transport.unsent = 0
    _timed_out(protocol)
    assert transport.closing and not transport.aborted
