"""Claims at dotted paths ("realm_access.roles"): the one walker, and the permissions a token grants.

A claim is MISSING when a part of its path is absent (or a part above it is not an object), and None when it is
present but null: callers that must fail closed (the subtree roots) tell the two apart."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final[Any] = _Missing()


class ClaimShapeError(ValueError):
    """A part above a dotted claim's last one is present but not an object (`{"tenant": "acme"}` for `tenant.id`):
    the claim cannot be read, which is not the same as absent (callers that must fail closed refuse the token)."""


def claim(claims: Mapping[str, Any], dotted: str, *, strict: bool = False) -> Any:
    """The value at the dotted path: MISSING when absent, None when present but null. `strict`: ClaimShapeError when
    a part above the last is present but not an object (null included), instead of MISSING."""
    value: Any = claims
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(value, Mapping):
            if strict and depth:
                raise ClaimShapeError(f"{'.'.join(parts[:depth])!r} is not an object")
            return MISSING
        if part not in value:
            return MISSING
        value = value[part]
    return value


def mis_cased(claims: Mapping[str, Any], dotted: str) -> str | None:
    """The claim named as the dotted path but for its case at some part (`Account` for `account`, `Ext.scp` for
    `ext.scp`), as a dotted name, else None: an identity provider that writes it so means that claim, which the
    server would read as absent (callers that must fail closed refuse the token)."""
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        parent = ".".join(parts[:depth])
        siblings = claim_or_none(claims, parent) if parent else claims
        if not isinstance(siblings, Mapping):
            return None
        found = next((k for k in siblings if isinstance(k, str) and k != part and k.casefold() == part.casefold()),
                     None)
        if found is not None:
            return ".".join(filter(None, (parent, found)))
    return None


def claim_or_none(claims: Mapping[str, Any], dotted: str) -> Any:
    """The value at the dotted path, None when absent or null."""
    value = claim(claims, dotted)
    return None if value is MISSING else value


def set_claim(claims: dict[str, Any], dotted: str, value: Any) -> None:
    """Set the value at the dotted path, making (or replacing) the objects above it."""
    parts = dotted.split(".")
    node = claims
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def claim_tokens(claims: Mapping[str, Any], paths: Sequence[str]) -> list[str]:
    """The tokens of the claims at the dotted paths: each a space-separated string, or a list of such strings."""
    found: list[str] = []
    for path in paths:
        value = claim_or_none(claims, path)
        if isinstance(value, str):
            found += value.split()
        elif isinstance(value, list):
            found += [t for item in value if isinstance(item, str) for t in item.split()]
    return found


def permissions_of(claims: Mapping[str, Any], dotted: str, scopes: Iterable[str] = ()) -> frozenset[str]:
    """The permissions at the dotted path and among the token's scopes (server.access.smart_scopes.scope_tokens)."""
    return frozenset(claim_tokens(claims, (dotted,))) | frozenset(scopes)
