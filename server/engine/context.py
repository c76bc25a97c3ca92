"""Everything built once at start-up: settings, plugins, providers, database, auth, capabilities."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy
from sqlalchemy import Engine

from server.access.tokens import Authenticator
from server.engine.capabilities import build_capability_statement
from server.extensions import Extensions
from server.storage.freshness import CountCache, Freshness
from server.plugins import get_plugin_manager
from server.declare.provider import ResourceProvider
from server.declare.registry import Registry
from server.access.ratelimit import RateLimiter
from server.access.tenancy import Scoper
from server.search.bodies import body_query
from server.settings import Settings
from server.storage.backend import translate_errors
from server.storage.cache import Bounded
from server.storage.db import create_db_engine
from server.storage.hot import HotDatabase, hot_database
from server.storage.prepared import Prepared


MAX_STATEMENTS = 1000  # compiled shapes of statements
MAX_TEMPLATES = 1000  # count and page statements of search shapes (server.engine.templates)
MAX_PAGES = 4096  # page statements of the searches seen last, as sent
MAX_CONDITIONS = 2048  # compiled conditions of chained and _has parameters
MAX_BASES = 64  # [base] addresses whose capability statement is kept rendered
MAX_CALLERS = 4096  # verified tokens whose caller (scope, rate-limit key) is kept


@dataclass(frozen=True)
class ServerContext:
    settings: Settings
    pm: pluggy.PluginManager
    registry: Registry
    db: Engine
    authenticator: Authenticator
    capability_statement: dict[str, Any]
    freshness: Freshness
    counts: CountCache
    reads: Mapping[str, Prepared]  # resource type -> its read of stored bodies, compiled once
    scoped_reads: Mapping[str, Prepared]  # the same, with the row's partition and path (restricted callers)
    scoper: Scoper
    extensions: Extensions  # migration chains (the schema), commands, load formats, demo data
    rate_limiter: RateLimiter | None = None  # per subject, when server.rate_limit_per_minute is set
    hot: HotDatabase | None = None  # the driver's own connection on the event loop (server.engine.drivers)
    # statements compiled once per shape (server.storage.prepared.driver_sql), their values apart
    statements: Bounded[Any] = field(default_factory=lambda: Bounded(MAX_STATEMENTS))
    # the count and page statements of the search shapes seen, their values bound per request
    templates: Bounded[Any] = field(default_factory=lambda: Bounded(MAX_TEMPLATES))
    # the page statements of the searches seen, as sent (server.engine.searches): another position of the same
    # search binds its new position only
    pages: Bounded[Any] = field(default_factory=lambda: Bounded(MAX_PAGES))
    # the conditions of chained and _has parameters, by data generation and scope (server.engine.chaining)
    conditions: Bounded[Any] = field(default_factory=lambda: Bounded(MAX_CONDITIONS))
    # callers by verified token (its Principal, the Caller, the rate-limit key): the access_scope hook runs once
    # per token, not per request (server.http.pipeline's Admission)
    callers: Bounded[Any] = field(default_factory=lambda: Bounded(MAX_CALLERS))
    # the capability statement as sent, by [base] (server.engine.reads): rendered once per address clients use
    capabilities: Bounded[Any] = field(default_factory=lambda: Bounded(MAX_BASES))


def create_context(settings: Settings, extra_plugins: Iterable[tuple[str, object]] = (),
                   db: Engine | None = None, *, serving: bool = True,
                   plugins: tuple[pluggy.PluginManager, Registry] | None = None) -> ServerContext:
    """`serving`: for a server; False for in-process work (a load's look-ups), which verifies no token and so
    creates no JWT secret. `plugins`: the plugin manager of these settings and its registry, when the caller has
    them already (a load: collecting them again is most of the time its first look-up takes)."""
    if plugins is None:
        pm = get_plugin_manager(settings, extra_plugins)
        plugins = (pm, Registry.collect(pm, settings))
    pm, registry = plugins
    extensions = Extensions.collect(pm, settings)
    db = db if db is not None else create_db_engine(settings)
    # every request's statement is a read on its own: no BEGIN/ROLLBACK round trips (the engine given keeps
    # its transactions for whoever writes with it)
    db = translate_errors(db.execution_options(isolation_level="AUTOCOMMIT"))  # storage errors, not the driver's
    prerendered = [p for p in registry if isinstance(p, ResourceProvider) and p.prerendered is not None]
    reads = {p.resource_type: Prepared.compile(body_query(p), db.dialect) for p in prerendered}
    scoped_reads = {p.resource_type: Prepared.compile(body_query(p, scoped=True), db.dialect) for p in prerendered}
    freshness = Freshness(registry)
    return ServerContext(
        settings=settings,
        pm=pm,
        registry=registry,
        db=db,
        authenticator=Authenticator(settings, create_secret=serving),
        capability_statement=build_capability_statement(registry, settings, pm,
                                                        tuple(extensions.operations.values())),
        freshness=freshness,
        counts=CountCache(),
        reads=reads,
        scoped_reads=scoped_reads,
        scoper=Scoper(freshness),
        extensions=extensions,
        rate_limiter=RateLimiter(settings.server.rate_limit_per_minute) if settings.server.rate_limit_per_minute
        else None,
        hot=hot_database(settings, db.url.render_as_string(hide_password=False)),
    )
