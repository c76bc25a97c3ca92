"""/healthz, /readyz and /metrics: for orchestrators and Prometheus, outside /fhir and without a FHIR token."""
from __future__ import annotations

import hmac
import ipaddress
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import orjson
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from sqlalchemy.exc import SQLAlchemyError

from server.bulk.files import directory_problem
from server.engine.context import ServerContext
from server.declare.instants import as_utc
from server.errors import StorageError
from server.telemetry.metrics import Metrics
from server.declare.provider import ResourceProvider
from server.storage.db import once_more_if_dropped
from server.storage.migrate import describe
from server.storage.replicas import PRIMARY, read_router

log = logging.getLogger("orgunit_fhir")
PROBE_TIMEOUT_S = 3.0
FORWARDING_HEADERS = ("x-forwarded-for", "forwarded", "x-real-ip")
NO_STORE = {"Cache-Control": "no-store"}


def _json(body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json",
                    headers={**NO_STORE, **(headers or {})})


async def healthz(request: Request) -> Response:
    """The process answers: no database, no token."""
    return _json({"status": "ok"})


class Readiness:
    """May this process take traffic: its database answers with the current schema and its plugins loaded.
    The change between ready and unready is logged once, not at every probe."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.schema = ctx.extensions.schema
        self.head = self.schema.heads()
        self._ready: bool | None = None
        self._lock = threading.Lock()

    def probe(self) -> tuple[dict[str, Any], str | None]:
        """The checks, and what went wrong for the log (the body names only the kind of failure)."""
        checks: dict[str, Any] = {"plugins": "ok" if len(self.ctx.registry.providers) else
                                  "no resource provider is registered"}
        problem: str | None = None

        def read() -> tuple[Any, str]:
            with self.ctx.db.connect() as conn:
                return self.schema.current(conn), conn.info.get("database", PRIMARY)

        try:
            revision, checks["read_from"] = once_more_if_dropped(read)
            checks["database"] = "ok"
            checks["schema"] = "ok" if revision == self.head else (
                f"at {describe(revision)}, this server needs {describe(self.head)}: run orgunit-fhir migrate")
        except StorageError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
            checks["database"], checks["schema"] = f"unreachable ({type(cause).__name__})", "unknown"
            problem = str(exc).strip() or type(exc).__name__
        except SQLAlchemyError as exc:
            checks["database"], checks["schema"] = f"unavailable ({type(exc).__name__})", "unknown"
            problem = str(exc).strip() or type(exc).__name__
        router = read_router(self.ctx.db)
        if router is not None:
            checks["replicas"] = router.status()
        if self.ctx.settings.bulk.enabled:
            unwritable = directory_problem(self.ctx.settings)
            checks["bulk"] = "ok" if unwritable is None else "the export directory cannot be written"
            problem = problem or unwritable
        return checks, problem

    def report(self, checks: dict[str, Any], problem: str | None) -> tuple[bool, dict[str, Any]]:
        ready = all(checks.get(k) == "ok" for k in ("plugins", "database", "schema")) and checks.get("bulk", "ok") == "ok"
        with self._lock:
            previous, self._ready = self._ready, ready
        if not ready and previous is not False:
            log.warning("not ready: %s", problem or {k: v for k, v in checks.items() if v != "ok"})
        elif ready and previous is False:
            log.info("ready again: the database answers")
        return ready, {"status": "ready" if ready else "unready", "checks": checks}


async def readyz(request: Request) -> Response:
    readiness: Readiness = request.app.state.readiness
    checks: dict[str, Any] = {"plugins": "ok" if readiness.ctx.registry.providers else
                              "no resource provider is registered", "database": "timeout", "schema": "unknown"}
    router = read_router(readiness.ctx.db)
    if router is not None:
        checks["replicas"] = router.status()
    problem: str | None = f"the database did not answer within {PROBE_TIMEOUT_S}s"
    with anyio.move_on_after(PROBE_TIMEOUT_S):
        checks, problem = await anyio.to_thread.run_sync(readiness.probe, abandon_on_cancel=True)
    ready, body = readiness.report(checks, problem)
    return _json(body, 200 if ready else 503, {"Retry-After": "5"} if not ready else None)


def metrics_denied(request: Request, token: str | None) -> Response | None:
    """With server.metrics_token: that bearer token. Without: loopback callers only, and not through a proxy
    (a request that a reverse proxy forwarded comes from loopback too, but carries X-Forwarded-For)."""
    if token is not None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        return _json({"error": "/metrics needs Authorization: Bearer <server.metrics_token>"}, 401,
                     {"WWW-Authenticate": 'Bearer realm="metrics"'})
    host = request.client.host if request.client else ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback and not any(h in request.headers for h in FORWARDING_HEADERS):
        return None
    return _json({"error": "/metrics answers loopback clients only; set server.metrics_token to scrape it "
                           "from elsewhere"}, 403)


def refresh_data_gauges(ctx: ServerContext, metrics: Metrics) -> None:
    """The newest version of each versioned type (what Freshness tracks), read at scrape time."""
    with ctx.db.connect() as conn:
        for provider in ctx.registry:
            if isinstance(provider, ResourceProvider) and provider.versioning is not None:
                generation = ctx.freshness.generation(conn, provider)
                if generation is not None:
                    metrics.data_generation.labels(provider.resource_type).set(as_utc(generation[0]).timestamp())


async def metrics_endpoint(request: Request) -> Response:
    ctx: ServerContext = request.app.state.ctx
    metrics: Metrics = request.app.state.metrics
    denied = metrics_denied(request, ctx.settings.server.metrics_token)
    if denied is not None:
        return denied
    with anyio.move_on_after(PROBE_TIMEOUT_S):
        try:
            await anyio.to_thread.run_sync(refresh_data_gauges, ctx, metrics, abandon_on_cancel=True)
        except SQLAlchemyError as exc:  # the database is down: the request metrics still matter most
            log.debug("metrics: data gauges not refreshed: %s", exc)
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST, headers=NO_STORE)


def _route(path: str, endpoint: Callable[[Request], Any]) -> Route:
    return Route(path, endpoint, methods=["GET", "HEAD"])


def ops_routes() -> list[Route]:
    return [_route("/healthz", healthz), _route("/readyz", readyz), _route("/metrics", metrics_endpoint)]
