"""The route table and thin async endpoints around the interactions."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.engine import interactions
from server.access.audit import audit
from server.access.ratelimit import caller_key
from server.access.tokens import Principal, claim_path
from server.http.conditional import headers_for, not_modified, validators
from server.context import ServerContext
from server.errors import (
    FhirError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    ResourceNotFound,
    ResourceTypeNotSupported,
    UriTooLong,
)
from server.http.responses import (
    ERROR_FORMAT,
    base_url,
    error_response,
    fhir_response,
    render,
    request_id,
)
from server.engine.interaction import Interaction
from server.http.negotiation import negotiate

METHODS = ["GET", "HEAD"]
CARRIED_PARAMS = ("_format", "_pretty")  # kept in paging links, though not search parameters


MAX_QUERY_PARAMS = 100  # query parameters of any kind in one request
# answers depend on the caller's token (its account and subtree): no shared cache may serve them to another
PRIVATE = {"Cache-Control": "private", "Vary": "Accept, Authorization"}


def _check_limits(request: Request, ctx: ServerContext) -> None:
    query: bytes = request.scope.get("query_string", b"")  # raw: no parsing on the hot path
    target = len(request.scope.get("raw_path", b"")) + len(query)
    if target > ctx.settings.server.max_url_length:
        raise UriTooLong(f"the request target is {target} bytes long; at most {ctx.settings.server.max_url_length}")
    if query.count(b"&") >= MAX_QUERY_PARAMS and len(request.query_params.multi_items()) > MAX_QUERY_PARAMS:
        raise InvalidRequest(f"too many query parameters; at most {MAX_QUERY_PARAMS}")
    if b"%00" in query or b"\x00" in query:
        raise InvalidRequest("a query parameter holds a NUL character (%00)")


def _account(ctx: ServerContext, principal: Principal | None) -> str | None:
    """The account the token names, for the audit line (the scope itself is the access_scope hook's)."""
    if principal is None:
        return None
    account = claim_path(principal.claims, ctx.settings.auth.account_claim)
    return account if isinstance(account, str) else ctx.settings.auth.default_account


async def _serve(request: Request, interaction: Interaction, call: Callable[..., dict[str, Any]],
                 *args: Any, **kwargs: Any) -> Response:
    ctx: ServerContext = request.app.state.ctx
    started = time.perf_counter()
    request.state.interaction = interaction
    fmt = ERROR_FORMAT
    principal: Principal | None = None
    body: Any = None
    try:
        _check_limits(request, ctx)
        query = request.query_params
        fmt = negotiate(query.get("_format"), request.headers.get("accept"), query.get("_pretty"))
        authorization = request.headers.get("authorization")
        public = interaction.kind == "capabilities" and ctx.settings.auth.public_metadata
        authenticated = False

        def work() -> Any:
            # in the worker thread: verifying a token may fetch the IdP's keys (JWKS), which must not stall the loop
            nonlocal principal, authenticated
            if not public and not authenticated:
                principal = ctx.authenticator.authenticate(authorization)
                authenticated = True
                if ctx.rate_limiter is not None:
                    ctx.rate_limiter.take(caller_key(principal, ctx.settings))
            return call(ctx, principal, *args, **kwargs)

        limiter = getattr(request.app.state, "limiter", None)
        try:
            body = await anyio.to_thread.run_sync(work, limiter=limiter)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            body = await anyio.to_thread.run_sync(work, limiter=limiter)  # once, on a new connection
        content = render(body, fmt)
        etag, last_modified = validators(body, content)
        headers = {**headers_for(etag, last_modified), **PRIVATE, "X-Request-ID": request_id(request)}
        if not_modified(request.headers, etag, last_modified):
            response = Response(status_code=304, headers=headers)
        else:
            response = fhir_response(content, fmt, headers=headers)
    except Exception as exc:  # every failure becomes an OperationOutcome in one place
        response = error_response(request, exc, interaction, fmt)
    audit(request, interaction, principal, _account(ctx, principal), response.status_code, started, body)
    return response


def _search_args(request: Request) -> dict[str, Any]:
    items = request.query_params.multi_items()
    strict = "handling=strict" in request.headers.get("prefer", "").replace(" ", "").lower()
    extra = [(k, v) for k, v in items if k in CARRIED_PARAMS]
    return {"items": items, "strict": strict, "extra": extra}


async def metadata(request: Request) -> Response:
    ctx: ServerContext = request.app.state.ctx
    rtype = request.path_params.get("rtype")
    interaction = Interaction("capabilities", rtype)
    if rtype is not None and rtype not in ctx.registry.providers:
        return _unserved(request, ResourceTypeNotSupported(f"resource type {rtype!r} is not supported"), interaction)
    return await _serve(request, interaction, interactions.capabilities, base_url(request, ctx))


async def search(request: Request) -> Response:
    rtype = request.path_params["rtype"]
    return await _serve(request, Interaction("search-type", rtype), interactions.search_type,
                        base_url(request, request.app.state.ctx), rtype, **_search_args(request))


async def read(request: Request) -> Response:
    rtype, rid = request.path_params["rtype"], request.path_params["rid"]
    return await _serve(request, Interaction("read", rtype, rid), interactions.read, rtype, rid,
                        request.query_params.multi_items())


async def operation(request: Request) -> Response:
    rtype, rid, name = request.path_params["rtype"], request.path_params["rid"], request.path_params["op"]
    name = name.removeprefix("$")
    return await _serve(request, Interaction("operation", rtype, rid, name), interactions.run_operation,
                        base_url(request, request.app.state.ctx), rtype, rid, name, **_search_args(request))


async def vread(request: Request) -> Response:
    rtype, rid, vid = (request.path_params[k] for k in ("rtype", "rid", "vid"))
    return await _serve(request, Interaction("vread", rtype, rid), interactions.vread, rtype, rid, vid,
                        request.query_params.multi_items())


async def history_instance(request: Request) -> Response:
    rtype, rid = request.path_params["rtype"], request.path_params["rid"]
    return await _serve(request, Interaction("history-instance", rtype, rid), interactions.history_instance,
                        base_url(request, request.app.state.ctx), rtype, rid, **_search_args(request))


async def history_type(request: Request) -> Response:
    rtype = request.path_params["rtype"]
    return await _serve(request, Interaction("history-type", rtype), interactions.history_type,
                        base_url(request, request.app.state.ctx), rtype, **_search_args(request))


def _both(path: str, endpoint: Callable[[Request], Any]) -> list[Route]:
    """Each path answers with and without the trailing slash, never by redirect."""
    return [Route(path, endpoint, methods=METHODS), Route(path + "/", endpoint, methods=METHODS)]


def _unserved(request: Request, error: FhirError, interaction: Interaction | None = None) -> Response:
    """An error answered before any interaction runs (no route, wrong method...), audited like the others."""
    started = time.perf_counter()
    response = error_response(request, error, interaction)
    audit(request, interaction, None, None, response.status_code, started)
    return response


async def base(request: Request) -> Response:
    return _unserved(request, ResourceNotFound(
        "no system-level interaction here (no system search, history or transaction): this read-only server "
        "answers [base]/metadata and [base]/[type]..."), Interaction("capabilities"))


def fhir_routes() -> list[Route]:
    return [
        *_both("/fhir", base),
        *_both("/fhir/metadata", metadata),
        *_both("/fhir/{rtype}/metadata", metadata),
        *_both("/fhir/{rtype}/_history", history_type),
        *_both("/fhir/{rtype}", search),
        *_both("/fhir/{rtype}/{rid}/_history", history_instance),
        *_both("/fhir/{rtype}/{rid}/_history/{vid}", vread),
        *_both("/fhir/{rtype}/{rid}", read),
        *_both("/fhir/{rtype}/{rid}/{op}", operation),
    ]


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (wrong method) as OperationOutcomes."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow", ", ".join(METHODS))
        error: FhirError = MethodNotAllowed(
            f"method {request.method} is not allowed here: this FHIR server is read-only (allowed: {allow})",
            headers={"Allow": allow})
    elif exc.status_code == 404:
        error = ResourceNotFound(f"no FHIR endpoint at {request.url.path}")
    elif exc.status_code < 500:
        error = InvalidRequest(str(exc.detail))
    else:
        error = InternalError(str(exc.detail))
    return _unserved(request, error)
