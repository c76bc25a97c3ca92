"""The outermost middleware: a request id for every request (the caller's X-Request-ID when valid), echoed in the
response and carried by every log line written meanwhile; one access log line and the request metrics; and an
OperationOutcome, not a bare 500, for any exception that escapes the app.

The access line covers every HTTP request (probes and scrapes too) without its query string, which may carry
secrets; the audit line of server.access.audit says who asked what of the FHIR API, with the query masked."""
from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Any

import orjson
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import InternalError
from server.ops.logs import ACCESS, REQUEST_ID, accept_request_id, log_fields
from server.ops.metrics import Metrics

log = logging.getLogger("orgunit_fhir")
OPS_PATHS = {"/healthz": "healthz", "/readyz": "readyz", "/metrics": "metrics"}


def labels(scope: Scope, resource_types: Collection[str]) -> tuple[str, str]:
    """(interaction, resource type) for the metrics: what the endpoint recorded in request.state.interaction,
    the ops endpoint's name, else other/none. A type that no provider serves is "unknown" (bounded labels)."""
    interaction = scope.get("state", {}).get("interaction")
    if interaction is None:
        return OPS_PATHS.get(scope.get("path", ""), "other"), "none"
    rtype = getattr(interaction, "resource_type", None)
    if rtype is None:
        return str(interaction.kind), "none"
    return str(interaction.kind), rtype if rtype in resource_types else "unknown"


class RequestObserver:
    def __init__(self, app: ASGIApp, metrics: Metrics, resource_types: Collection[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.resource_types = frozenset(resource_types)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = accept_request_id(next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), None))
        scope.setdefault("state", {})["request_id"] = rid
        token = REQUEST_ID.set(rid)
        started = time.perf_counter()
        response: dict[str, Any] = {"status": 500, "bytes": 0, "started": False}

        async def observed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                response["status"], response["started"] = message["status"], True
                out = MutableHeaders(scope=message)
                if b"x-request-id" not in (k for k, _ in out.raw):
                    out.append("X-Request-ID", rid)
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
            seconds = time.perf_counter() - started
            self.metrics.in_flight.dec()
            interaction, rtype = labels(scope, self.resource_types)
            self.metrics.observe(interaction, rtype, response["status"], seconds)
            if ACCESS.isEnabledFor(logging.INFO):
                client, headers = scope.get("client"), Headers(scope=scope)
                log_fields(ACCESS, f'{scope["method"]} {scope["path"]} {response["status"]}',
                           request_id=rid, method=scope["method"], path=scope["path"], status=response["status"],
                           duration_ms=round(seconds * 1000, 3), bytes=response["bytes"],
                           client=client[0] if client else None, forwarded_for=headers.get("x-forwarded-for"),
                           user_agent=headers.get("user-agent"), interaction=interaction, resource_type=rtype)
            REQUEST_ID.reset(token)


async def _internal_error(rid: str, send: Send) -> None:
    error = InternalError(f"internal server error (request id {rid})")
    body = orjson.dumps(error.outcome())
    await send({"type": "http.response.start", "status": 500,
                "headers": [(b"content-type", b"application/fhir+json"), (b"content-length", str(len(body)).encode()),
                            (b"x-request-id", rid.encode())]})
    await send({"type": "http.response.body", "body": body})
