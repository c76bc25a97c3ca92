"""Issue 39 at the edge, against a real `serve` (SQLite: no database is involved past start-up): what a connection
sends past the header cap is never read (trailers, bodies, a pipelined request's headers), a pipelining client that
does not read its answers holds a bounded amount and a slot for at most the write timeout, slow readers make room at
the connection cap, and the probes answer throughout."""
from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path

import pytest

from tests.support.live import LiveServer, live_server
from tests.support.sockets import MAX_SENT, address, outcome, read_all, read_answer, send_until_answered

CAP = 4096
LIMITS = (f"  max_header_bytes: {CAP}\n  header_timeout_seconds: 1\n  max_connections: 20\n"
          "  write_timeout_seconds: 1\n")
CHUNKED_HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(scope="module")
def abuse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("abuse")
    with live_server(tmp, f"sqlite:///{tmp / 'abuse.db'}", LIMITS) as server:
        yield server


def _probe_ms(server: LiveServer, path: str = "/healthz") -> tuple[int, float]:
    host, port = address(server)
    started = time.monotonic()
    conn = HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path)
        status = conn.getresponse().status
    finally:
        conn.close()
    return status, (time.monotonic() - started) * 1000


def _fields(size: int) -> bytes:
    """Header field lines of exactly `size` bytes (CRLFs included), beside `Host: a\\r\\n`."""
    size -= len(b"Host: a\r\n")
    lines, line = [], b"X-F: " + b"f" * 995 + b"\r\n"  # 1,002 bytes
    while size >= len(line) + 10:
        lines.append(line)
        size -= len(line)
    lines.append(b"X-G: " + b"g" * (size - 7) + b"\r\n")
    return b"Host: a\r\n" + b"".join(lines)


# ------------------------------------------------------------------ 1. trailers and bodies
@pytest.mark.parametrize("first, more", [
    pytest.param(CHUNKED_HEALTHZ + b"0\r\n", b"X-Trailer: " + b"t" * 1000 + b"\r\n", id="trailer-lines"),
    pytest.param(CHUNKED_HEALTHZ + b"0\r\nX-Trailer: ", b"t" * 1024, id="one-endless-trailer"),
    pytest.param(CHUNKED_HEALTHZ, b"400\r\n" + b"b" * 1024 + b"\r\n", id="chunks"),
    pytest.param(CHUNKED_HEALTHZ + b"1;ext=", b"e" * 1024, id="endless-chunk-extension"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 300000000\r\n\r\n", b"b" * 1024,
                 id="content-length"),
    pytest.param(CHUNKED_HEALTHZ, b"1\r\nb\r\n", id="one-byte-chunks"),
])
def test_trailers_and_bodies_count_against_the_header_cap(abuse_server: LiveServer, first: bytes,
                                                          more: bytes) -> None:
    with socket.create_connection(address(abuse_server), timeout=10) as sock:
        sent = send_until_answered(sock, first, more)
        answer = read_answer(sock)
    outcome(*answer, 431, "too-long")
    assert sent < MAX_SENT // 2


@pytest.mark.parametrize("first, trickle", [
    pytest.param(CHUNKED_HEALTHZ + b"0\r\n", b"X", id="trailer"),
    pytest.param(CHUNKED_HEALTHZ + b"400\r\n", b"b", id="chunk-data"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n", b"b", id="body"),
])
def test_a_trickled_body_or_trailer_is_timed_out_like_headers(abuse_server: LiveServer, first: bytes,
                                                              trickle: bytes) -> None:
    with socket.create_connection(address(abuse_server), timeout=10) as sock:
        sock.sendall(first)
        started = time.monotonic()
        try:
            while time.monotonic() - started < 12:  # a byte every 100 ms: within any per-read timer
                sock.sendall(trickle)
                time.sleep(0.1)
                sock.setblocking(False)
                try:
                    if sock.recv(1, socket.MSG_PEEK):
                        break
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
        except (BrokenPipeError, ConnectionResetError):
            pass
        elapsed = time.monotonic() - started
        answer = read_answer(sock)
    outcome(*answer, 408, "timeout")
    assert elapsed < 6  # the header timeout is 1 s; a trickle never timed out runs the whole 12 s


# ------------------------------------------------------------------ 2. a pipelining flood
def test_a_pipelining_client_that_never_reads_is_bounded_and_closed(abuse_server: LiveServer) -> None:
    """8 MiB of pipelined `GET /healthz`, never read: the server reads a few requests ahead and stops once its unsent
    output passes the high-water mark (its memory stays flat), the probes answer meanwhile, and the connection is
    closed after the write timeout."""
    request = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
    flood = request * ((8 << 20) // len(request))
    before = abuse_server.rss_mb()
    sock = socket.create_connection(address(abuse_server), timeout=10)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        sent, started, slowest, most = 0, time.monotonic(), 0.0, before
        closed = None
        # it is closed once the kernel's buffers hold ~4 MB of answers the client does not read and the write timeout
        # (1 s) passes: 3 s on an idle machine, longer as the machine is loaded (the answers are written at the
        # server's pace); what is held is that it closes and stays flat meanwhile, not how fast a loaded machine fills
        while closed is None and time.monotonic() - started < 120:
            try:
                sent += sock.send(flood[sent:sent + 65536] if sent < len(flood) else request)
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                closed = time.monotonic() - started
            status, ms = _probe_ms(abuse_server)
            assert status == 200
            slowest, most = max(slowest, ms), max(most, abuse_server.rss_mb())
            time.sleep(0.05)
    finally:
        sock.close()
    assert slowest < 2_000, slowest  # the issue saw probes time out (10 s): they are answered, on a loaded machine too
    assert most - before < 40, (before, most)  # the issue: +146 MB for 2 MiB
    # seen failing in full runs with parallel workers, twice for each of two causes (tests/http/test_write_timeout.py
    # holds both fixes): the server closed the connection with output unsent and the transport's resuming below its
    # low-water mark cancelled the write timer; and, on a loaded machine, the client's data stalled past the header
    # timeout, the server refused it (408) and closed it gracefully after the linger with ~1 MB of answers in the
    # kernel: the FIN waited behind answers the client never read, so it was never told (now: a reset)
    said = [line for line in abuse_server.log.read_text(errors="replace").splitlines() if "closed" in line][-5:]
    assert closed is not None, f"still open after 120 s ({sent:,} bytes sent); the server's log: {said}"


@pytest.mark.parametrize("then", [
    pytest.param(b"GET /healthz HTTP/1.1\r\nHo", id="a-request-left-unfinished"),  # 408 after the header timeout
    pytest.param(b"", id="nothing-more"),  # closed after the keep-alive timeout
])
def test_a_client_that_stops_reading_is_told_when_the_server_closes(abuse_server: LiveServer, then: bytes) -> None:
    """Answers the client never reads sit in the kernel, not in the server's buffer: the server's close waits for them,
    then resets the connection. A plain close left the client unaware (its FIN queued behind those answers) and the
    kernel holding them (found by the flood above, on a loaded machine: its client's data stalled past the header
    timeout)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(address(abuse_server))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n" * 3000 + then)  # ~0.5 MB of answers, never read
        started = time.monotonic()
        while _tcp_state(sock) != TCP_CLOSE and time.monotonic() - started < 20:
            time.sleep(0.1)
        # told within the header (1 s) or keep-alive (5 s) timeout, the linger (1 s) and the write timeout (1 s); the
        # plain close never told it (the kernel gives up on the orphan after minutes)
        assert _tcp_state(sock) == TCP_CLOSE, f"still open after {time.monotonic() - started:.0f} s"
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET  # reset, not closed


@pytest.mark.parametrize("requests", [1, 3, 50])
def test_a_client_that_half_closes_gets_every_answer(abuse_server: LiveServer, requests: int) -> None:
    """It sends its requests and shuts its side, as `nc -N` does: each is answered, then the connection is closed
    (uvicorn's default closed it at the EOF: no answer at all)."""
    with socket.create_connection(address(abuse_server), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n" * requests)
        sock.shutdown(socket.SHUT_WR)
        answers = read_all(sock)
    assert answers.count(b"HTTP/1.1 200 ") == requests, answers[-300:]


def test_a_client_that_half_closes_and_does_not_read_leaves_the_kernel_nothing(abuse_server: LiveServer) -> None:
    """Its FIN makes uvicorn close the connection at once, with answers the client does not read in the kernel: they
    are dropped after the write timeout (TCP_USER_TIMEOUT), not kept for minutes in an orphan (found by review)."""
    request = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(address(abuse_server))
        sock.sendall(request * 3000)
        sock.shutdown(socket.SHUT_WR)
        ends = (address(abuse_server)[1], sock.getsockname()[1])
        started = time.monotonic()
        while _server_end(*ends) is not None and time.monotonic() - started < 20:
            time.sleep(0.1)
        # the write timeout is 1 s; without the bound the kernel probes the client for minutes
        held = _server_end(*ends)
        assert held is None, f"the server's end is still there after 20 s, holding {held:,} bytes for the client"


def _server_end(server_port: int, client_port: int) -> int | None:
    """What the kernel holds to send on the server's end of a connection; None once that socket is gone."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, queues = fields[1], fields[2], fields[4]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            return int(queues.split(":")[0], 16)
    return None


TCP_CLOSE = 7  # tcp_info's tcpi_state once a reset is received (Linux)


def _tcp_state(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def test_a_reset_with_answers_in_progress_logs_no_application_error(abuse_server: LiveServer) -> None:
    """Pipelined searches, then the client stops reading: the write timeout resets the connection, and the answers in
    progress stop quietly: one warning saying why, no "Exception in ASGI application" traceback (found by a walk: one
    for every such reset, each an error an operator's alert would fire on)."""
    request = (f"GET /fhir/Location?_count=100 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {abuse_server.token}"
               "\r\n\r\n").encode() * 20
    before = abuse_server.log.read_text(errors="replace").count("did not drain")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(address(abuse_server))
        sock.setblocking(False)
        started, reset = time.monotonic(), False
        while not reset and time.monotonic() - started < 30:
            try:
                sock.send(request)
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                reset = True
            time.sleep(0.01)
    assert reset, "not reset within 30 s"
    deadline = time.monotonic() + 5  # the server's log line follows the reset
    while abuse_server.log.read_text(errors="replace").count("did not drain") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    log = abuse_server.log.read_text(errors="replace")
    assert log.count("did not drain") > before and "Exception in ASGI application" not in log


# ------------------------------------------------------------------ 3. slow readers at the connection cap
def test_slow_readers_make_room_at_the_connection_cap(abuse_server: LiveServer) -> None:
    """20 connections (the cap) each pipeline 30 requests for a 144 KB script and never read: a new FHIR request is
    served at once (a stalled connection is evicted to make room), and every stalled one is reset by the write
    timeout (1 s here). The clients never read: a client that reads its answers is served in full, which took this
    test's earlier form 6 to 8 s on a loaded machine and failed it at its 8 s deadline."""
    request = b"GET /static/orgunits/leaflet/leaflet.js HTTP/1.1\r\nHost: a\r\n\r\n"
    held = []
    try:
        for _ in range(20):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            sock.connect(address(abuse_server))
            sock.sendall(request * 30)
            held.append(sock)
        time.sleep(0.5)  # their output fills the buffers
        status, ms = _probe_ms(abuse_server, "/fhir/metadata")
        assert status == 401 and ms < 1000, (status, ms)  # served (no token: 401), not 503 at the cap
        deadline = time.monotonic() + 8  # the write timeout, its looks and a loaded machine's delays
        while time.monotonic() < deadline and any(_tcp_state(sock) != TCP_CLOSE for sock in held):
            time.sleep(0.1)
        open_ = [sock for sock in held if _tcp_state(sock) != TCP_CLOSE]
        assert not open_, f"{len(open_)} stalled connections not reset"
    finally:
        for sock in held:
            sock.close()


# ------------------------------------------------------------------ 7. the header cap as documented
@pytest.mark.parametrize("fields, status", [
    pytest.param(CAP, 200, id="at-the-cap"),
    pytest.param(CAP + 1, 431, id="one-byte-past"),
])
def test_the_header_cap_is_exactly_max_header_bytes(abuse_server: LiveServer, fields: int, status: int) -> None:
    with socket.create_connection(address(abuse_server), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n" + _fields(fields - len(b"Connection: close\r\n"))
                     + b"Connection: close\r\n\r\n")
        answer = read_answer(sock)
    assert answer[0] == status, answer
    if status == 431:
        outcome(*answer, 431, "too-long")


@pytest.mark.parametrize("second, status", [
    pytest.param(b"GET /healthz HTTP/1.1\r\n" + _fields(CAP + 1) + b"\r\n", 431, id="oversized-headers"),
    pytest.param(b"GET /healthz HTTP/1.1\r\n" + _fields(130_000) + b"\r\n", 431, id="130-KB-headers"),
    pytest.param(b"GET /healthz?" + b"q" * 9000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414, id="oversized-line"),
])
def test_the_cap_applies_to_a_pipelined_request(abuse_server: LiveServer, second: bytes, status: int) -> None:
    """The second request sent in the same bytes as the first is held to the same caps."""
    with socket.create_connection(address(abuse_server), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n" + second)
        data = read_all(sock)
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200"), data[:200]
    rest = rest[rest.index(b"HTTP/1.1"):]
    assert rest.startswith(f"HTTP/1.1 {status}".encode()), rest[:300]
    assert b'"too-long"' in rest


# ------------------------------------------------------------------ 4. renders off the loop
def _fhir(server: LiveServer, query: str) -> tuple[int, bytes]:
    host, port = address(server)
    conn = HTTPConnection(host, port, timeout=120)
    try:
        conn.request("GET", f"/fhir/{query}", headers={"Authorization": f"Bearer {server.token}"})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


@pytest.mark.parametrize("query", [
    pytest.param("Location?_count=100&_format=xml", id="search-xml"),
    pytest.param("Location/_history?_count=100&_format=xml", id="history-xml"),
    pytest.param("Location?_id=1,2,3,4,5,6,7&_revinclude:iterate=Location:partof&_count=100&_format=xml",
                 id="revinclude-iterate-xml"),
])
def test_the_probes_answer_while_a_long_render_runs(abuse_server: LiveServer, query: str) -> None:
    """The issue's renders (3.8 s, 4.4 s, 51.5 s on the loop, /healthz waiting as long): rendered off the loop, the
    probes answer meanwhile; the includes stop at 100 a page, saying so."""
    done: list[tuple[int, bytes]] = []
    render = threading.Thread(target=lambda: done.append(_fhir(abuse_server, query)))
    render.start()
    probes: list[float] = []
    while render.is_alive():
        status, ms = _probe_ms(abuse_server)
        assert status == 200
        probes.append(ms)
        time.sleep(0.02)
    render.join()
    status, body = done[0]
    assert status == 200 and body.startswith(b"<"), body[:300]
    assert len(probes) >= 5  # the render lasted (else this test proves nothing)
    assert max(probes) < 500, sorted(probes)[-5:]  # generous for a shared machine; bench/abuse.py measures p99
    if "revinclude" in query:
        assert body.count(b'<mode value="include"/>') == 100
        assert b"stopped at 100 included resources" in body


# ------------------------------------------------------------------ shapes not in the issue
def test_endless_blank_lines_before_a_request_count_as_its_line(abuse_server: LiveServer) -> None:
    """Blank lines may precede a request line (RFC 9112 2.2); without end they are a request line too long."""
    with socket.create_connection(address(abuse_server), timeout=10) as sock:
        sent = send_until_answered(sock, b"", b"\r\n" * 512)
        answer = read_answer(sock)
    outcome(*answer, 414, "too-long")
    assert sent < MAX_SENT // 2


@pytest.mark.parametrize("upgrade", [
    pytest.param(b"Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n",
                 id="websocket"),
    pytest.param(b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n", id="h2c"),
])
def test_an_upgrade_is_answered_as_plain_http(abuse_server: LiveServer, upgrade: bytes) -> None:
    """No protocol is switched to (no WebSocket endpoint, no HTTP/2): the request is served as the HTTP/1.1 request
    it also is, a FHIR answer (not a bare 403 of the WebSocket layer), and nothing is logged as a warning."""
    with socket.create_connection(address(abuse_server), timeout=10) as sock:
        sock.sendall(b"GET /fhir/metadata HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, close\r\nAuthorization: Bearer "
                     + abuse_server.token.encode() + b"\r\n" + upgrade + b"\r\n")
        status, headers, body = read_answer(sock)
    assert status == 200 and headers["content-type"].startswith("application/fhir+json"), (status, body[:300])
    assert b'"CapabilityStatement"' in body
    assert b"Unsupported upgrade" not in abuse_server.log.read_bytes()


@pytest.mark.parametrize("request_bytes, status", [
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"0\r\n\r\n", 400, id="length-and-chunked-smuggling"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999\r\nExpect: 100-continue\r\n\r\n", 431,
                 id="expect-continue-past-the-cap"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400, id="negative-length"),
])
def test_framing_tricks_are_refused(abuse_server: LiveServer, request_bytes: bytes, status: int) -> None:
    with socket.create_connection(address(abuse_server), timeout=10) as sock:
        sock.sendall(request_bytes)
        answer = read_answer(sock)
    assert answer[0] == status, answer
