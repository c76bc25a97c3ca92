"""The Bulk Data routes, each through the request pipeline (token, scope, authorize hook, audit, errors as
OperationOutcomes), as every interaction: kick-off `[base]/$export` and `[base]/[type]/$export`, the job's status
`[base]/$export-status/[job]`, its files `[base]/$export-file/[job]/[name]`. GET and HEAD only: a job is not
cancelled by DELETE (405, as every other method on this read-only server); it ends, and its files go, when it
expires (`bulk.expire_seconds`)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.bulk.parameters import OUTPUT_FORMATS
from server.bulk.service import FILE_PATH, STATUS_PATH, BulkService
from server.declare.interaction import Interaction
from server.errors import NotAcceptable
from server.http.negotiation import Format, negotiate
from server.http.pipeline import Pipeline

METHODS = ["GET", "HEAD"]
NDJSON_ACCEPTED = {*OUTPUT_FORMATS, "application/x-ndjson", "*/*", "application/*"}


def _pipeline(request: Request) -> Pipeline:
    pipeline: Pipeline = request.app.state.pipeline
    return pipeline


def _bulk(request: Request) -> BulkService:
    bulk: BulkService = request.app.state.bulk
    return bulk


def ndjson_format(format_param: str | None, accept: str | None, pretty: str | None) -> Format:
    """A file is NDJSON, a manifest JSON, whatever is asked; an error is FHIR JSON. 406 for an Accept that takes
    none of them."""
    if not accept or any(part.split(";")[0].strip().lower() in NDJSON_ACCEPTED for part in accept.split(",")):
        return Format()
    try:
        return negotiate(None, accept, None)
    except NotAcceptable:
        raise NotAcceptable(f"the files are application/fhir+ndjson; not served as {accept}") from None


async def kickoff(request: Request) -> Response:
    rtype = request.path_params.get("rtype")
    bulk, prefer = _bulk(request), request.headers.get("prefer", "")
    path, query = request.scope["path"], request.scope.get("query_string", b"").decode("latin-1")
    tail = path[path.find("/$export") if rtype is None else path.find(f"/{rtype}/$export"):].rstrip("/")
    return await _pipeline(request).serve(request, Interaction("operation", rtype, None, "export"), lambda ctx, r: (
        bulk.kickoff(r.caller, r.base, f"{r.base}{tail}{'?' + query if query else ''}", r.items, prefer, rtype)))


async def status(request: Request) -> Response:
    job, bulk = request.path_params["job"], _bulk(request)
    return await _pipeline(request).serve(request, Interaction("operation", None, job, "export-status"), lambda ctx, r: (
        bulk.status(r.caller, r.base, job)), negotiator=ndjson_format)


async def download(request: Request) -> Response:
    job, name, bulk = request.path_params["job"], request.path_params["name"], _bulk(request)
    return await _pipeline(request).serve(request, Interaction("operation", None, job, "export-file"), lambda ctx, r: (
        bulk.download(r.caller, job, name, request.headers.get("range"))), negotiator=ndjson_format)


def _both(path: str, endpoint: object) -> list[Route]:
    return [Route(path, endpoint, methods=METHODS), Route(path + "/", endpoint, methods=METHODS)]  # type: ignore[arg-type]


def bulk_routes() -> list[Route]:
    """Before the generic FHIR routes (which would take `$export` for a resource type)."""
    return [
        *_both("/fhir/$export", kickoff),
        *_both(f"/fhir/{STATUS_PATH}/{{job}}", status),
        *_both(f"/fhir/{FILE_PATH}/{{job}}/{{name}}", download),
        *_both("/fhir/{rtype}/$export", kickoff),
    ]
