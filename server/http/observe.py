"""The outermost middleware, and the one place a request is recorded.

Around every ASGI call: a request id (the caller's X-Request-ID when valid), echoed in the response and carried
by every log line written meanwhile; an OperationOutcome, not a bare 500, for any exception that escapes the app.
After the last byte, in one pass: the request metrics, the access line (every HTTP request, probes and scrapes
too, without the query string, which may carry secrets) and, for a FHIR request, the audit line (server.access.audit:
who asked what, with the query masked) from what the FHIR pipeline left in the scope (`Served`)."""
from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.access.audit import SERVED, Served, audit_fields
from server.errors import InternalError
from server.telemetry.logs import REQUEST_ID, RequestIds
from server.telemetry.records import Recorder
from server.telemetry.metrics import Metrics

log = logging.getLogger("orgunit_fhir")
OPS_PATHS = {"/healthz": "healthz", "/readyz": "readyz", "/metrics": "metrics"}
REQUEST_ID_STATE = "request_id"  # the key of the scope's state holding the request id


def labels(scope: Scope, served: Served | None, resource_types: Collection[str]) -> tuple[str, str]:
    """(interaction, resource type) for the metrics: the FHIR interaction asked, the ops endpoint's name, else
    other/none. A type that no provider serves is "unknown" (bounded labels)."""
    interaction = served.interaction if served is not None else None
    if interaction is None:
        return OPS_PATHS.get(scope.get("path", ""), "other"), "none"
    rtype = interaction.resource_type
    if rtype is None:
        return interaction.kind, "none"
    return interaction.kind, rtype if rtype in resource_types else "unknown"


def _header(scope: Scope, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), None)


class RequestObserver:
    def __init__(self, app: ASGIApp, metrics: Metrics, resource_types: Collection[str], recorder: Recorder) -> None:
        self.app = app
        self.metrics = metrics
        self.resource_types = frozenset(resource_types)
        self.recorder = recorder
        self.request_ids = RequestIds()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = self.request_ids.accept(_header(scope, b"x-request-id"))
        scope.setdefault("state", {})[REQUEST_ID_STATE] = rid
        echoed = (b"x-request-id", rid.encode("latin-1"))
        token = REQUEST_ID.set(rid)
        started = time.perf_counter()
        response: dict[str, Any] = {"status": 500, "bytes": 0, "started": False}

        async def observed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                response["status"], response["started"] = message["status"], True
                headers = list(message.get("headers", ()))
                if not any(k.lower() == b"x-request-id" for k, _ in headers):
                    headers.append(echoed)
                message["headers"] = headers
            elif message["type"] == "http.response.body":
                response["bytes"] += len(message.get("body", b""))
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, observed_send)
        except Exception as exc:
            if response["started"]:
                raise
            log.error("request %s %s %s failed: %s", rid, scope["method"], scope["path"], type(exc).__name__,
                      exc_info=exc)
            await _internal_error(rid, observed_send)
        finally:
            self.metrics.in_flight.dec()
            self._record(scope, rid, response["status"], response["bytes"], time.perf_counter() - started)
            REQUEST_ID.reset(token)

    def _record(self, scope: Scope, rid: str, status: int, sent: int, seconds: float) -> None:
        """The metrics, the access line and the audit line of one request."""
        served: Served | None = scope["state"].get(SERVED)
        interaction, rtype = labels(scope, served, self.resource_types)
        self.metrics.observe(interaction, rtype, status, seconds)
        recorder = self.recorder
        if recorder.access:
            client = scope.get("client")
            recorder.access_line(f'{scope["method"]} {scope["path"]} {status}', rid, {
                "method": scope["method"], "path": scope["path"], "status": status,
                "duration_ms": round(seconds * 1000, 3), "bytes": sent, "client": client[0] if client else None,
                "forwarded_for": _header(scope, b"x-forwarded-for"), "user_agent": _header(scope, b"user-agent"),
                "interaction": interaction, "resource_type": rtype})
        if served is not None and recorder.audit:
            fields = audit_fields(scope, served, rid, status, seconds)
            recorder.audit_line(fields.pop("request_id"), fields)


async def _internal_error(rid: str, send: Send) -> None:
    error = InternalError(f"internal server error (request id {rid})")
    body = orjson.dumps(error.outcome())
    await send({"type": "http.response.start", "status": 500,
                "headers": [(b"content-type", b"application/fhir+json"), (b"content-length", str(len(body)).encode()),
                            (b"x-request-id", rid.encode())]})
    await send({"type": "http.response.body", "body": body})
