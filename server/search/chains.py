"""Chained parameters (`partof.identifier=`, `partof:Location.name:exact=`, `partof.partof.identifier=`) and reverse
chaining (`_has:Location:partof:type=`, nested), over every reference parameter the providers declare.

A key is parsed into the typed form (`Chained`: its hops, then one ordinary clause on the last type, with every
modifier that parameter supports) before any SQL; then compiled, innermost hop first, into ONE condition on the
searched rows: each hop a subquery answered through the reference's index, each applying the caller's scope on its
own type (and leaving deleted rows out), so a chain never tells whether a resource outside the scope exists
(server.search.hops).

What cannot be followed is a 400, never ignored (an ignored chain would widen the results): a parameter that is not a
reference, a type no provider serves, a reference that does not lead to the type named, more than MAX_HOPS hops."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from server.declare.provider import ResourceProvider
from server.declare.registry import Registry
from server.errors import InvalidRequest, UnsupportedParameter
from server.params.param import SearchParam
from server.settings import FhirApi
from server.search.request import MAX_CLAUSES, MAX_VALUES, Clause, Directed, SearchRequest, _clause, parse_search

MAX_HOPS = 3  # references crossed by one parameter, chained and _has together
HAS = "_has"


@dataclass(frozen=True)
class Hop(Directed):
    """One reference crossed: `param` of `source` refers to `target`. Forward (a chain) the search goes from
    `source` to `target`; reverse (`_has`) from `target` back to the `source` resources referring to it."""

    source: str
    param: SearchParam
    target: str
    reverse: bool = False
    qualified: bool = False  # written `param:Type.` (the type named in the key)

    @property
    def prefix(self) -> str:
        if self.reverse:
            return f"{HAS}:{self.source}:{self.param.name}:"
        return f"{self.param.name}:{self.target}." if self.qualified else f"{self.param.name}."


@dataclass(frozen=True)
class Chained:
    """A chained or _has parameter: the hops in the order the key names them, then a clause on the last type."""

    hops: tuple[Hop, ...]
    clause: Clause

    @property
    def key(self) -> str:
        return "".join(h.prefix for h in self.hops) + self.clause.key

    @property
    def raw(self) -> str:
        return self.clause.raw

    @property
    def types(self) -> tuple[str, ...]:
        """The searched type, then each type a hop reaches."""
        return (self.hops[0].near, *(h.far for h in self.hops))


def is_joined(key: str) -> bool:
    """Whether a query key is a chained or _has parameter (a `.` never appears in other keys)."""
    return key == HAS or key.startswith(HAS + ":") or "." in key


def _served(providers: Mapping[str, Any], rtype: str, key: str) -> ResourceProvider:
    provider = providers.get(rtype)
    if not isinstance(provider, ResourceProvider):
        raise UnsupportedParameter(f"{key}: this server does not search {rtype or 'that type'} by parameters, so "
                                   "it cannot follow a reference there")
    return provider


def _reference(provider: ResourceProvider, name: str, key: str) -> tuple[SearchParam, list[str]]:
    param = provider.params_by_name.get(name)
    if param is None or not param.referenced_types:
        references = sorted(n for n, p in provider.params_by_name.items() if p.referenced_types)
        raise UnsupportedParameter(f"{key}: {name!r} is not a reference parameter of {provider.resource_type}, so "
                                   f"it cannot be chained; references: {', '.join(references) or 'none'}")
    return param, sorted(param.referenced_types)


def _walk(providers: Mapping[str, Any], rtype: str, key: str, rest: str,
          hops: tuple[Hop, ...]) -> tuple[tuple[Hop, ...], str, str]:
    """(the hops, the last type, the key of its parameter) of `rest`, a key over `rtype`."""
    if len(hops) > MAX_HOPS:
        raise InvalidRequest(f"{key}: a parameter may cross at most {MAX_HOPS} references (chained and _has)")
    if rest == HAS or rest.startswith(HAS + ":"):
        parts = rest.split(":", 3)
        if len(parts) < 4 or not all(parts[1:]):
            raise InvalidRequest(f"{key}: write _has:[type]:[reference parameter]:[parameter]=[value]")
        _, source_type, name, inner = parts
        param, targets = _reference(_served(providers, source_type, key), name, key)
        if rtype not in targets:
            raise UnsupportedParameter(f"{key}: {source_type}.{name} refers to {' or '.join(targets)}, not {rtype}")
        return _walk(providers, source_type, key, inner, (*hops, Hop(source_type, param, rtype, reverse=True)))
    head, dot, inner = rest.partition(".")
    if not dot:
        return hops, rtype, rest
    name, _, qualifier = head.partition(":")
    param, targets = _reference(_served(providers, rtype, key), name, key)
    served = [t for t in targets if isinstance(providers.get(t), ResourceProvider)] or targets
    if not qualifier and len(served) > 1:
        raise InvalidRequest(f"{key}: {name} refers to {', '.join(served)}: name one ({name}:[type].)")
    target = qualifier or served[0]
    if target not in targets:
        raise UnsupportedParameter(f"{key}: {rtype}.{name} refers to {' or '.join(targets)}, not {target}")
    _served(providers, target, key)
    return _walk(providers, target, key, inner, (*hops, Hop(rtype, param, target, qualified=bool(qualifier))))


def parse_chained(providers: Mapping[str, Any], resource_type: str, key: str, raw: str) -> Chained | None:
    """The typed form of a chained or _has parameter (None: an empty value, ignored as any empty parameter)."""
    hops, last, final = _walk(providers, resource_type, key, key, ())
    if not hops or not final:
        raise InvalidRequest(f"{key}: a chain names a reference, a '.', then a parameter of the type it refers to")
    clause = _clause(providers[last], final, raw, strict=True)
    return None if clause is None else Chained(hops, clause)


def parse_request(provider: ResourceProvider, items: Sequence[tuple[str, str]], *, providers: Mapping[str, Any],
                  limits: FhirApi = FhirApi(), strict: bool = False, max_values: int = MAX_VALUES) -> SearchRequest:
    """parse_search, with the chained and _has parameters in `joined`."""
    joined: list[Chained] = []
    plain: list[tuple[str, str]] = []
    for key, raw in items:
        if is_joined(key):
            chained = parse_chained(providers, provider.resource_type, key, raw)
            if chained is not None:
                joined.append(chained)
        else:
            plain.append((key, raw))
    request = parse_search(provider, plain, limits=limits, strict=strict,
                           providers=providers, max_values=max_values)
    if len(request.clauses) + len(joined) > MAX_CLAUSES:
        raise InvalidRequest(f"too many search parameters ({len(request.clauses) + len(joined)}); "
                             f"at most {MAX_CLAUSES}")
    unique = {(j.key, j.raw): j for j in joined}  # a parameter sent twice is applied once
    return replace(request, joined=tuple(unique.values())) if joined else request


# ------------------------------------------------------------------ what the CapabilityStatement says


def chains_of(providers: Mapping[str, Any], param: SearchParam) -> list[tuple[str, SearchParam]]:
    """The chained names over a reference parameter, each with the parameter it ends with: `param.x` for every
    parameter x of the type it refers to (`param:Type.x` when it refers to several)."""
    types = sorted(t for t in param.referenced_types if isinstance(providers.get(t), ResourceProvider))
    head = (lambda t: f"{param.name}:{t}.") if len(types) > 1 else (lambda t: f"{param.name}.")
    return [(head(t) + name, p) for t in types for name, p in providers[t].params_by_name.items()]


def chain_documentation(providers: Mapping[str, Any], param: SearchParam) -> str | None:
    chains = chains_of(providers, param)
    if not chains:
        return None
    deeper = [f", e.g. {name}.identifier" for name, p in chains if p.referenced_types]
    return (f"Chained: {', '.join(name for name, _ in chains)}, each with the modifiers of that parameter; a "
            f"chain crosses at most {MAX_HOPS} references{deeper[0] if deeper else ''}")


def has_documentation(registry: Registry, resource_type: str) -> str | None:
    found = [r.key for r in registry.referrers(resource_type)]
    if not found:
        return None
    return (f"Reverse chaining: {', '.join(f'{HAS}:{r}:[parameter]=[value]' for r in found)}: the "
            f"{resource_type} resources such a resource meeting [parameter] refers to ([parameter] with its "
            f"modifiers, chained, or another {HAS}; at most {MAX_HOPS} references crossed)")
