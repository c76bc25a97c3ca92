"""The look-up a loader or an operation handler calls (server.declare.lookup.Lookup): a search of any type run in
process, through the same parsing, scoping and SQL as `[type]?query`, following its pages."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy import ColumnElement, Connection, select

from server.declare.lookup import Query
from server.declare.provider import ResourceProvider
from server.declare.rendered import materialized
from server.access.tenancy import AccessScope
from server.engine.caller import TRUSTED, Caller
from server.engine.context import ServerContext
from server.engine.drivers import in_thread
from server.storage import steps
from server.storage.steps import Steps
from server.errors import AmbiguousLookup, InvalidRequest
from server.params.param import SearchParam
from server.params.types.token import TokenType, shown, shows
from server.search.request import MAX_VALUES, selection_pairs

BASE = "urn:orgunit-fhir:lookup"  # the bundles' links stay in process: only their query is read


SearchSteps = Callable[..., Steps[dict[str, Any]]]  # server.engine.searches.search_type_steps
MatchesSteps = Callable[..., Steps[ColumnElement[bool]]]  # server.engine.searches.matches_steps
MatchedSteps = Callable[..., Steps[list[Any]]]  # server.engine.searches.matched_steps

# identified_all's batches: values a statement asks for (ten times a client's `identifier=a,b,...`: 3,998 codes are
# 4 statements, not 40), bounded so that one value bound per target of the parameter stays under the bind limits
# (SQLite's 32,766, PostgreSQL's 65,535); and the rows a statement reads (more: another, after the last id)
BATCH_VALUES = 1000
BATCH_BINDS = 30_000
BATCH_PAGE = 2 * BATCH_VALUES


_ESCAPES = str.maketrans({c: "\\" + c for c in "\\,|$"})


def _escaped(text: str) -> str:
    """A search value's text with FHIR's escapes (a backslash before \\ , | and $): a code holding a comma is one code."""
    return text.translate(_ESCAPES)


@dataclass(frozen=True)
class EngineLookup:
    """Searches as `caller` (TRUSTED: every account, the served versions only; an operation's: the caller's
    scope), with `steps` (the search-type interaction: server.engine.searches.lookup builds one)."""

    context: Callable[[], ServerContext]  # the server context, made at the first look-up (a load may make none)
    steps: SearchSteps
    caller: Caller = TRUSTED
    matches: MatchesSteps | None = None  # what `condition` compiles with
    matched: MatchedSteps | None = None  # what `identified_all` reads with

    def within(self, account: str) -> EngineLookup:
        """The same look-up, of what `account` holds only (the served versions of its data sources), and of what
        belongs to no account yet (a row of a provider scoped through references that nothing refers to)."""
        return replace(self, caller=Caller(None, AccessScope(account=account, unowned=True)))

    @property
    def ctx(self) -> ServerContext:
        return self.context()

    def search(self, resource_type: str, query: Query, *, limit: int | None = None,
               connection: Connection | None = None) -> list[dict[str, Any]]:
        pairs = selection_pairs(query, "a look-up")
        ctx = self.ctx
        page = max(1, min(limit if limit is not None else ctx.settings.api.max_count, ctx.settings.api.max_count))
        found: list[dict[str, Any]] = []
        uncounted = [("_total", "none")] if isinstance(ctx.registry.get(resource_type), ResourceProvider) else []
        items: Sequence[tuple[str, str]] = [*pairs, ("_count", str(page)), *uncounted]
        while True:
            bundle = materialized(in_thread(ctx, self.steps(ctx, self.caller, BASE, resource_type, items,
                                                            strict=True), connection))
            found += [e["resource"] for e in bundle.get("entry", ()) if e.get("search", {}).get("mode") == "match"]
            following = next((link["url"] for link in bundle.get("link", ()) if link["relation"] == "next"), None)
            if following is None or (limit is not None and len(found) >= limit):
                return found[:limit] if limit is not None else found
            items = parse_qsl(urlsplit(following).query, keep_blank_values=True)

    def condition(self, resource_type: str, query: Query, *,
                  connection: Connection | None = None) -> ColumnElement[bool]:
        assert self.matches is not None, "a look-up made without server.engine.searches.lookup"
        ctx = self.ctx
        return in_thread(ctx, self.matches(ctx, self.caller, resource_type, query), connection)

    def ids(self, resource_type: str, query: Query, *, limit: int | None = None,
            connection: Connection | None = None) -> list[str]:
        return [r["id"] for r in self.search(resource_type, query, limit=limit, connection=connection)]

    def one(self, resource_type: str, query: Query, *,
            connection: Connection | None = None) -> dict[str, Any] | None:
        found = self.search(resource_type, query, limit=2, connection=connection)
        if len(found) > 1:
            shown = query if isinstance(query, str) else "&".join(f"{k}={v}" for k, v in
                                                                  selection_pairs(query, "a look-up"))
            raise AmbiguousLookup(f"{resource_type}?{shown} matches several resources "
                                  f"({' and '.join(r['id'] for r in found)} at least), not one")
        return found[0] if found else None

    def identified(self, resource_type: str, value: str, *, system: str | None = None,
                   connection: Connection | None = None) -> str | None:
        if not value or system == "":
            raise InvalidRequest(f"a look-up by identifier needs a value (and a system, if any), got "
                                 f"{system!r}|{value!r}")
        found = self.one(resource_type, [("identifier", _token(value, system))], connection=connection)
        return found["id"] if found is not None else None

    def identified_all(self, resource_type: str, values: Iterable[str], *, system: str | None = None,
                       connection: Connection | None = None) -> dict[str, str | None]:
        """Each value's `identified` answer, by batches of up to BATCH_VALUES values (`identifier=a,b,...`, compiled
        as that search is: the caller's scope, the live rows), each read by one statement of the matches' ids and
        what they hold of the parameter's targets (server.params.types.token.shown; a side table's, such as
        aliases, by one more for the matches that show none of the batch's values): no resource is rendered. A
        match is a value's when it shows it (token.shows: the stored code as written, of `system` if given); a
        batch with a match that shows none of its values is split until each match is placed, and the values no
        match shows are asked again (a match may show one and be matched by another spelling too), so the answer
        is exactly `identified`'s. AmbiguousLookup names every value several resources hold."""
        wanted = list(dict.fromkeys(values))
        for value in wanted:
            if not value or system == "":
                raise InvalidRequest(f"a look-up by identifier needs a value (and a system, if any), got "
                                     f"{system!r}|{value!r}")
        held: dict[str, set[str]] = {value: set() for value in wanted}
        size = self._batch(resource_type)
        for start in range(0, len(wanted), size):
            self._place(resource_type, wanted[start:start + size], system, connection, held)
        several = {value: ids for value, ids in held.items() if len(ids) > 1}
        if several:
            shown_ = "; ".join(f"{value!r}: {', '.join(sorted(ids))}" for value, ids in list(several.items())[:10])
            raise AmbiguousLookup(f"{len(several)} identifier(s) of {resource_type} name several resources "
                                  f"({shown_}{', ...' if len(several) > 10 else ''})")
        return {value: next(iter(ids)) if ids else None for value, ids in held.items()}

    def _identifier(self, resource_type: str) -> SearchParam | None:
        """The type's `identifier` parameter, when a provider of rows serves the type (a static one: None)."""
        provider = self.ctx.registry.get(resource_type)
        if not isinstance(provider, ResourceProvider) or self.matched is None:
            return None
        return provider.params_by_name.get("identifier")

    def _batch(self, resource_type: str) -> int:
        """The values of one batch: BATCH_VALUES, fewer when the type's `identifier` has so many targets (each
        binds every value) that the statement would pass BATCH_BINDS."""
        param = self._identifier(resource_type)
        if param is None:
            return MAX_VALUES  # a search's
        return max(1, min(BATCH_VALUES, BATCH_BINDS // max(1, len(param.targets))))

    def _matches(self, resource_type: str, chunk: list[str], system: str | None,
                 connection: Connection | None) -> dict[str, set[str]]:
        """What `identifier=<chunk>` matches, each match's id with the values of the chunk it shows."""
        asked = set(chunk)
        query = [("identifier", ",".join(_token(v, system) for v in chunk))]
        param = self._identifier(resource_type)
        if param is None or not isinstance(param.kind, TokenType):  # a static provider: its search, rendered
            return {r["id"]: {i.get("value") for i in r.get("identifier", ())
                              if system is None or i.get("system") == system} & asked
                    for r in self.search(resource_type, query, connection=connection)}
        assert self.matched is not None
        ctx = self.ctx
        direct = [t for t in param.targets if t.through is None]
        beside = [t for t in param.targets if t.through is not None]
        rows = in_thread(ctx, self.matched(ctx, self.caller, resource_type, query, max_values=len(chunk),
                                           page=BATCH_PAGE, columns=[c for t in direct for c in shown(t)]),
                         connection)
        found: dict[str, set[str]] = {}
        keys: dict[str, Any] = {}
        spans, at = [], 1  # each direct target's columns in a row, after the id
        for target in direct:
            spans.append((target, at, at + len(shown(target))))
            at += len(shown(target))
        for row in rows:
            forms: set[str] = set()
            for target, start, end in spans:
                forms.update(shows(target, row[start:end], system))
            found[str(row[0])], keys[str(row[0])] = forms & asked, row[0]
        unplaced = [keys[rid] for rid, forms in found.items() if not forms]
        for target in beside:  # side rows (aliases) of the matches that show nothing else, a batch of ids at once
            assert target.through is not None
            kept = [target.through.where] if target.through.where is not None else []
            for start in range(0, len(unplaced), BATCH_VALUES):
                side = select(target.through.key, *shown(target)).select_from(target.through.table).where(
                    target.through.key.in_(unplaced[start:start + BATCH_VALUES]), *kept)
                for row in in_thread(ctx, steps.rows(side), connection):
                    found[str(row[0])].update(set(shows(target, row[1:], system)) & asked)
        return found

    def _place(self, resource_type: str, chunk: list[str], system: str | None, connection: Connection | None,
               held: dict[str, set[str]]) -> None:
        matches = self._matches(resource_type, chunk, system, connection)
        if not matches:
            return
        if len(chunk) == 1:
            held[chunk[0]].update(matches)
            return
        if any(not forms for forms in matches.values()):  # matched by a form it does not show: ask fewer
            half = len(chunk) // 2
            self._place(resource_type, chunk[:half], system, connection, held)
            self._place(resource_type, chunk[half:], system, connection, held)
            return
        placed: set[str] = set()
        for rid, forms in matches.items():
            for value in forms:
                held[value].add(rid)
            placed |= forms
        rest = [value for value in chunk if value not in placed]
        if rest:  # a match may show one of its values and be matched by another too (its uuid, bare)
            self._place(resource_type, rest, system, connection, held)


def _token(value: str, system: str | None) -> str:
    return _escaped(value) if system is None else f"{_escaped(system)}|{_escaped(value)}"
