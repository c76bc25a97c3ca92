"""The FHIR route table: each endpoint names its interaction and the engine function that runs it; the pipeline
(server.http.pipeline) does the rest."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.bulk.endpoints import bulk_routes
from server.engine import reads, searches, versions
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
from server.http.pipeline import Pipeline

METHODS = ["GET", "HEAD"]


def _pipeline(request: Request) -> Pipeline:
    pipeline: Pipeline = request.app.state.pipeline
    return pipeline


async def metadata(request: Request) -> Response:
    rtype = request.path_params.get("rtype")
    interaction = Interaction("capabilities", rtype)
    if rtype is not None and rtype not in request.app.state.ctx.registry.providers:
        return _pipeline(request).unserved(
            request, ResourceTypeNotSupported(f"resource type {rtype!r} is not supported"), interaction)
    return await _pipeline(request).serve(request, interaction, steps=lambda ctx, r: (
        reads.capabilities_steps(ctx, r.base)))


async def search(request: Request) -> Response:
    rtype = request.path_params["rtype"]
    return await _pipeline(request).serve(request, Interaction("search-type", rtype), steps=lambda ctx, r: (
        searches.search_type_steps(ctx, r.caller, r.base, rtype, r.items, strict=r.strict)), estimate=True)


async def read(request: Request) -> Response:
    rtype, rid = request.path_params["rtype"], request.path_params["rid"]
    return await _pipeline(request).serve(request, Interaction("read", rtype, rid), steps=lambda ctx, r: (
        reads.read_steps(ctx, r.caller, rtype, rid, r.items)))


async def operation(request: Request) -> Response:
    rtype, rid = request.path_params["rtype"], request.path_params.get("rid")  # no rid: [type]/$name
    name = request.path_params["op"].removeprefix("$")
    return await _pipeline(request).serve(request, Interaction("operation", rtype, rid, name), steps=lambda ctx, r: (
        searches.run_operation_steps(ctx, r.caller, r.base, rtype, rid, name, r.items, strict=r.strict)),
        estimate=True)


async def vread(request: Request) -> Response:
    rtype, rid, vid = (request.path_params[k] for k in ("rtype", "rid", "vid"))
    return await _pipeline(request).serve(request, Interaction("vread", rtype, rid), steps=lambda ctx, r: (
        versions.vread_steps(ctx, r.caller, rtype, rid, vid, r.items)))


async def history_instance(request: Request) -> Response:
    rtype, rid = request.path_params["rtype"], request.path_params["rid"]
    return await _pipeline(request).serve(request, Interaction("history-instance", rtype, rid), steps=lambda ctx, r: (
        versions.history_instance_steps(ctx, r.caller, r.base, rtype, rid, r.items, strict=r.strict)))


async def history_type(request: Request) -> Response:
    rtype = request.path_params["rtype"]
    return await _pipeline(request).serve(request, Interaction("history-type", rtype), steps=lambda ctx, r: (
        versions.history_type_steps(ctx, r.caller, r.base, rtype, r.items, strict=r.strict)))


async def base(request: Request) -> Response:
    return _pipeline(request).unserved(request, ResourceNotFound(
        "no system-level interaction here (no system search, history or transaction): this read-only server "
        "answers [base]/metadata and [base]/[type]..."), Interaction("capabilities"))


class FhirType(Convertor[str]):
    regex = "[A-Z][A-Za-z]{0,63}"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class FhirId(FhirType):
    regex = "(?!metadata(?:/|$))[A-Za-z0-9.-]{1,64}"


class FhirOperation(FhirType):
    regex = "[$]?[a-z][A-Za-z0-9-]{0,63}"


register_url_convertor("fhirtype", FhirType())
register_url_convertor("fhirid", FhirId())
register_url_convertor("fhirop", FhirOperation())


def _both(path: str, endpoint: Callable[[Request], Any]) -> list[Route]:
    """Each path answers with and without the trailing slash, never by redirect."""
    return [Route(path, endpoint, methods=METHODS), Route(path + "/", endpoint, methods=METHODS)]


def fhir_routes() -> list[Route]:
    return [
        # what users repeat most, tried first: only a type name, a FHIR id (never "metadata") and an operation name
        # match these (never $export..., _history or metadata, which the routes below answer)
        *_both("/fhir/{rtype:fhirtype}/{rid:fhirid}", read),
        *_both("/fhir/{rtype:fhirtype}", search),
        *_both("/fhir/{rtype:fhirtype}/{rid:fhirid}/{op:fhirop}", operation),
        *_both("/.well-known/smart-configuration", smart_configuration_endpoint),
        *_both("/fhir/.well-known/smart-configuration", smart_configuration_endpoint),
        *_both("/fhir", base),
        *_both("/fhir/metadata", metadata),
        *_both("/fhir/{rtype}/metadata", metadata),
        *bulk_routes(),  # $export, its status and files: before [type] and [type]/$op
        *_both("/fhir/{rtype}/_history", history_type),
        *_both("/fhir/{rtype}", search),
        *_both("/fhir/{rtype}/{rid}/_history", history_instance),
        *_both("/fhir/{rtype}/{rid}/_history/{vid}", vread),
        *_both("/fhir/{rtype}/${op}", operation),
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
    return _pipeline(request).unserved(request, error)
