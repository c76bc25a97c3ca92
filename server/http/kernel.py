"""What the kernel holds for a connection's client, asked and bounded on its socket: the bytes it has not had
acknowledged (Linux's SIOCOUTQ), a reset that drops them at once (SO_LINGER 0: RST), and how long it may keep them
unacknowledged, after a close too (TCP_USER_TIMEOUT). Each does nothing where the socket cannot be asked (another OS,
a Unix socket, a socket already closed): the connection is then bounded by the transport's own buffer alone."""
from __future__ import annotations

import asyncio
import fcntl
import socket
import struct
import sys
import termios

_OUTQ = getattr(termios, "TIOCOUTQ", None)  # SIOCOUTQ: a socket's bytes not yet acknowledged by its peer (Linux)
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST and drops what the kernel still holds
_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux: how long output may go unacknowledged, orphans too


def unsent_in_kernel(transport: asyncio.BaseTransport) -> int:
    """Bytes the kernel holds for the connection's peer, sent or not, that it has not acknowledged."""
    sock = transport.get_extra_info("socket")
    if sock is None or _OUTQ is None:
        return 0
    try:
        held = fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return max(0, int.from_bytes(held, sys.byteorder, signed=True))


def reset_on_close(transport: asyncio.BaseTransport) -> None:
    """The transport's close then sends RST: the client learns it at once, and the kernel drops what it held."""
    _set(transport, socket.SOL_SOCKET, socket.SO_LINGER, _RESET)


def unacknowledged_at_most(transport: asyncio.BaseTransport, seconds: float) -> None:
    """Output the kernel holds unacknowledged this long is dropped, the socket closed or not. Not for an open
    connection the server means to reset itself: the kernel drops it silently, and the client is never told."""
    if _USER_TIMEOUT is not None:
        _set(transport, socket.IPPROTO_TCP, _USER_TIMEOUT, int(seconds * 1000))


def _set(transport: asyncio.BaseTransport, level: int, option: int, value: int | bytes) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(level, option, value)
    except (OSError, ValueError):
        pass  # closed already, or not TCP: nothing the kernel holds to bound
