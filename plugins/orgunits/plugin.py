"""The org-unit domain's tables, migration chain, commands, load formats and demo data (entry point `orgunits`).
Its providers are the plugins `location`, `organization` and `canonical`; each names this chain too, so that
any one of them enabled alone still has its tables."""
from __future__ import annotations

from plugins.orgunits.commands import DEMO, LOAD_FORMATS, VERSIONS
from plugins.orgunits.tables import MIGRATIONS
from server import (
    Command,
    DemoData,
    LoadFormat,
    Migrations,
    Settings,
    hookimpl,
)


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]


@hookimpl
def register_commands(settings: Settings) -> list[Command]:
    return [VERSIONS]


@hookimpl
def register_load_formats(settings: Settings) -> list[LoadFormat]:
    return list(LOAD_FORMATS)


@hookimpl
def register_demo_data(settings: Settings) -> list[DemoData]:
    return [DEMO]
