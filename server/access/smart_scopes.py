"""SMART on FHIR scopes (App Launch 1 and 2): what a token's `scope` (space-separated) or `scp` (a list) grants
per resource type and interaction.

A token carrying no SMART resource scope (`system/`, `user/` or `patient/...`) is not narrowed: the permission alone
decides, as before scopes existed. One that carries some sees only what they grant:

- v1 `system/Location.read`, `system/*.read`: read and search (`.*` too; `.write` grants nothing on a read-only
  server); v2 `system/Location.rs`: `r` = read, vread and history, `s` = search and operations (`c`, `u`, `d`
  grant nothing here). `user/` scopes grant as `system/` ones do (the server holds no per-user data);
  `patient/` scopes grant nothing (no patient compartment here).
- A scope of that shape that does not parse (`system/Location.sr`) grants nothing; it still narrows the token.
- A v2 granular scope with a query (`system/Location.rs?partof:below=Location/12`) grants its letters on the
  resources that search matches only (SmartScopes.filters); several on one type are a union, and one without a
  query on the type grants all of it. A query that is not a query string is refused with the token (ScopeRefused);
  one this server cannot apply as a filter (a parameter the type does not have, a result parameter such as
  `_count`, a chain) is refused when the caller is made (server.engine.scope_filters): never ignored.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode
from typing import Any

from server.access.claims import claim_or_none, claim_tokens
from server.errors import Denial

READ = "r"    # read, vread, history-instance, history-type
SEARCH = "s"  # search-type, operation
LETTER_OF_KIND = {"read": READ, "vread": READ, "history-instance": READ, "history-type": READ,
                  "search-type": SEARCH, "operation": SEARCH}
WILDCARD = "*"
CONTEXTS = ("system", "user", "patient")
GRANTING = frozenset({"system", "user"})
_SHAPE = re.compile(r"(?P<context>system|user|patient)/(?P<type>[^.?\s]+)\.(?P<what>[^?\s]+)(?P<query>\?\S*)?")
_TYPE = re.compile(r"\*|[A-Z][A-Za-z]{0,63}")
_V2 = re.compile(r"c?r?u?d?s?")
_V1 = {"read": frozenset(READ + SEARCH), "*": frozenset(READ + SEARCH), "write": frozenset()}


class ScopeRefused(ValueError):
    """A scope the server cannot honour (a v2 scope whose query is not a query string): the token is refused."""


Query = tuple[tuple[str, str], ...]  # a scope's query: (name, value) pairs, as a search takes them


@dataclass(frozen=True)
class Grant:
    resource_type: str  # "*": every type
    letters: frozenset[str]  # of READ and SEARCH
    query: Query | None = None  # a v2 granular scope's: the search its resources must match; None: all of them
    text: str = ""  # the scope as the token wrote it (named when the server cannot apply its query)


@dataclass(frozen=True)
class SmartScopes:
    """The grants of a token's SMART resource scopes (empty: it may see nothing)."""

    grants: tuple[Grant, ...]
    context: str = "system"  # the context named in the advice of a denial

    def names(self) -> list[str]:
        """The grants as v2 scopes (the audit line)."""
        return [f"{self.context}/{g.resource_type}.{''.join(x for x in READ + SEARCH if x in g.letters)}"
                f"{'?' + urlencode(g.query) if g.query else ''}" for g in self.grants if g.letters]

    def allows(self, resource_type: str, letter: str) -> bool:
        return any(letter in g.letters and g.resource_type in (resource_type, WILDCARD) for g in self.grants)

    def filters(self, resource_type: str, letter: str) -> tuple[Grant, ...] | None:
        """The granular grants whose queries limit what the token sees of the type through an interaction of
        `letter` (a union: each letter keeps to its own scopes' queries; a type the letter is not granted on, which
        the other letter's answers include, to all of its scopes'), None when it is not limited: a grant without a
        query, or none at all (then it sees nothing)."""
        granting = [g for g in self.grants if g.letters and g.resource_type in (resource_type, WILDCARD)]
        lettered = [g for g in granting if letter in g.letters] or granting
        if not lettered or any(g.query is None for g in lettered):
            return None
        return tuple(lettered)

    def sees(self, resource_type: str) -> bool:
        """Whether the token may see resources of the type at all (each letter reveals them): what
        `_include`/`_revinclude` may return."""
        return any(g.letters and g.resource_type in (resource_type, WILDCARD) for g in self.grants)

    def denial(self, kind: str, resource_type: str | None, letter: str | None = None) -> Denial | None:
        """Why the interaction is denied, naming the scope it lacks (Denial.scope: the 403 says insufficient_scope
        and names it), None when it is granted. `letter`: the one an operation declares it needs
        (server.declare.provider.Operation.scope; default: its kind's). The CapabilityStatement and system-level
        interactions need no scope here (what they return is scoped per type); a kind of interaction this module
        does not know is denied."""
        if kind == "capabilities" or resource_type is None:
            return None
        letter = letter if kind == "operation" and letter in (READ, SEARCH) else LETTER_OF_KIND.get(kind)
        if letter is None:
            return Denial(f"the token's SMART scopes grant no {kind} interaction")
        if self.allows(resource_type, letter):
            return None
        what = "read, vread, history and the operations that read" if letter == READ else "search and operations"
        needed = f"{self.context}/{resource_type}.{letter}"
        return Denial(f"the token's SMART scopes do not grant {kind} on {resource_type}: it lacks the scope {needed} "
                      f"({what}; or {self.context}/{resource_type}.read in SMART v1)", needed)


def _query(token: str, raw: str) -> Query:
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        pairs = []
    if not pairs or any(not name or not value.strip() for name, value in pairs):
        raise ScopeRefused(f"the SMART scope {token[:100]!r} has a query that is not a query string of "
                           "name=value pairs")
    return tuple(pairs)


def _grant(context: str, rtype: str, what: str, query: Query | None, token: str) -> Grant | None:
    if not _TYPE.fullmatch(rtype):
        return None
    if what in _V1:
        if query is not None:
            raise ScopeRefused(f"the SMART scope {token[:100]!r} is a v1 scope with a query: only v2 scopes "
                               "(.r, .s, .rs) take one")
        letters = _V1[what]
    elif what and _V2.fullmatch(what):
        letters = frozenset(what) & frozenset(READ + SEARCH)
    else:
        return None
    return Grant(rtype, letters if context in GRANTING else frozenset(), query, token)


def parse_scopes(tokens: Iterable[str]) -> SmartScopes | None:
    """The grants of the SMART resource scopes among `tokens`; None when there is none (not narrowed).
    ScopeRefused for a scope whose query is not a query string."""
    grants: list[Grant] = []
    contexts: list[str] = []
    smart = False
    for token in tokens:
        if not token.startswith(tuple(f"{c}/" for c in CONTEXTS)):
            continue  # openid, launch, offline_access, the permission...: not a resource scope
        smart = True
        match = _SHAPE.fullmatch(token)
        if match is None:
            continue  # malformed: grants nothing
        query = _query(token, match["query"][1:]) if match["query"] is not None else None
        grant = _grant(match["context"], match["type"], match["what"], query, token)
        if grant is not None:
            grants.append(grant)
            contexts.append(match["context"])
    if not smart:
        return None
    return SmartScopes(tuple(grants), "user" if contexts and set(contexts) <= {"user"} else "system")


def smart_scopes_of(claims: Mapping[str, Any], names: Sequence[str]) -> SmartScopes | None:
    """ScopeRefused for a list element holding a query scope and a space: split as scope strings are, its query
    would lose what follows the space and grant more than the element says (`...?partof.name=DS Mouyakro`)."""
    for name in names:
        value = claim_or_none(claims, name)
        for item in value if isinstance(value, list) else ():
            if isinstance(item, str) and "?" in item and len(item.split()) > 1:
                raise ScopeRefused(f"the scope list element {item[:100]!r} holds a query and a space (encode it: "
                                   "%20): it cannot be read as one scope")
    return parse_scopes(claim_tokens(claims, names))


def scopes_supported(resource_types: Iterable[str], permission: str) -> list[str]:
    """The scopes a discovery document lists: per type and for every type, in SMART v2 and v1, then the
    permission every token needs."""
    types = [*sorted(resource_types), WILDCARD]
    return [*(f"system/{t}.{s}" for t in types for s in ("rs", "read")), permission]
