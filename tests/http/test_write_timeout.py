"""The write timeout of server.http.protocol, on the protocol itself (no socket, no clock): a connection whose output
does not drain is closed, a closed one included, whatever the transport's flow control says in between.

The pipelining-flood test (tests/http/test_abuse.py) found a connection left open for good under load: the server
had closed it (a refusal's linger, an eviction) with output unsent; the transport then resumed writing below its
low-water mark, which cancelled the write timer, and the rest of the output, never read by the client, kept the
socket open."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from server.http.protocol import WRITE_HIGH_WATER, EdgeLimits, FhirHttpToolsProtocol


class Transport(asyncio.Transport):
    """What the protocol asks of a transport; `unsent` is its write buffer, set by the test."""

    def __init__(self) -> None:
        super().__init__()
        self.unsent, self.closing, self.aborted = 0, False, False

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
        pass

    def resume_reading(self) -> None:
        pass

    def write(self, data: Any) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(name, default)


@pytest.fixture
def connection() -> Iterator[tuple[FhirHttpToolsProtocol, Transport]]:
    loop = asyncio.new_event_loop()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    protocol = FhirHttpToolsProtocol(Config(app=app, log_level="warning"), ServerState(), {}, _loop=loop)
    protocol._limits = EdgeLimits(max_line=8192, max_fields=65536, header_timeout_s=5, max_connections=10,
                                  write_timeout_s=1)
    transport = Transport()
    protocol.connection_made(transport)
    yield protocol, transport
    loop.close()


def _timed_out(protocol: FhirHttpToolsProtocol) -> None:
    """The write timer's period passes."""
    assert protocol._write_timer is not None, "no write timer: the connection would stay open for good"
    protocol._write_timer.cancel()
    protocol._write_timed_out()


@pytest.mark.parametrize("closed_by", ["a-close", "no-close"])
def test_output_that_does_not_drain_closes_the_connection(connection: tuple[FhirHttpToolsProtocol, Transport],
                                                          closed_by: str) -> None:
    protocol, transport = connection
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    if closed_by == "a-close":
        protocol._close()
    _timed_out(protocol)
    assert transport.aborted


def test_a_closed_connection_resumed_below_its_low_water_mark_still_times_out(
        connection: tuple[FhirHttpToolsProtocol, Transport]) -> None:
    protocol, transport = connection
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    protocol._close()  # closed, its output waiting
    transport.unsent = 10_000  # the kernel took some: below the low-water mark, the transport resumes writing
    protocol.resume_writing()
    _timed_out(protocol)  # the client still does not read
    assert transport.aborted


def test_output_that_drains_keeps_the_connection(connection: tuple[FhirHttpToolsProtocol, Transport]) -> None:
    protocol, transport = connection
    transport.unsent = WRITE_HIGH_WATER + 1
    protocol.pause_writing()
    transport.unsent = WRITE_HIGH_WATER // 2  # the client reads, slowly: another period
    _timed_out(protocol)
    assert not transport.aborted
    transport.unsent = 0
    protocol.resume_writing()
    assert protocol._write_timer is None and not transport.aborted
