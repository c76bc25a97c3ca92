"""SMART on FHIR scopes (App Launch 1 and 2): what a token's scope claims (`auth.scope_claims`: `scope`, `scp`)
grant per resource type and interaction, read so that nothing the server cannot read ever widens a token.

Reading (scope_tokens): a claim is absent or null (no claim), a string of space-separated scopes, or a list of one
scope per element (never split nor merged with a neighbour); any other shape, a list element that is not a string
or holds white space, a claim named as a scope claim but for its case, refuses the token (ScopeRefused).

Granting (parse_scopes): a token carrying no SMART resource scope (`system/`, `user/` or `patient/...`) is not
narrowed: the permission alone decides, as before scopes existed. One that carries some sees only what they grant:

- v1 `system/Location.read`, `system/*.read`: read and search (`.*` too; `.write` grants nothing on a read-only
  server); v2 `system/Location.rs`: `r` = read, vread and history, `s` = search and operations (`c`, `u`, `d`
  grant nothing here). `user/` scopes grant as `system/` ones do (the server holds no per-user data);
  `patient/` scopes grant nothing (no patient compartment here).
- A v2 granular scope with a query (`system/Location.rs?partof:below=Location/12`) grants its letters on the
  resources that search matches only (SmartScopes.filters); several on one type are a union, and one without a
  query on the type grants all of it. A query that is not a query string is refused with the token; one this server
  cannot apply as a filter (a parameter the type does not have, a result parameter such as `_count`, a chain) is
  refused when the caller is made (server.engine.scope_filters): never ignored.
- Refused with the token, never ignored into a wider grant: a scope that is not an RFC 6749 scope token (printable
  ASCII but space, `"` and `\\`); a resource scope that does not parse (`system/Location.sr`, `system/location.rs`);
  a scope that reads as a resource scope only once lower-cased or decoded (`System/...`, `system%2FLocation.rs`,
  `openid,system/...`); beside a scope with a query, any scope this server does not know (not a resource scope, the
  permission, a standard OpenID/SMART scope nor one of `auth.other_scopes`): a query value cut at its space
  (`...?partof.name=DS` + `Diko`) would grant every district starting with "DS".
"""
from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode
from typing import Any

from server.access.claims import MISSING, ClaimShapeError, claim, mis_cased
from server.errors import ConfigError, Denial
from server.settings import AuthSettings

READ = "r"    # read, vread, history-instance, history-type
SEARCH = "s"  # search-type, operation
LETTER_OF_KIND = {"read": READ, "vread": READ, "history-instance": READ, "history-type": READ,
                  "search-type": SEARCH, "operation": SEARCH}
WILDCARD = "*"
CONTEXTS = ("system", "user", "patient")
_PREFIXES = tuple(f"{c}/" for c in CONTEXTS)
GRANTING = frozenset({"system", "user"})
_SHAPE = re.compile(r"(?P<context>system|user|patient)/(?P<type>[^.?\s]+)\.(?P<what>[^?\s]+)(?P<query>\?\S*)?")
_TYPE = re.compile(r"\*|[A-Z][A-Za-z]{0,63}")
_V2 = re.compile(r"c?r?u?d?s?")
_V1 = {"read": frozenset(READ + SEARCH), "*": frozenset(READ + SEARCH), "write": frozenset()}
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 3.3: scope-token = 1*NQCHAR
# a context and its slash not glued to a word or a path before it: `system/`, `,user/`, ` patient/` (once decoded)
_CONTEXT = re.compile(r"(?<![a-z0-9/])(?:system|user|patient)/")
# a type and its SMART letters, not glued to a word: `Location.rs`, `*.read` (not `User.Read`, `okta.users.read`)
_TYPE_LETTERS = re.compile(r"(?<![A-Za-z0-9])(?:\*|[A-Z][A-Za-z]{0,63})\.(?:read|write|\*|[cruds]+)(?![A-Za-z0-9])")
# what a token may carry beside SMART resource scopes and the permission: OpenID Connect's and SMART's own
STANDARD_SCOPES = frozenset({"openid", "profile", "email", "address", "phone", "offline_access", "online_access",
                             "fhirUser", "launch", "launch/patient", "launch/encounter"})
CLAIM_REFUSED = "a scope claim cannot be read"  # the WWW-Authenticate error_description (a fixed text)
SCOPE_REFUSED = "a SMART scope cannot be read"


class ScopeRefused(ValueError):
    """A scope claim or scope the server cannot read or honour: the token is refused (401), never the scope ignored.
    `description`: the fixed text of the WWW-Authenticate header; the message names the claim or scope."""

    def __init__(self, message: str, description: str = SCOPE_REFUSED) -> None:
        super().__init__(message)
        self.description = description


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


def _grant(context: str, rtype: str, what: str, query: Query | None, token: str) -> Grant:
    if _TYPE.fullmatch(rtype) is None:
        raise ScopeRefused(f"the SMART scope {token[:100]!r} names no resource type ({rtype[:64]!r}: a type starts "
                           "with a capital letter, as Location, or is *)")
    if what in _V1:
        if query is not None:
            raise ScopeRefused(f"the SMART scope {token[:100]!r} is a v1 scope with a query: only v2 scopes "
                               "(.r, .s, .rs) take one")
        letters = _V1[what]
    elif what and _V2.fullmatch(what):
        letters = frozenset(what) & frozenset(READ + SEARCH)
    else:
        raise ScopeRefused(f"the SMART scope {token[:100]!r} cannot be read: after the type comes read, write or * "
                           "(v1), or letters of cruds in that order (v2)")
    return Grant(rtype, letters if context in GRANTING else frozenset(), query, token)


def _decoded(token: str) -> str:
    """The token percent- and HTML-decoded to any depth, folded to NFKC."""
    text = token
    for _ in range(8):
        decoded = html.unescape(unquote(text))
        if decoded == text:
            break
        text = decoded
    return unicodedata.normalize("NFKC", text)


def _names_a_context(token: str) -> bool:
    """Whether the decoded token names a SMART context in any case (`System/...`, `system%2FLocation.rs`,
    `openid,system/...`; not `launch/patient`, nor a path's `.../user/read`)."""
    return _CONTEXT.search(_decoded(token).casefold()) is not None


def looks_like_resource_scope(token: str) -> bool:
    """Whether the token, once decoded, reads as a SMART resource scope: it names a context (_names_a_context), or
    a type and its letters (`Location.rs`, `sytem/Location.rs`, `*.read`; not `User.Read`)."""
    return _names_a_context(token) or _TYPE_LETTERS.search(_decoded(token)) is not None


def parse_scopes(tokens: Iterable[str], known: Iterable[str] = STANDARD_SCOPES) -> SmartScopes | None:
    """The grants of the SMART resource scopes among `tokens`; None when there is none (not narrowed). `known`: the
    scopes other than resource scopes the server knows (known_scopes). ScopeRefused for a scope the server cannot
    read (see the module's docstring)."""
    accepted = frozenset(known)
    grants: list[Grant] = []
    contexts: list[str] = []
    others: list[str] = []
    for token in tokens:
        if _SCOPE_TOKEN.fullmatch(token) is None:
            raise ScopeRefused(f"the scope {token[:100]!r} is not a scope token (RFC 6749: printable ASCII but space, "
                               "'\"' and '\\'; a query value holding one is percent-encoded)")
        if token.startswith(_PREFIXES):
            match = _SHAPE.fullmatch(token)
            if match is None:
                raise ScopeRefused(f"the SMART scope {token[:100]!r} cannot be read: a resource scope is "
                                   "context/Type.letters[?query] (system/Location.rs, system/*.read)")
            query = _query(token, match["query"][1:]) if match["query"] is not None else None
            grants.append(_grant(match["context"], match["type"], match["what"], query, token))
            contexts.append(match["context"])
        elif token in accepted:
            continue
        elif looks_like_resource_scope(token):
            raise ScopeRefused(f"the scope {token[:100]!r} reads as a SMART resource scope only once lower-cased or "
                               "decoded, or with its context mistyped or left out: a resource scope is system/, "
                               "user/ or patient/ in lower case, then Type.letters, unencoded, one a scope")
        elif any(c in _decoded(token) for c in "/?"):
            raise ScopeRefused(f"the scope {token[:100]!r} holds '/' or '?' as SMART scopes do, but is none this "
                               "server reads; an identity provider's own scope is listed in auth.other_scopes")
        else:
            others.append(token)
    if not grants:
        return None
    unknown = next(iter(others), None)
    if unknown is not None and any(g.query is not None for g in grants):
        raise ScopeRefused(f"the scope {unknown[:100]!r} is not a scope this server knows, beside a SMART scope "
                           "with a query: a query value holding a space must be encoded (%20), or a part of it "
                           "reads as another scope; an identity provider's own scopes are listed in "
                           "auth.other_scopes")
    return SmartScopes(tuple(grants), "user" if set(contexts) <= {"user"} else "system")


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)[:100]


def scope_tokens(claims: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """The scopes of the claims at the dotted paths, in order: a string is space-separated scopes, a list one scope
    per element; absent or null: none. ScopeRefused (naming the claim and what it holds) for any other shape, and
    for a list element that is not a string, is empty or holds white space: it would be split, merged or dropped
    into something the token does not say (`["...?partof.name=DS", "Diko"]` is not `partof.name=DS Diko`), and for
    a claim named as a scope claim but for its case (`Scope`, `SCP`): its scopes would be ignored."""
    found: list[str] = []
    for name in names:
        named = mis_cased(claims, name)  # at any part of its path (`Ext.scp` for `ext.scp`)
        if named is not None:
            raise ScopeRefused(f"the claim {named!r} is named as the scope claim {name!r} but for its case: its "
                               "scopes cannot be read", CLAIM_REFUSED)
        try:  # a part above the claim that is not an object: its scopes cannot be read, never read as absent
            value = claim(claims, name, strict=True)
        except ClaimShapeError as exc:
            raise ScopeRefused(f"the scope claim {name!r} cannot be read: {exc}", CLAIM_REFUSED) from None
        if value is None or value is MISSING:
            continue
        if isinstance(value, str):
            found += [t for t in value.split(" ") if t]
            continue
        if not isinstance(value, list):
            raise ScopeRefused(f"the scope claim {name!r} holds {_shown(value)}: a scope claim is a space-separated "
                               "string or a list of strings", CLAIM_REFUSED)
        for item in value:
            if not isinstance(item, str):
                raise ScopeRefused(f"the scope claim {name!r} holds the element {_shown(item)}: a scope list holds "
                                   "strings, one scope each", CLAIM_REFUSED)
            if not item or any(c.isspace() for c in item):
                raise ScopeRefused(f"the scope list element {_shown(item)} of the claim {name!r} is empty or holds "
                                   "white space: each element is one scope, never split nor merged (encode a query "
                                   "value's space: %20)")
            found.append(item)
    return found


def known_scopes(auth: AuthSettings) -> frozenset[str]:
    """The scopes other than SMART resource scopes the server knows: the standard ones, the permission and
    `auth.other_scopes`. ConfigError for an entry of auth.other_scopes that is no scope token or names a SMART
    context (it would be ignored where it must narrow); one such as `Api.us` that only resembles a type and its
    letters may be listed, and is then not refused."""
    for other in auth.other_scopes:
        if _SCOPE_TOKEN.fullmatch(other) is None or other.startswith(_PREFIXES) or _names_a_context(other):
            raise ConfigError(f"auth.other_scopes: {other[:100]!r} is not an identity provider's own scope (a scope "
                              "token of printable ASCII without space that names no SMART context: system/, user/, "
                              "patient/ in any case or encoding)")
    return STANDARD_SCOPES | {auth.permission} | frozenset(auth.other_scopes)


def scopes_supported(resource_types: Iterable[str], permission: str) -> list[str]:
    """The scopes a discovery document lists: per type and for every type, in SMART v2 and v1, then the
    permission every token needs."""
    types = [*sorted(resource_types), WILDCARD]
    return [*(f"system/{t}.{s}" for t in types for s in ("rs", "read")), permission]
