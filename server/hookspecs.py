"""Hook specifications. Hooks are keyword-only, synchronous and cheap: no database I/O in a hook."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from server.access.tokens import Principal
    from server.declare.extensions import Command, DemoData, LoadFormat
    from server.errors import FhirError
    from server.declare.interaction import Interaction
    from server.declare.provider import Operation, ResourceProvider, StaticProvider
    from server.declare.registry import Registry
    from server.engine.context import ServerContext
    from server.html.web import WebAssets, WebPage
    from server.access.tenancy import AccessScope
    from server.settings import Settings
    from server.storage.migrate import Migrations

PROJECT = "orgunit_fhir"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- start-up -------------------------------------------------------------------------------------

@hookspec
def register_resource_providers(settings: Settings) -> list[ResourceProvider | StaticProvider] | None:
    """Return this plugin's providers; raise ConfigError if the plugin's settings are wrong."""


@hookspec
def register_migrations(settings: Settings) -> list[Migrations] | None:
    """Return the migration chains of this plugin's tables (several plugins of one package may name the same)."""


@hookspec
def register_commands(settings: Settings) -> list[Command] | None:
    """Return command-line commands of this plugin (`orgunit-fhir <name>`)."""


@hookspec
def register_load_formats(settings: Settings) -> list[LoadFormat] | None:
    """Return the file formats this plugin loads (`orgunit-fhir load <format> PATH`)."""


@hookspec
def register_demo_data(settings: Settings) -> list[DemoData] | None:
    """Return synthetic data this plugin writes for `orgunit-fhir demo` and an empty embedded database."""


@hookspec
def register_web_pages(settings: Settings) -> list[WebPage | WebAssets] | None:
    """Return browser pages (a path and its HTML shell) and static assets (a directory served under
    /static/{name}/) this plugin serves beside the FHIR API."""


@hookspec
def register_operations(settings: Settings) -> list[Operation] | None:
    """Return this plugin's server-wide operations (no provider's): `[base]/$name` (the `system` level, with the
    path segments the Operation names) and `[base]/[type]/$name` on every type whose provider declares no
    operation of that name (the `type` level). Each declares its SMART scope, checked by the engine; its handler
    answers a FHIR resource, a server.declare.answer.Answer (status, headers, JSON or a file) or a Page."""


@hookspec
def update_capability_statement(statement: dict[str, Any], settings: Settings, registry: Registry) -> None:
    """Amend the generated CapabilityStatement in place (called once, at start-up; `registry`: the providers
    served). A `trylast` implementation (a core plugin's) sees what the others made."""


@hookspec
def stop_worker(server: ServerContext) -> None:
    """The worker serving `server` stops (its requests drained): end what this plugin runs in the background for
    it (threads, connections). Called once per application, at the end of its lifespan."""


# -- per request ----------------------------------------------------------------------------------

@hookspec
def authorize(principal: Principal, interaction: Interaction, settings: Settings) -> str | None:
    """Return a reason to deny the interaction (403), or None to allow it. A server.errors.Denial naming the SMART
    scope the token lacks makes the 403 a scope error (WWW-Authenticate: Bearer error="insufficient_scope")."""


@hookspec(firstresult=True)
def access_scope(principal: Principal, settings: Settings) -> AccessScope | None:
    """The account and subtree the caller may see (the first answer wins); raise Forbidden for a bad claim."""


@hookspec(firstresult=True)
def translate_exception(exception: BaseException, interaction: Interaction | None) -> FhirError | None:
    """Map a foreign exception to a FhirError; the first answer wins."""
