"""HTTP plumbing shared by the endpoints: base URL, JSON responses, the one error renderer."""
from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import quote

import orjson
from starlette.requests import Request
from starlette.responses import Response

from server.context import ServerContext
from server.errors import FhirError, InternalError
from server.engine.interaction import Interaction
from server.http.negotiation import FHIR_JSON, Format
from server.engine.rendered import Rendered, materialized, splice

log = logging.getLogger("orgunit_fhir")
ERROR_FORMAT = Format(FHIR_JSON)


def base_url(request: Request, ctx: ServerContext) -> str:
    configured = ctx.settings.server.base_url
    if configured:
        return configured.rstrip("/")
    scheme, host = request.url.scheme, request.headers.get("host", "")
    if not _HOST.fullmatch(host):  # a malformed Host never makes a link: the address we were reached at
        server = request.scope.get("server") or ("localhost", None)
        host = f"{server[0]}:{server[1]}" if server[1] else str(server[0])
    if ctx.settings.server.trust_forwarded:
        forwarded_scheme = request.headers.get("x-forwarded-proto", scheme).split(",")[0].strip().lower()
        forwarded_host = request.headers.get("x-forwarded-host", host).split(",")[0].strip()
        scheme = forwarded_scheme if forwarded_scheme in ("http", "https") else scheme
        host = forwarded_host if _HOST.fullmatch(forwarded_host) else host
    prefix = request.scope.get("root_path", "").rstrip("/")
    return f"{scheme}://{host}{quote(prefix, safe='/')}/fhir"


# host[:port]: a DNS name, an IPv4 address or a bracketed IPv6 address
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")


def request_id(request: Request) -> str:
    """The id the request middleware chose (the caller's X-Request-ID when valid); else chosen here alike."""
    rid: str | None = request.scope.get("state", {}).get("request_id")
    if rid is None:
        from server.ops.logs import accept_request_id

        rid = accept_request_id(request.headers.get("x-request-id"))
        request.state.request_id = rid
    return rid


def render(body: dict[str, Any] | Rendered, fmt: Format) -> bytes:
    if isinstance(body, Rendered) and not (fmt.xml or fmt.pretty):
        return body.raw
    if fmt.xml or fmt.pretty:
        body = materialized(body)
    if fmt.xml:
        from server.http.xml import to_xml  # XML only: keep models off the JSON path

        return to_xml(body, fmt.pretty)
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
