"""A database link that a test can slow down: what the database sends waits `delay` seconds a packet, so a
request stays in flight long enough for a test to act while it runs (SIGTERM, for one)."""
from __future__ import annotations

import socket
import time

from tests.proxy import Forwarder


class SlowForwarder(Forwarder):
    delay: float = 0.0  # a class default: the accepting thread starts in Forwarder.__init__

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:  # type: ignore[override]
        try:
            from_database = src.getpeername() == self.target
        except OSError:
            from_database = False
        try:
            while data := src.recv(65536):
                if from_database and self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
