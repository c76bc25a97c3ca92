"""What the tests of chained and _has parameters share: the real Iaso and DHIS2 Sierra Leone data in one server,
searches in process as a caller, and queries naming units by their identifiers (`{CTtB0TPRvWc}`: the id of the
Location with that source reference, `{org:iaso}`: the id of the Organization with that slug)."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from plugins.orgunits.importers.formats import load_file
from server.access.tenancy import AccessScope
from server.engine.context import ServerContext, create_context
from server.engine.caller import TRUSTED, Caller
from server.storage.prerender import refresh
from tests.support.contexts import IASO_CSV, REAL_DATA, SECRET, make_settings
from tests.support.searching import search

SL_BUNDLE = REAL_DATA / "dhis2_sierra_leone_fhir" / "orgUnits.bundle.json"
DHIS2 = "https://play.dhis2.org/dev/api/organisationUnits"  # the Sierra Leone units' identifier system
NS = "https://orgunit-fhir.example.org/fhir/sid"
IASO = f"{NS}/iaso"  # the Iaso units' identifier system (a data source without its own)
ALIAS = f"{NS}/alias"  # DHIS2 codes (OU_...) are kept as aliases
DATA_SOURCE = f"{NS}/data-source"
ACCOUNT = "default"
_NAMED = re.compile(r"\{(org:)?([A-Za-z0-9_-]+)\}")


def load_real(engine: Engine) -> None:
    load_file(engine, "iaso-csv", IASO_CSV)
    load_file(engine, "fhir-bundle", SL_BUNDLE, data_source="Sierra Leone")


def real_context(url: str, var: Path, *, plugins: dict[str, Any] | None = None,
                 before: Callable[[Engine], object] | None = None) -> ServerContext:
    """Iaso (136 units) and DHIS2 Sierra Leone (1332 units) in account `default` (after what `before` loads),
    bodies pre-rendered; every search counted exactly (past the default fhir.total_threshold: the tests compare
    totals)."""
    sections: dict[str, Any] = {"auth": {"secret": SECRET}, "fhir": {"total_threshold": 100_000}}
    if plugins is not None:
        sections["plugins"] = plugins
    ctx = create_context(make_settings(url, var, **sections))
    ctx.extensions.schema.upgrade(ctx.db)
    if before is not None:
        before(ctx.db)
    load_real(ctx.db)
    refresh(ctx.db, ctx.registry)
    return ctx


def subtree(*roots: str, account: str = ACCOUNT) -> Caller:
    """A token of `account` limited to the subtrees of `roots` (none: the whole account)."""
    return Caller(None, AccessScope(account=account, roots=roots or None))


def matched(bundle: dict[str, Any]) -> set[str]:
    return {e["resource"]["id"] for e in bundle.get("entry", []) if e["search"]["mode"] == "match"}


def included(bundle: dict[str, Any]) -> set[str]:
    return {f"{e['resource']['resourceType']}/{e['resource']['id']}" for e in bundle.get("entry", [])
            if e["search"]["mode"] == "include"}


def ids(ctx: ServerContext) -> dict[str, str]:
    """Location ids by source reference, Organization ids by `org:slug`."""
    with ctx.db.connect() as conn:
        units = {str(ref): str(i) for i, ref in conn.exec_driver_sql("SELECT id, source_ref FROM org_unit")}
        sources = {f"org:{slug}": str(i) for i, slug in conn.exec_driver_sql("SELECT id, slug FROM data_source")}
    return {**units, **sources}


def named(query: str, known: dict[str, str]) -> str:
    """The query with each `{ref}` / `{org:slug}` replaced by that resource's id."""
    return _NAMED.sub(lambda m: known[(m.group(1) or "") + m.group(2)], query)


def all_pages(ctx: ServerContext, rtype: str, query: str, caller: Caller = TRUSTED) -> list[str]:
    """Every match, following the next links (the self link of each page is what the server rebuilt)."""
    seen: list[str] = []
    bundle = search(ctx, rtype, query, caller)
    while True:
        seen += [e["resource"]["id"] for e in bundle.get("entry", []) if e["search"]["mode"] == "match"]
        following = [link["url"] for link in bundle["link"] if link["relation"] == "next"]
        if not following:
            return seen
        bundle = search(ctx, rtype, following[0].partition("?")[2], caller)
