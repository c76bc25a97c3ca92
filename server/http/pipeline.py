"""The FHIR request pipeline: parse -> admit -> run -> render, then hand the record over.

A request is parsed once, on the event loop and without I/O, into a frozen FhirRequest (the interaction, the
response format, the base URL, the request id, the query items, strict handling); in a worker thread the caller is
admitted once (the token check, which may fetch the IdP's keys, the rate limit, the `authorize` hook and the access
scope of the `access_scope` hook: a Caller) and the interaction function runs with it; the answer is rendered
(JSON or XML, validators, 304) or the failure becomes an OperationOutcome. What was served (interaction, caller,
number returned) is left in the ASGI scope for server.http.observe, which records the request in one pass."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

import anyio
import anyio.to_thread
from starlette.responses import Response
from starlette.types import Scope

from server.declare.answer import PRIVATE, Answer
from server.declare.rendered import Rendered
from server.access.audit import SERVED, Served, returned
from server.access.ratelimit import caller_key
from server.access.tokens import Principal
from server.engine.context import ServerContext
from server.engine.caller import ANONYMOUS, Caller, authorize, caller_of
from server.engine.drivers import in_thread, on_loop
from server.engine.interactions import NOTHING_MORE, Asked, Found, Interact
from server.storage.steps import Steps
from server.declare.interaction import Interaction
from server.engine.instances import Resource
from server.errors import FhirError, InvalidRequest, UriTooLong
from server.declare.validators import headers_for, not_modified
from server.http.conditional import validators
from server.http.negotiation import Format, negotiate
from server.http.apart import render_apart
from server.http.observe import REQUEST_ID_STATE
from server.search.cost import CostlyGate, scope_cost, search_cost
from server.storage.budget import database_budget
from server.storage.cache import Bounded
from server.storage.db import once_more_if_dropped
from server.http.responses import (
    ERROR_FORMAT,
    FinalResponse,
    encoded_headers,
    answer_response,
    base_url,
    error_response,
    fhir_response,
    render,
)

MAX_QUERY_PARAMS = 100  # query parameters of any kind in one request
RENDER_TURNS = 1  # renders off the loop at once (per worker): a long one does not take every thread
LOOP_RENDER_ENTRIES = 20  # pretty JSON: a Bundle of more entries is rendered off the loop...
LOOP_RENDER_BYTES = 64 * 1024  # ...and stored bytes past this (parsed and printed again)


def heavy_render(fmt: Format, body: Any) -> bool:
    """Whether rendering `body` in `fmt` takes long enough to keep it off the event loop: XML (fhir.resources
    models, ~40 ms a resource) and HTML pages of any size, pretty JSON of a large Bundle. Compact JSON is the
    stored bodies joined: on the loop."""
    if fmt.xml or fmt.html:
        return True
    if not fmt.pretty:
        return False
    if isinstance(body, Rendered):
        return len(body.raw) > LOOP_RENDER_BYTES
    entries = body.get("entry") if isinstance(body, dict) else None
    return isinstance(entries, list) and len(entries) > LOOP_RENDER_ENTRIES


@dataclass(frozen=True)
class FhirRequest:
    interaction: Interaction
    format: Format
    base: str  # [base] of the links
    request_id: str
    items: tuple[tuple[str, str], ...]  # the query, in order
    strict: bool  # Prefer: handling=strict
    caller: Caller = ANONYMOUS  # who asks, once admitted (ANONYMOUS sees nothing)

    def admitted(self, caller: Caller) -> FhirRequest:
        return FhirRequest(self.interaction, self.format, self.base, self.request_id, self.items, self.strict,
                           caller)


Negotiator = Callable[[str | None, str | None, str | None], Format]  # (_format, Accept, _pretty) -> format


class Admission:
    """Who asks, decided in one place: the token (401), the access scope of the `access_scope` hook (403 for a
    claim it refuses), the rate limit (429) and the `authorize` hook (403). The scope and the rate-limit key
    depend on the token only: kept per verified token (the authenticator hands the same Principal for a token it
    has cached), so the hook runs once per token, not per request."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.public_metadata = ctx.settings.auth.public_metadata
        self._known = ctx.callers  # id(principal) -> (principal, caller, rate-limit key)

    def authenticate(self, authorization: str | None, interaction: Interaction) -> Principal | None:
        """The verified token (401 without a valid one); None for metadata when it is public."""
        if interaction.kind == "capabilities" and self.public_metadata:
            return None
        return self.ctx.authenticator.authenticate(authorization)

    def caller(self, principal: Principal | None) -> tuple[Caller, str | None]:
        """The caller and its rate-limit key (None: not counted); 403 for a scope the hook refuses."""
        if principal is None:
            return ANONYMOUS, None
        known = self._known.peek(id(principal))
        if known is not None and known[0] is principal:
            return known[1], known[2]
        caller = caller_of(self.ctx, principal)
        key = caller_key(principal, caller.scope.account)
        self._known.put(id(principal), (principal, caller, key))  # the entry holds principal: its id stays its own
        return caller, key

    def allow(self, caller: Caller, key: str | None, interaction: Interaction) -> None:
        """429 past the caller's rate limit, 403 when the `authorize` hook denies the interaction."""
        if caller.principal is None:
            return  # public metadata
        if key is not None and self.ctx.rate_limiter is not None:
            self.ctx.rate_limiter.take(key)
        authorize(self.ctx, caller.principal, interaction)


class Pipeline:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.admission = Admission(ctx)
        self.max_url_length = ctx.settings.server.max_url_length
        self.request_timeout_s = float(ctx.settings.server.request_timeout_seconds)
        edge = ctx.settings.server
        self.costly = CostlyGate(edge.costly_search_cost, edge.costly_searches, edge.costly_search_wait_seconds)
        self.scoped_queries = ctx.settings.auth.smart_scopes  # a token's scopes may carry queries
        # the admission runs on the event loop when a token check never waits for the network (no JWKS URL)
        self.on_loop = ctx.authenticator.remote is None
        self.namespace = ctx.settings.fhir.extension_namespace  # its canonical URLs link here
        self.refuse_unknown = ctx.settings.fhir.unknown_parameters == "refuse"
        self.limiter: anyio.CapacityLimiter | None = None  # the worker threads' (the app's lifespan sets it)
        self.render_turns = anyio.Semaphore(RENDER_TURNS)  # renders too long for the loop: one at a time
        self._formats: Bounded[Format] = Bounded(256)
        self._bases: Bounded[str] = Bounded(256)

    def parse(self, scope: Scope, headers: Mapping[str, str], interaction: Interaction,
              negotiator: Negotiator = negotiate) -> FhirRequest:
        """The request as the interactions need it; 414/400 for a request past the limits, 406 for a format
        not served. No I/O."""
        query: bytes = scope.get("query_string", b"")  # raw: no parsing before the limits are checked
        target = len(scope.get("raw_path") or b"") + len(query)
        if target > self.max_url_length:
            raise UriTooLong(f"the request target is {target} bytes long; at most {self.max_url_length}")
        # as Starlette's QueryParams read it (blank values kept, latin-1 as the ASGI server passed it)
        items = tuple(parse_qsl(query.decode("latin-1"), keep_blank_values=True)) if query else ()
        if len(items) > MAX_QUERY_PARAMS:
            raise InvalidRequest(f"too many query parameters; at most {MAX_QUERY_PARAMS}")
        if b"%00" in query or b"\x00" in query:
            raise InvalidRequest("a query parameter holds a NUL character (%00)")
        asked = (_last(items, "_format"), headers.get("accept"), _last(items, "_pretty"))
        if negotiator is negotiate:  # the same few Accept headers, over and over: each negotiated once
            fmt = self._formats.get(asked, lambda: negotiate(*asked))
        else:
            fmt = negotiator(*asked)
        return FhirRequest(interaction, fmt, self._base(scope, headers), scope["state"][REQUEST_ID_STATE], items,
                           self._strict(headers.get("prefer")))

    def _strict(self, prefer: str | None) -> bool:
        """Whether an unknown parameter is refused: Prefer: handling=strict or lenient says, else
        fhir.unknown_parameters (refuse by default)."""
        handling = {part.strip().lower() for part in (prefer or "").replace(" ", "").split(";") for part in
                    part.split(",")}
        if "handling=strict" in handling:
            return True
        return self.refuse_unknown and "handling=lenient" not in handling

    def _base(self, scope: Scope, headers: Mapping[str, str]) -> str:
        """[base], found once per address the clients use (server.http.responses.base_url)."""
        server = scope.get("server")
        key = (scope.get("scheme"), headers.get("host"), scope.get("root_path"), tuple(server) if server else None,
               headers.get("x-forwarded-proto"), headers.get("x-forwarded-host"))
        return self._bases.get(key, lambda: base_url(scope, headers, self.ctx.settings))

    async def serve(self, scope: Scope, interaction: Interaction, steps: Interact,
                    negotiator: Negotiator = negotiate, estimate: bool = False,
                    found: Found = NOTHING_MORE) -> Response:
        """Parse, admit, run and render one FHIR request; every failure becomes an OperationOutcome. `steps`: the
        interaction (server.engine.interactions, over the admitted request and what the route `found` beside its
        kind, type and id), run by the event loop's driver (or, without one, in a worker thread); it
        may answer a plain Answer (an operation's: a status, headers, JSON or a file), rendered as it says.
        `estimate`: a search or an operation, whose cost is estimated first (server.search.cost): a costly one waits
        for its turn."""
        admitted: FhirRequest | None = None
        principal: Principal | None = None  # known before the caller: a refused scope still names its subject
        body: Any = None
        fmt = ERROR_FORMAT
        headers = request_headers(scope)
        try:
            parsed = self.parse(scope, headers, interaction, negotiator)
            fmt = parsed.format
            authorization = headers.get("authorization")

            def admit() -> FhirRequest:  # token, scope, rate limit and authorize: once
                nonlocal admitted, principal
                principal = self.admission.authenticate(authorization, interaction)
                caller, key = self.admission.caller(principal)
                admitted = parsed.admitted(caller.doing(interaction))
                self.admission.allow(caller, key, interaction)
                return admitted

            if self.on_loop:  # the token check never waits for the network (no JWKS URL): on the loop
                admit()
            elif estimate or self.scoped_queries:  # a caller is admitted (401/403/429) before a costly turn
                await self._in_thread(admit)  # (in a thread: the token check may fetch the IdP's keys)
            # what it may cost: a search's query, and any request's caller's scope queries (each statement of it
            # carries them), estimated alike
            costly = self.costly.threshold <= (search_cost(parsed.items) if estimate else 0) + (
                scope_cost(admitted.caller.scope.filters) if admitted is not None else 0)
            async with self.costly.turn() if costly else nullcontext():  # costly requests: their own share
                with database_budget(self.request_timeout_s):  # the request's database time, in all
                    caller = admitted if admitted is not None else await self._in_thread(admit)
                    asked = Asked(caller.interaction, caller.caller, caller.base, caller.items, caller.strict,
                                  found)
                    body = await self._drive(partial(steps, self.ctx, asked), hot=not costly)
            assert admitted is not None
            if isinstance(body, Answer):
                response = answer_response(body)
            elif heavy_render(admitted.format, body):  # off the loop, one at a time: the probes still answer
                async with self.render_turns:
                    content = await render_apart(body, admitted.format, admitted.base, self.namespace)
                response = self._render(headers, admitted, body, content)
            else:
                response = self._render(headers, admitted, body)
        except Exception as exc:  # every failure becomes an OperationOutcome in one place
            response = error_response(self.ctx, exc, interaction, fmt, scope["state"][REQUEST_ID_STATE], scope)
        applied = admitted.caller.scope if admitted is not None and admitted.caller.principal is not None else None
        scope["state"][SERVED] = Served(interaction, principal, applied,
                                        returned(body) if response.status_code == 200 else None)
        return response

    def unserved(self, scope: Scope, error: FhirError, interaction: Interaction | None = None) -> Response:
        """An error answered before any interaction runs (no route, wrong method...), recorded like the others, in the
        format the request asks where it asks one served (a browser's: a page), else JSON."""
        scope["state"][SERVED] = Served(interaction)
        try:
            fmt = self.parse(scope, request_headers(scope), interaction or Interaction("capabilities")).format
        except FhirError:
            fmt = ERROR_FORMAT
        return error_response(self.ctx, error, interaction, fmt, scope["state"][REQUEST_ID_STATE], scope)

    async def _drive(self, interaction: Callable[[], Steps[Any]], hot: bool = True) -> Any:
        """The interaction on the event loop's driver; in a worker thread where there is none (read replicas, a
        database in memory) or for a costly search (`hot` False: parsing thousands of values and compiling
        their SQL would hold the loop), made anew if it is run again on a new connection."""
        if self.ctx.hot is not None and hot:
            return await on_loop(self.ctx, interaction(), self.limiter)
        return await self._in_thread(lambda: in_thread(self.ctx, interaction()))

    async def _in_thread(self, work: Callable[[], Any]) -> Any:
        """`work` in a worker thread; once more, on a new connection, when the database dropped the first."""
        return await anyio.to_thread.run_sync(once_more_if_dropped, work, limiter=self.limiter)

    def _render(self, headers: Mapping[str, str], fhir: FhirRequest, body: Resource,
                content: bytes | None = None) -> Response:
        """The answer of `body` (`content`: its bytes, rendered already)."""
        if content is None:
            content = render(body, fhir.format, fhir.base, namespace=self.namespace)
        etag, last_modified = validators(body, content, page=fhir.format.html)
        answer = {**headers_for(etag, last_modified), **PRIVATE}
        if not_modified(headers, etag, last_modified):
            return FinalResponse(304, encoded_headers(answer), b"")
        return fhir_response(content, fhir.format, headers=answer)


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by (lower-case) name, the first of a repeated one (as Starlette's Headers.get)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(scope["headers"])}


def _last(items: tuple[tuple[str, str], ...], name: str) -> str | None:
    """The parameter's last value (as a query string's dict would give it), None when absent."""
    return next((v for k, v in reversed(items) if k == name), None)
