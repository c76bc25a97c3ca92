"""Searches in process (no HTTP) as a caller, and what their bundles hold: the one `search` every search test
calls, whatever the resource type."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from server.declare.rendered import materialized
from server.engine import searches
from server.engine.caller import TRUSTED, Caller
from server.engine.context import ServerContext

BASE = "http://fhir.test/fhir"


def search(ctx: ServerContext, rtype: str, query: str, caller: Caller = TRUSTED,
           items: Sequence[tuple[str, str]] = (), *, strict: bool = False) -> dict[str, Any]:
    """The bundle of `query` (then `items`) on `rtype`, as `caller`; `strict`: as Prefer: handling=strict."""
    pairs = [*parse_qsl(query, keep_blank_values=True), *items]
    return materialized(searches.search_type(ctx, caller, BASE, rtype, pairs, strict=strict))


def matches(bundle: dict[str, Any]) -> list[int]:
    """The ids of the matches, in the bundle's order."""
    return [int(e["resource"]["id"]) for e in bundle.get("entry", []) if e["search"]["mode"] == "match"]


def self_query(bundle: dict[str, Any]) -> list[tuple[str, str]]:
    """The parameters the bundle's self link shows, but _count."""
    return [p for p in parse_qsl(urlsplit(bundle["link"][0]["url"]).query) if p[0] != "_count"]
