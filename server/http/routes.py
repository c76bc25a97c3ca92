"""The FHIR route table: each endpoint names its interaction and the engine function that runs it; the pipeline
(server.http.pipeline) does the rest. Every path is under the API's mount (server.settings.FhirApi); the
server-wide operations of plugins (Bulk Data's `$export`...) are answered at `[base]/$name[/segments]` and
`[base]/[type]/$name` (server.engine.operations)."""
from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.datastructures import URLPath
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound, Route
from starlette.types import Receive, Scope, Send

from server.engine import operations
from server.engine.interactions import INTERACTIONS, Found
from server.declare.interaction import Interaction
from server.errors import (
    FhirError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    ResourceNotFound,
    ResourceTypeNotSupported,
)
from server.http.discovery import smart_configuration_endpoint
from server.http.negotiation import answering, negotiate
from server.http.pipeline import Negotiator, Pipeline, request_headers
from server.settings import FhirApi

METHODS = ("GET", "HEAD")
API = FhirApi()  # the mount of every route below

# the shapes of a path's segments: a type name, a FHIR id (never "metadata", a word of the API), a server-wide
# operation's name (with its "$")
FHIR_TYPE = re.compile(r"[A-Z][A-Za-z]{0,63}")
FHIR_ID = re.compile(r"(?!metadata$)[A-Za-z0-9.-]{1,64}")
SYSTEM_OPERATION = re.compile(r"[$][a-z][A-Za-z0-9-]{0,63}")

Endpoint = Callable[[Pipeline, Scope, tuple[str, ...]], Awaitable[Response]]


async def metadata(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    rtype = at[0] if at else None
    interaction = Interaction("capabilities", rtype)
    if rtype is not None and rtype not in pipeline.ctx.registry.providers:
        return pipeline.unserved(
            scope, ResourceTypeNotSupported(f"resource type {rtype!r} is not supported"), interaction)
    return await pipeline.serve(scope, interaction, INTERACTIONS["capabilities"])


async def search(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    rtype, = at
    return await pipeline.serve(scope, Interaction("search-type", rtype), INTERACTIONS["search-type"],
                                estimate=True)


async def read(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    rtype, rid = at
    return await pipeline.serve(scope, Interaction("read", rtype, rid), INTERACTIONS["read"])


async def operation(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    """`[type]/[id]/$name` (at: type, id, name) or `[type]/$name` (at: type, name)."""
    rtype, rid, name = at if len(at) == 3 else (at[0], None, at[1])
    name = name.removeprefix("$")
    ctx = pipeline.ctx
    if rid is None and operations.is_server_wide(ctx, rtype, name):
        return await _server_operation(pipeline, scope, rtype, name, ())
    op = operations.declared(ctx, rtype, name)
    interaction = Interaction("operation", rtype, rid, name, op.scope if op is not None else None)
    negotiator: Negotiator = answering(op.media_types) if op is not None and op.media_types else negotiate
    return await pipeline.serve(scope, interaction, INTERACTIONS["operation"], negotiator=negotiator, estimate=True)


async def system_operation(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    """`[base]/$name[/segments]` (at: $name, then the segments): a server-wide operation of a plugin."""
    return await _server_operation(pipeline, scope, None, at[0].removeprefix("$"), at[1:])


async def _server_operation(pipeline: Pipeline, scope: Scope, rtype: str | None, name: str,
                            segments: tuple[str, ...]) -> Response:
    op = pipeline.ctx.extensions.operations.get(name)
    interaction = Interaction("operation", rtype, segments[0] if segments else None, name,
                              op.scope if op is not None else None)
    negotiator: Negotiator = answering(op.media_types) if op is not None and op.media_types else negotiate
    headers = tuple((k, v) for k, v in request_headers(scope).items() if k in ("prefer", "range"))
    return await pipeline.serve(scope, interaction, INTERACTIONS["server-operation"], negotiator=negotiator,
                                estimate=True,  # a kick-off whose `_typeFilter` is costly takes a costly turn
                                found=Found(segments=segments, headers=headers,
                                            query=scope.get("query_string", b"").decode("latin-1")))


async def vread(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    rtype, rid, _, vid = at
    return await pipeline.serve(scope, Interaction("vread", rtype, rid), INTERACTIONS["vread"],
                                found=Found(version=vid))


async def history_instance(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    rtype, rid, _ = at
    return await pipeline.serve(scope, Interaction("history-instance", rtype, rid), INTERACTIONS["history-instance"])


async def history_type(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    rtype, _ = at
    return await pipeline.serve(scope, Interaction("history-type", rtype), INTERACTIONS["history-type"])


async def base(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    return pipeline.unserved(scope, ResourceNotFound(
        "no system-level interaction here (no system search, history or transaction): this read-only server "
        "answers [base]/metadata and [base]/[type]..."), Interaction("capabilities"))


async def smart_configuration(pipeline: Pipeline, scope: Scope, at: tuple[str, ...]) -> Response:
    return await smart_configuration_endpoint(Request(scope))


def resolve(path: str) -> tuple[Endpoint, tuple[str, ...]] | None:
    """The endpoint of a path under the API's mount (what follows it: "" for [base]) and the segments it takes,
    None when no endpoint answers there. Each path answers with and without one trailing slash, never by
    redirect; what users repeat most ([type]/[id], [type]) is decided first."""
    if path in ("", "/"):
        return base, ()
    if not path.startswith("/"):
        return None
    path = path[1:]
    head, _, tail = path.partition("/")
    if SYSTEM_OPERATION.fullmatch(head) and tail != "metadata" and tail != "metadata/":
        # [base]/$name[/segments]: its segments as the operation's (never [type] nor [type]/[id])
        stripped = tail.strip("/")
        return system_operation, (head, *(stripped.split("/") if stripped else ()))
    segments = tuple((path[:-1] if path.endswith("/") else path).split("/"))
    if "" in segments:
        return None
    n, first = len(segments), segments[0]
    if n == 1:
        return (metadata, ()) if first == "metadata" else (search, segments)
    second = segments[1]
    if n == 2:
        if FHIR_TYPE.fullmatch(first) and FHIR_ID.fullmatch(second):
            return read, segments
        if segments == (".well-known", "smart-configuration"):
            return smart_configuration, ()
        if second == "metadata":
            return metadata, (first,)
        if second == "_history":
            return history_type, segments
        if second.startswith("$") and len(second) > 1:
            return operation, (first, second[1:])
        return read, segments
    third = segments[2]
    if n == 3:  # "_history" is never an operation's name
        return (history_instance if third == "_history" else operation), segments
    if n == 4 and third == "_history":
        return vread, segments
    return None


class FhirRoutes(BaseRoute):
    """Every FHIR endpoint under the API's mount, as one Starlette route: the endpoint is found from the path's
    segments (server.http.routes.resolve: no list of patterns tried in turn) and answers the ASGI call itself (no
    Request object); wrong methods get a 405 OperationOutcome. The Starlette app around it stays the framework
    (middleware, lifespan, the explorer's and the probes' routes)."""

    def __init__(self, pipeline: Pipeline, api: FhirApi = API) -> None:
        self.pipeline = pipeline
        self.mount = api.mount

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        path = route_path(scope)
        mount = self.mount
        if not path.startswith(mount):
            return Match.NONE, {}
        found = resolve(path[len(mount):])
        if found is None:
            return Match.NONE, {}
        return Match.FULL, {"endpoint": found[0], "fhir_segments": found[1]}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in METHODS:
            allow = ", ".join(METHODS)
            response = self.pipeline.unserved(scope, MethodNotAllowed(
                f"method {scope['method']} is not allowed here: this FHIR server is read-only (allowed: {allow})",
                headers={"Allow": allow}))
        else:
            response = await scope["endpoint"](self.pipeline, scope, scope["fhir_segments"])
        await response(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)


def route_path(scope: Scope) -> str:
    """The path the routes match: the request's without the app's root_path (ASGI's `path` holds the root; a path
    outside it, from a server that leaves the root out, is matched as it is). Starlette's router reads it the same
    way, by a helper it keeps private (starlette._utils.get_route_path), so this is ours, minimal;
    tests/http/test_routes.py checks that both still agree."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root):] if root and (path == root or path.startswith(root + "/")) else path


def fhir_routes(pipeline: Pipeline) -> list[BaseRoute]:
    return [FhirRoutes(pipeline),
            Route("/.well-known/smart-configuration", smart_configuration_endpoint, methods=list(METHODS)),
            Route("/.well-known/smart-configuration/", smart_configuration_endpoint, methods=list(METHODS))]


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
    pipeline: Pipeline = request.app.state.pipeline
    return pipeline.unserved(request.scope, error)
