"""Raw sockets against a live server: what an attacker sends, byte by byte, and the one answer it reads."""
from __future__ import annotations

import json
import select
import socket
from typing import Any

from tests.support.live import LiveServer

MAX_SENT = 4 << 20  # what the client is ready to send; the server must stop reading long before


def address(server: LiveServer) -> tuple[str, int]:
    host, port = server.base.removeprefix("http://").split("/")[0].split(":")
    return host, int(port)


def read_all(sock: socket.socket, timeout: float = 10) -> bytes:
    """Every byte the server sends on `sock` until it closes it (or resets it)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def read_answer(sock: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the one answer on `sock`, read until the server closes it."""
    head, _, body = read_all(sock, timeout).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
    return int(lines[0].split()[1]), headers, body


CLIENT_SEND_BUFFER = 64 << 10  # what the client's kernel holds unsent, at most (twice that, as Linux doubles it)


def send_until_answered(sock: socket.socket, first: bytes, more: bytes) -> int:
    """Send `first`, then `more` again and again until the server answers (or MAX_SENT); the bytes sent. The
    client's send buffer is fixed small: the bytes counted are then what the server took in, not what the client's
    kernel kept unsent (its buffer grows to megabytes while a loaded server is slow to answer)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CLIENT_SEND_BUFFER)
    sock.sendall(first)
    sent = len(first)
    while sent < MAX_SENT:
        if select.select([sock], [], [], 0)[0]:
            break
        try:
            sock.sendall(more)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(more)
    return sent


def outcome(status: int, headers: dict[str, str], body: bytes, expected: int, code: str) -> dict[str, Any]:
    assert status == expected, body
    assert headers["content-type"] == "application/fhir+json" and headers["connection"] == "close"
    outcome = json.loads(body)
    assert outcome["resourceType"] == "OperationOutcome" and outcome["issue"][0]["code"] == code
    return outcome

