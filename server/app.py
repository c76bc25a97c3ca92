"""create_app(settings) -> Starlette."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from server.engine.context import ServerContext, create_context
from server.html import html_routes
from server.http.observe import RequestObserver
from server.telemetry.records import Recorder
from server.http.pipeline import Pipeline
from server.http.responses import base_url
from server.http.routes import fhir_routes, http_exception
from server.ops.checks import validate
from server.ops.health import Readiness, ops_routes
from server.telemetry.metrics import Metrics
from server.settings import Settings


def create_app(settings: Settings, extra_plugins: Iterable[tuple[str, object]] = (), db: Engine | None = None,
               context: ServerContext | None = None) -> Starlette:
    validate(settings)
    ctx = context or create_context(settings, extra_plugins, db)
    metrics = Metrics.create()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # as many worker threads as pooled connections: more would only queue for one, holding the GIL to do so
        pipeline.limiter = app.state.limiter = anyio.CapacityLimiter(settings.database.pool_size)
        unwatch = metrics.watch_pool(ctx.db, settings.database.pool_size)
        yield
        # uvicorn has stopped accepting and drained the requests in flight (server.shutdown_grace_seconds)
        unwatch()
        ctx.pm.hook.stop_worker(server=ctx)  # what plugins run for this worker stops (Bulk Data's jobs)
        ctx.db.dispose()
        if ctx.hot is not None:
            await ctx.hot.close()
        metrics.process_exit()
        recorder.flush()  # the access and audit lines of the last requests

    recorder = Recorder(settings)
    middleware = [Middleware(RequestObserver, metrics=metrics, resource_types=tuple(ctx.registry.providers),
                             recorder=recorder)]
    if settings.server.cors_origins:
        middleware.append(Middleware(
            CORSMiddleware,
            allow_origins=list(settings.server.cors_origins),
            allow_methods=["GET", "HEAD", "OPTIONS"],
            allow_headers=["Authorization", "Accept", "Prefer", "Content-Type", "If-None-Match",
                           "If-Modified-Since", "X-Request-ID"],
            expose_headers=["ETag", "Last-Modified", "Location", "Content-Location", "X-Request-ID", "X-Progress",
                            "Retry-After", "WWW-Authenticate"],  # a 401's or a scope error's challenge
            max_age=600,
        ))
    pages = html_routes(lambda request: base_url(request.scope, request.headers, settings),
                        settings.server.explorer_tile_url, ctx.extensions.web)
    pipeline = Pipeline(ctx)
    # the FHIR routes first: what nearly every request asks (server.http.routes.FhirRoutes)
    app = Starlette(routes=[*fhir_routes(pipeline), *ops_routes(), *pages], middleware=middleware,
                    lifespan=lifespan, exception_handlers={HTTPException: http_exception})
    app.router.redirect_slashes = False
    app.state.ctx = ctx
    app.state.pipeline = pipeline
    app.state.metrics = metrics
    app.state.recorder = recorder
    app.state.readiness = Readiness(ctx)
    return app
