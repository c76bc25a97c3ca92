"""The access and audit lines, written without `logging`'s per-record machinery (a LogRecord, its filters,
handlers and formatter for every request): each line is formatted once, as server.telemetry.logs formats the
other lines (JSON: one object a line with time, level, logger, message, request id and fields; text: the same
layout as TEXT_FORMAT), every string in it redacted (server.telemetry.redact: no JWT nor Authorization value, from
the path, the query, a header or anywhere else), and appended to a buffer that the event loop writes out once per
turn. Nothing is lost on SIGTERM: uvicorn lets the requests in flight finish, then the app's shutdown (server.app)
flushes what is left; a line recorded outside a loop is written at once."""
from __future__ import annotations

import asyncio
import sys
import threading
from datetime import datetime, timezone
from typing import Any, TextIO

import orjson

from server.settings import Settings
from server.telemetry.logs import ACCESS, AUDIT
from server.telemetry.redact import redact

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


class Recorder:
    def __init__(self, settings: Settings, stream: TextIO | None = None) -> None:
        self.json = settings.server.log_format == "json"
        self.access = settings.server.access_log
        self.audit = settings.server.audit_log
        self.stream = stream  # None: the process's stderr at the time of writing
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._due = False

    def access_line(self, message: str, request_id: str, fields: dict[str, Any]) -> None:
        if self.access:
            self._record(ACCESS.name, message, request_id, fields)

    def audit_line(self, request_id: str, fields: dict[str, Any]) -> None:
        if self.audit:
            self._record(AUDIT.name, "request", request_id, fields)

    def _record(self, logger: str, message: str, request_id: str, fields: dict[str, Any]) -> None:
        message, request_id, fields = redact(message), redact(request_id), {k: _redacted(v) for k, v in fields.items()}
        now = datetime.now(timezone.utc)
        if self.json:
            line = orjson.dumps({"time": now.isoformat(timespec="milliseconds"), "level": "info", "logger": logger,
                                 "message": message, "request_id": request_id, **fields}, default=str).decode()
        else:  # a request's decoded path may hold control characters: escaped, so no line can be forged
            stamp = now.astimezone().strftime("%Y-%m-%d %H:%M:%S") + f",{now.microsecond // 1000:03d}"
            line = f"{stamp} INFO {logger} [{request_id}] {message}".translate(_CONTROL)
        with self._lock:
            self._lines.append(line)
            if self._due:
                return
            self._due = True
        try:
            asyncio.get_running_loop().call_soon(self.flush)
        except RuntimeError:  # no loop in this thread: at once
            self.flush()

    def flush(self) -> None:
        with self._lock:
            lines, self._lines, self._due = self._lines, [], False
        if lines:
            stream = self.stream or sys.stderr
            stream.write("\n".join(lines) + "\n")
            stream.flush()


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (list, tuple)):
        return [_redacted(item) for item in value]
    if isinstance(value, dict):
        return {redact(str(k)): _redacted(v) for k, v in value.items()}
    return value
