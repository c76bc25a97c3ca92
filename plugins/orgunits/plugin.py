"""The org-unit domain's tables, migration chain, commands, load formats, demo data and explorer (entry point
`orgunits`).
Its providers are the plugins `location`, `organization` and `canonical`; each names this chain too, so that
any one of them enabled alone still has its tables."""
from __future__ import annotations

from typing import Any

from plugins.orgunits.admin_commands import ACCOUNTS, DATA_SOURCES
from plugins.orgunits.check_data import CHECK_DATA
from plugins.orgunits.commands import DEMO, LOAD_FORMATS, VERSIONS
from plugins.orgunits.directory import ORGANIZATIONS
from plugins.orgunits.explorer import explorer_pages
from plugins.orgunits.mcsd import MCSD_DIRECTORY, Served, description
from plugins.orgunits.tables import MIGRATIONS
from server import (
    Command,
    DemoData,
    LoadFormat,
    Migrations,
    Settings,
    WebAssets,
    WebPage,
    hookimpl,
)


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]


@hookimpl
def register_commands(settings: Settings) -> list[Command]:
    return [VERSIONS, ACCOUNTS, DATA_SOURCES, CHECK_DATA]


@hookimpl
def register_load_formats(settings: Settings) -> list[LoadFormat]:
    return [*LOAD_FORMATS, ORGANIZATIONS]


@hookimpl
def register_demo_data(settings: Settings) -> list[DemoData]:
    return [DEMO]


@hookimpl
def register_web_pages(settings: Settings) -> list[WebPage | WebAssets]:
    return explorer_pages(settings)


@hookimpl
def update_capability_statement(statement: dict[str, Any], settings: Settings, registry: Served) -> None:
    statement["name"] = "OrgUnitFhirServer"
    statement["title"] = "Organization units as FHIR R4 Location resources (read-only)"
    statement["description"] = description(registry)  # every difference from the mCSD Directory, as served
    statement["instantiates"] = [MCSD_DIRECTORY]
