"""Everything built once at start-up: settings, plugins, providers, database, auth, capabilities."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pluggy
from sqlalchemy import Engine

from server.auth import Authenticator
from server.capabilities import build_capability_statement
from server.plugins import get_plugin_manager
from server.registry import Registry
from server.settings import Settings
from server.store.db import create_db_engine


@dataclass(frozen=True)
class ServerContext:
    settings: Settings
    pm: pluggy.PluginManager
    registry: Registry
    db: Engine
    authenticator: Authenticator
    capability_statement: dict[str, Any]


def create_context(settings: Settings, extra_plugins: Iterable[tuple[str, object]] = (),
                   db: Engine | None = None) -> ServerContext:
    pm = get_plugin_manager(settings, extra_plugins)
    registry = Registry.collect(pm, settings)
    return ServerContext(
        settings=settings,
        pm=pm,
        registry=registry,
        db=db if db is not None else create_db_engine(settings),
        authenticator=Authenticator(settings),
        capability_statement=build_capability_statement(registry, settings, pm),
    )
