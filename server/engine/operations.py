"""Operations with their own handler, at any level: a provider's (`[type]/$name`, `[type]/[id]/$name`) and the
server-wide ones of the `register_operations` hook (`[base]/$name[/segments]`, and `[type]/$name` on every type
whose provider declares no operation of that name). The engine checks the level and the instance (404 or 410 as
a read), opens a connection that cannot write (a provider's), gives the handler the caller's scope in an
OperationCall and answers what it returns: a FHIR resource, a plain Answer, or a Page it makes a searchset of."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection

from server.declare.answer import Answer, Page
from server.declare.lookup import Lookup
from server.declare.provider import Operation, OperationCall, OperationLevel, ResourceProvider
from server.engine.bundle import searchset
from server.engine.caller import Caller
from server.engine.context import ServerContext
from server.engine.instances import resource_provider
from server.engine.visibility import visibility
from server.errors import InternalError, ResourceNotFound
from server.params.ids import stored_id
from server.search.paging import FORMAT_PARAMS, Paged, Paging, parse_paging
from server.storage.backend import backend_of


def declared(ctx: ServerContext, resource_type: str | None, name: str) -> Operation | None:
    """The operation a request names: the provider's own, else the server-wide one (None: neither)."""
    provider = ctx.registry.providers.get(resource_type) if resource_type is not None else None
    own = provider.operations_by_name.get(name) if isinstance(provider, ResourceProvider) else None
    return own or ctx.extensions.operations.get(name)


def is_server_wide(ctx: ServerContext, resource_type: str | None, name: str) -> bool:
    op = declared(ctx, resource_type, name)
    return op is not None and ctx.extensions.operations.get(name) is op


@dataclass(frozen=True)
class _Request(Paged):
    """The page a paged operation answers, as its links repeat it (server.engine.bundle.Pageable)."""

    paging: Paging
    own: tuple[tuple[str, str], ...]

    @property
    def own_pairs(self) -> tuple[tuple[str, str], ...]:
        return self.own


def _permits(caller: Caller, op: Operation) -> tuple[Any, Any]:
    scopes = caller.principal.scopes if caller.principal is not None else None
    if scopes is None:
        return (lambda rtype: True), (lambda rtype: None)
    return (lambda rtype: scopes.allows(rtype, op.scope)), (
        lambda rtype: None if scopes.allows(rtype, op.scope) else scopes.denial("operation", rtype, op.scope))


def _call(ctx: ServerContext, caller: Caller, op: Operation, paging: Paging | None, *,
          provider: ResourceProvider | None, rid: str | None, stored: Any, parameters: tuple[tuple[str, str], ...],
          strict: bool, opened: Callable[[], Connection], visible: Any, base: str, level: OperationLevel,
          resource_type: str | None, visible_to: Callable[[str], Any], lookup: Lookup,
          segments: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None,
          url: str = "") -> OperationCall:
    """The one place an OperationCall is made: what every call shares (the caller, its permissions, the page)
    decided here, the rest as the level's caller says."""
    permitted, denial = _permits(caller, op)
    return OperationCall(provider=provider, id=rid, stored_id=stored, parameters=parameters, strict=strict,
                         opened=opened, visible=visible, base=base, level=level, resource_type=resource_type,
                         segments=segments or {}, headers=headers or {}, url=url, caller=caller, server=ctx,
                         permitted=permitted, denial=denial, count=paging.count if paging else None,
                         skip=paging.skip if paging else 0, visible_to=visible_to, lookup=lookup)


def _answer(ctx: ServerContext, op: Operation, call: OperationCall, paging: Paging | None, path: str) -> Any:
    assert op.handler is not None
    answer = op.handler(call)
    if isinstance(answer, Answer):
        return answer
    if isinstance(answer, Page) and paging is not None:
        request = _Request(paging, call.parameters)
        entries = [{"fullUrl": f"{call.base}/{r['resourceType']}/{r['id']}", "resource": r,
                    "search": {"mode": "match"}} for r in answer.resources]
        has_next = answer.has_next if answer.has_next is not None else (
            answer.total is not None and paging.skip + len(entries) < answer.total)
        return searchset(call.base, path, request, entries, answer.total, has_next)
    if not isinstance(answer, dict) or not isinstance(answer.get("resourceType"), str):
        where = f"of {call.resource_type} " if call.resource_type else ""
        raise InternalError(f"operation ${op.name} {where}answered no FHIR resource")
    return answer


def _parameters(ctx: ServerContext, op: Operation, items: Sequence[tuple[str, str]]
                ) -> tuple[Paging | None, tuple[tuple[str, str], ...]]:
    if op.paged:
        api = ctx.settings.api  # the page limits of every paged answer
        paging, rest = parse_paging(items, api)
        return paging, tuple(rest)
    return None, tuple((k, v) for k, v in items if k not in FORMAT_PARAMS)


def call_handler(ctx: ServerContext, caller: Caller, base: str, provider: ResourceProvider, op: Operation,
                 rid: str | None, items: Sequence[tuple[str, str]], strict: bool, lookup: Lookup) -> Any:
    """A provider's operation (server.engine.searches.run_operation_steps, which checked the instance first)."""
    if ("instance" if rid is not None else "type") not in op.levels:
        at = f"{provider.resource_type}/[id]/${op.name}" if rid is None else f"{provider.resource_type}/${op.name}"
        raise ResourceNotFound(f"${op.name} is answered at [base]/{at} only")
    stored = None
    if rid is not None:
        stored = stored_id(provider, rid)
    paging, parameters = _parameters(ctx, op, items)
    path = f"{provider.resource_type}/{rid}/${op.name}" if rid is not None else f"{provider.resource_type}/${op.name}"
    with ExitStack() as stack:
        conn = stack.enter_context(ctx.db.connect())
        reading = stack.enter_context(backend_of(conn).read_only(conn))

        def visible_to(rtype: str) -> Any:
            return visibility(ctx, reading, resource_provider(ctx, rtype, f"${op.name}"), caller).clause

        call = _call(ctx, caller, op, paging, provider=provider, rid=rid, stored=stored, parameters=parameters,
                     strict=strict, opened=lambda: reading, visible=visibility(ctx, reading, provider, caller).clause,
                     base=base, level="instance" if rid is not None else "type",
                     resource_type=provider.resource_type, visible_to=visible_to, lookup=lookup)
        return _kept_open(_answer(ctx, op, call, paging, path), stack)


@dataclass(frozen=True)
class ServerCall:
    """A server-wide operation as asked: `[base]/$name/segments...` (no resource type) or `[base]/[type]/$name`."""

    caller: Caller
    base: str  # [base] of the links, as the client addressed the server
    name: str
    resource_type: str | None
    segments: tuple[str, ...]
    items: tuple[tuple[str, str], ...]  # the query, in order
    strict: bool  # an unknown parameter is refused
    headers: Mapping[str, str]
    url: str  # the request's whole address


def run_server_operation(ctx: ServerContext, asked: ServerCall, lookup: Lookup) -> Any:
    """A server-wide operation (the `register_operations` hook). Its handler reads with a connection that cannot
    write, each type as the caller may (OperationCall.visible_to, .permitted), at any level (no provider's
    `visible`: a type-level call is of every type)."""
    caller, name, resource_type, segments = asked.caller, asked.name, asked.resource_type, asked.segments
    op = ctx.extensions.operations.get(name)
    if op is None:
        raise ResourceNotFound(f"no operation ${name[:64]} on this server; system-level operations: "
                               f"{', '.join('$' + n for n in ctx.extensions.operations) or 'none'}")
    level: OperationLevel = "type" if resource_type is not None else "system"
    if level not in op.levels or (level == "type" and segments) or len(segments) != (
            len(op.path) if level == "system" else 0):
        raise ResourceNotFound(f"${op.name} is answered at {_where(op)} only")
    if resource_type is not None:
        ctx.registry.get(resource_type)  # 404 not-supported for an unknown type
    paging, parameters = _parameters(ctx, op, asked.items)
    with _Reading(ctx) as reading:
        def visible_to(rtype: str) -> Any:
            return visibility(ctx, reading(), resource_provider(ctx, rtype, f"${name}"), caller).clause

        call = _call(ctx, caller, op, paging, provider=None, rid=None, stored=None, parameters=parameters,
                     strict=asked.strict, opened=reading, visible=None, base=asked.base, level=level,
                     resource_type=resource_type, visible_to=visible_to, lookup=lookup,
                     segments=dict(zip(op.path, segments)), headers=asked.headers, url=asked.url)
        answer = _answer(ctx, op, call, paging, f"{resource_type}/${name}" if resource_type else f"${name}")
        return _kept_open(answer, reading.stack)


class _Reading:
    """The read-only connection of one call, opened at its first use (Bulk Data's polls open none: they read with
    their own engine), closed with the call."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.stack = ExitStack()
        self._connection: Connection | None = None

    def __call__(self) -> Connection:
        if self._connection is None:
            conn = self.stack.enter_context(self.ctx.db.connect())
            self._connection = self.stack.enter_context(backend_of(conn).read_only(conn))
        return self._connection

    def __enter__(self) -> _Reading:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stack.__exit__(*exc)


class _OpenStream:
    """A streamed answer's body, holding the call's connection (`held`) until it ends, fails or is closed unread."""

    def __init__(self, stream: Iterator[bytes], held: ExitStack) -> None:
        self.stream, self.held = stream, held

    def __iter__(self) -> _OpenStream:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self.stream)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            close = getattr(self.stream, "close", None)
            if close is not None:
                close()
        finally:
            self.held.close()


def _kept_open(answer: Any, stack: ExitStack) -> Any:
    """A streamed Answer takes the call's connection along (server.declare.answer.Answer.stream); any other answer
    leaves it to close with the call."""
    if isinstance(answer, Answer) and answer.stream is not None:
        return replace(answer, stream=_OpenStream(answer.stream, stack.pop_all()))
    return answer


def _where(op: Operation) -> str:
    tail = "".join(f"/[{segment}]" for segment in op.path)
    levels = (("system", f"[base]/${op.name}{tail}"), ("type", f"[base]/[type]/${op.name}"),
              ("instance", f"[base]/[type]/[id]/${op.name}"))
    return " and ".join(where for level, where in levels if level in op.levels)
