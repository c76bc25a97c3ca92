"""Limits at the edge of the server (server.http.protocol) against a real `serve`: a cap on the request line and on
the header fields (414/431 OperationOutcomes, the connection closed, nothing read past the cap), a timeout for a
request's headers (slowloris: 408, closed), and a cap on open connections that keeps room for the probes.
No database is involved past start-up: SQLite only."""
from __future__ import annotations

import resource
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from uvicorn.server import ServerState

from server.http.protocol import Waiting
from tests.support.live import CLI, LiveServer, _env, live_server
from tests.support.sockets import MAX_SENT, address as _address, outcome as _outcome, read_answer as _read_answer
from tests.support.sockets import send_until_answered as _send_until_answered
from tests.support.waiting import eventually

LIMITS = "  max_header_bytes: 4096\n  header_timeout_seconds: 1\n  max_connections: 20\n"
FILLER = b"X-Filler: " + b"a" * 1000 + b"\r\n"


@pytest.fixture(scope="module")
def edge_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("edge")
    with live_server(tmp, f"sqlite:///{tmp / 'edge.db'}", LIMITS) as server:
        yield server


@pytest.mark.parametrize("first, more, status", [
    pytest.param(b"GET /fhir/Location HTTP/1.1\r\nHost: a\r\n", FILLER, 431, id="many-headers"),
    pytest.param(b"GET /fhir/Location HTTP/1.1\r\nHost: a\r\nX-Big: ", b"b" * 1024, 431, id="one-endless-header"),
    pytest.param(b"GET /fhir/Location?name=", b"c" * 1024, 414, id="endless-request-line"),
])
def test_a_head_past_its_cap_is_refused_and_nothing_more_is_read(edge_server: LiveServer, first: bytes,
                                                                 more: bytes, status: int) -> None:
    with socket.create_connection(_address(edge_server), timeout=10) as sock:
        sent = _send_until_answered(sock, first, more)
        answer = _read_answer(sock)
    _outcome(*answer, status, "too-long")
    assert sent < MAX_SENT // 2  # the server stopped reading at the cap (the rest is what the sockets buffer)


def test_headers_within_the_cap_are_served(edge_server: LiveServer) -> None:
    with socket.create_connection(_address(edge_server), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + FILLER * 3 + b"Connection: close\r\n\r\n")
        status, _, body = _read_answer(sock)
    assert status == 200, body


def test_slow_headers_are_closed_after_the_header_timeout(edge_server: LiveServer) -> None:
    """Slowloris: connections that never finish their headers (or send nothing) are closed with a 408."""
    socks = [socket.create_connection(_address(edge_server), timeout=10) for _ in range(15)]
    try:
        for i, sock in enumerate(socks):
            if i % 3:
                sock.sendall(b"GET /fhir/Location HTTP/1.1\r\nHost: a\r\n")
        started = time.monotonic()
        deadline = started + 1.0 / 2
        while time.monotonic() < deadline:  # keep dribbling a header byte: it does not reset the timeout
            for sock in socks[1::3]:
                sock.sendall(b"X")
            time.sleep(0.1)
        answers = [_read_answer(sock, timeout=5) for sock in socks]
        elapsed = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    for answer in answers:
        _outcome(*answer, 408, "timeout")
    assert elapsed < 3


def test_past_the_connection_cap_only_probes_are_served(edge_server: LiveServer) -> None:
    """20 connections held open: a probe is still answered, a FHIR request gets 503 with Retry-After; and past the
    probes' room, new connections make room by closing the longest idle ones."""
    held = [socket.create_connection(_address(edge_server), timeout=10) for _ in range(20 + 40)]
    try:
        time.sleep(0.2)
        for path, expected in (("/healthz", 200), ("/readyz", 200), ("/fhir/metadata", 503)):
            with socket.create_connection(_address(edge_server), timeout=10) as sock:
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
                status, headers, body = _read_answer(sock)
            assert status == expected, (path, body)
            if expected == 503:
                _outcome(status, headers, body, 503, "transient")
                assert headers["retry-after"] == "1"
        closed = 0
        for sock in held:
            ready = select.select([sock], [], [], 0)[0]
            closed += bool(ready) and sock.recv(1) == b""
        assert closed >= 20  # the oldest idle ones, closed to make room
    finally:
        for sock in held:
            sock.close()
    def served() -> bool | None:
        with socket.create_connection(_address(edge_server), timeout=10) as sock:
            sock.sendall(b"GET /fhir/metadata HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            status = _read_answer(sock)[0]
        assert status in (401, 503), status  # served (no token), or still at the cap: never anything else
        return True if status == 401 else None

    # every held connection closed: once the server has seen them go, FHIR requests are served again
    eventually(served, lambda: "FHIR requests still refused at the cap after the held connections closed")


def test_a_connection_cap_past_the_open_file_limit_is_refused_by_check_config(tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n  max_connections: 1000\n", encoding="utf-8")
    done = subprocess.run([*CLI, "check-config", "--settings", str(settings)], capture_output=True, text=True,
                          timeout=120, env=_env(), preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                                                        (512, 512)))
    assert done.returncode == 1 and "FAIL  server.max_connections: 1000 connections need about 1144 open files but " \
                                    "the hard limit (ulimit -Hn) is 512" in done.stdout, done.stdout


def test_the_connections_waiting_for_room_are_the_servers_not_the_processes() -> None:
    """Each uvicorn server orders its own connections (kept in its ServerState, beside its connection set): a second
    server in the process (a test's, an embedding's) neither sees nor closes the first one's."""
    first, second = ServerState(), ServerState()
    assert Waiting.of(first) is Waiting.of(first)
    assert Waiting.of(first) is not Waiting.of(second)
