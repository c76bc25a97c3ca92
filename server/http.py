"""HTTP plumbing shared by the endpoints: base URL, JSON responses, the one error renderer."""
from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from server.context import ServerContext
from server.errors import FhirError, InternalError
from server.interaction import Interaction
from server.negotiation import FHIR_JSON, Format
from server.rendered import Rendered, materialized, splice

log = logging.getLogger("orgunit_fhir")
ERROR_FORMAT = Format(FHIR_JSON)


def base_url(request: Request, ctx: ServerContext) -> str:
    configured = ctx.settings.server.base_url
    if configured:
        return configured.rstrip("/")
    scheme, host = request.url.scheme, request.headers.get("host") or request.url.netloc
    if ctx.settings.server.trust_forwarded:
        scheme = request.headers.get("x-forwarded-proto", scheme).split(",")[0].strip()
        host = request.headers.get("x-forwarded-host", host).split(",")[0].strip()
    prefix = request.scope.get("root_path", "").rstrip("/")
    return f"{scheme}://{host}{prefix}/fhir"


def request_id(request: Request) -> str:
    """The id the request middleware chose (the caller's X-Request-ID when valid); else chosen here alike."""
    rid: str | None = request.scope.get("state", {}).get("request_id")
    if rid is None:
        from server.logs import accept_request_id

        rid = accept_request_id(request.headers.get("x-request-id"))
        request.state.request_id = rid
    return rid


def render(body: dict[str, Any] | Rendered, fmt: Format) -> bytes:
    if isinstance(body, Rendered) and not (fmt.xml or fmt.pretty):
        return body.raw
    if fmt.xml or fmt.pretty:
        body = materialized(body)
    if fmt.xml:
        from fhir.resources.R4B import (
            get_fhir_model_class,  # XML only: keep models off the JSON path
        )

        model = get_fhir_model_class(body["resourceType"]).model_validate(body)
        return model.model_dump_xml(pretty_print=fmt.pretty)  # type: ignore[no-any-return]
    return orjson.dumps(body, default=splice, option=orjson.OPT_PASSTHROUGH_DATACLASS | (
        orjson.OPT_INDENT_2 if fmt.pretty else 0))


def fhir_response(body: dict[str, Any] | bytes, fmt: Format, status: int = 200,
                  headers: dict[str, str] | None = None) -> Response:
    content = body if isinstance(body, bytes) else render(body, fmt)
    return Response(content, status_code=status, headers=headers, media_type=fmt.content_type)


def error_response(request: Request, exc: BaseException, interaction: Interaction | None = None,
                   fmt: Format = ERROR_FORMAT) -> Response:
    ctx: ServerContext = request.app.state.ctx
    rid = request_id(request)
    if isinstance(exc, FhirError):
        error = exc
    else:
        error = ctx.pm.hook.translate_exception(exception=exc, interaction=interaction) or InternalError(
            "internal server error")
    if error.status >= 500:
        log.error("request %s %s %s failed: %s", rid, request.method, request.url.path, exc.__class__.__name__,
                  exc_info=exc if not isinstance(exc, FhirError) else None)
        error.diagnostics = f"{error.diagnostics} (request id {rid})"
    headers = {**error.headers, "X-Request-ID": rid}
    return fhir_response(error.outcome(), fmt, error.status, headers)
