"""A TCP forwarder that a test can cut and restore, standing in for a database that goes away, or slow down
(`delay`: what the target sends waits that many seconds a packet, so a request stays in flight long enough
for a test to act while it runs: SIGTERM, for one), or pause (`pause`/`resume`: a black-holed network, as a proxy
stopped with SIGSTOP: connections are accepted by the kernel and bytes taken, but nothing passes either way)."""
from __future__ import annotations

import socket
import threading
import time


class Forwarder:
    delay: float = 0.0  # a class default: the accepting thread starts in __init__

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.up = True
        self.flowing = threading.Event()
        self.flowing.set()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.flowing.wait()
            if not self.up:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            from_target = src.getpeername() == self.target
        except OSError:
            from_target = False
        try:
            while data := src.recv(65536):
                self.flowing.wait()
                if from_target and self.delay:  # read per packet: a test slows a link already open
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

    def cut(self) -> None:
        self.up = False
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.sockets.clear()

    def pause(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def restore(self) -> None:
        self.up = True

    def close(self) -> None:
        self.resume()
        self.cut()
        self.listener.close()
