"""The org-unit domain's tables, migration chain, commands, load formats, demo data and explorer (entry point
`orgunits`).
Its providers are the plugins `location`, `organization` and `canonical`; each names this chain too, so that
any one of them enabled alone still has its tables."""
from __future__ import annotations

from typing import Any

from plugins.orgunits.admin_commands import ACCOUNTS, DATA_SOURCES
from plugins.orgunits.commands import DEMO, LOAD_FORMATS, VERSIONS
from plugins.orgunits.explorer import explorer_pages
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

MCSD_DIRECTORY = "https://profiles.ihe.net/ITI/mCSD/CapabilityStatement/IHE.mCSD.Directory"


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]


@hookimpl
def register_commands(settings: Settings) -> list[Command]:
    return [VERSIONS, ACCOUNTS, DATA_SOURCES]


@hookimpl
def register_load_formats(settings: Settings) -> list[LoadFormat]:
    return list(LOAD_FORMATS)


@hookimpl
def register_demo_data(settings: Settings) -> list[DemoData]:
    return [DEMO]


@hookimpl
def register_web_pages(settings: Settings) -> list[WebPage | WebAssets]:
    return explorer_pages(settings)


@hookimpl
def update_capability_statement(statement: dict[str, Any], settings: Settings) -> None:
    statement["name"] = "OrgUnitFhirServer"
    statement["title"] = "Organization units as FHIR R4 Location resources (read-only)"
    statement["description"] = (
        "Read-only FHIR R4 server publishing a health-system organization-unit pyramid. GET and HEAD only; every "
        "request needs a JWT bearer token. It instantiates the IHE mCSD Directory capability statement for reading "
        "(ITI-90 search, ITI-91 _history) and differs by design: no create/update/delete, no POST "
        "[base]/[type]/_search, no transaction.")
    statement["instantiates"] = [MCSD_DIRECTORY]
