"""Rendering an answer: the base URL links are made of, FHIR JSON or XML bytes, and the one error renderer (every
failure becomes an OperationOutcome here)."""
from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any
from urllib.parse import quote

import anyio
import anyio.to_thread
from starlette.datastructures import Headers
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from server.access.tokens import REALM
from server.declare.answer import Answer, FileBody
from server.engine.context import ServerContext
from server.declare.interaction import Interaction
from server.declare.rendered import Rendered, json_bytes, materialized
from server.errors import FhirError, Forbidden, InternalError, StorageError
from server.html import HTML_HEADERS, html_page
from server.http.negotiation import FHIR_JSON, Format
from server.http.xml import to_xml
from server.plugins import blame
from server.settings import FHIR_MOUNT, Settings

log = logging.getLogger("orgunit_fhir")
HTML_RAW = tuple((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in HTML_HEADERS.items())
ERROR_FORMAT = Format(FHIR_JSON)

# host[:port]: a DNS name, an IPv4 address or a bracketed IPv6 address
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")


def base_url(scope: Scope, headers: Any, settings: Settings) -> str:
    """[base] of the links: server.base_url when set, else the address the request was sent to (the
    X-Forwarded-* headers when server.trust_forwarded)."""
    configured = settings.server.base_url
    if configured:
        return configured.rstrip("/")
    scheme, host = scope.get("scheme", "http"), headers.get("host", "")
    if not _HOST.fullmatch(host):  # a malformed Host never makes a link: the address we were reached at
        server = scope.get("server") or ("localhost", None)
        host = f"{server[0]}:{server[1]}" if server[1] else str(server[0])
    if settings.server.trust_forwarded:
        forwarded_scheme = headers.get("x-forwarded-proto", scheme).split(",")[0].strip().lower()
        forwarded_host = headers.get("x-forwarded-host", host).split(",")[0].strip()
        scheme = forwarded_scheme if forwarded_scheme in ("http", "https") else scheme
        host = forwarded_host if _HOST.fullmatch(forwarded_host) else host
    prefix = scope.get("root_path", "").rstrip("/")
    return f"{scheme}://{host}{quote(prefix, safe='/')}{FHIR_MOUNT}"


def render(body: dict[str, Any] | Rendered, fmt: Format, base: str = "", status: int = 200,
           namespace: str = "") -> bytes:
    if fmt.html:  # a browser: the same answer as a page (the links resolved against [base] and the namespace)
        return html_page(materialized(body), status, base, namespace)
    if isinstance(body, Rendered) and not (fmt.xml or fmt.pretty):
        return body.raw
    if fmt.xml or fmt.pretty:
        body = materialized(body)
    if fmt.xml:
        return to_xml(body, fmt.pretty)
    return json_bytes(body, fmt.pretty)


class FinalResponse(Response):
    """An answer whose bytes and headers are final, ready to be sent: Starlette's Response without its building
    (no header parsing, no rendering); the headers as the ASGI message carries them."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code = status
        self.body = body
        self.raw_headers = headers
        self.background = None


def encoded_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def fhir_response(body: dict[str, Any] | bytes, fmt: Format, status: int = 200,
                  headers: Mapping[str, str] | None = None) -> FinalResponse:
    content = body if isinstance(body, bytes) else render(body, fmt, status=status)
    raw = [(b"content-length", str(len(content)).encode("latin-1")),
           (b"content-type", fmt.content_type.encode("latin-1"))]
    if headers:
        raw += encoded_headers(headers)
    if fmt.html:
        raw += HTML_RAW  # a browser's page: its security headers
    return FinalResponse(status, raw, content)


def error_response(ctx: ServerContext, exc: BaseException, interaction: Interaction | None, fmt: Format,
                   request_id: str, scope: Scope) -> FinalResponse:
    """The OperationOutcome of a failure: a FhirError as it is, anything else as the `translate_exception` hook
    says (else 500); a 5xx is logged with its request id, which its diagnostics name."""
    if isinstance(exc, FhirError):
        error = exc
    else:
        error = ctx.pm.hook.translate_exception(exception=exc, interaction=interaction) or InternalError(
            "internal server error")
    if error.status >= 500 and isinstance(exc, StorageError) and not isinstance(error, InternalError):
        # a statement timed out, a database out of reach: expected, and the traceback tells nothing
        log.warning("request %s %s %s answered %d %s: %s", request_id, scope["method"], scope["path"], error.status,
                    error.code, f"{exc.__class__.__name__}: {exc}".splitlines()[0])
    elif error.status >= 500:
        culprit = None if isinstance(exc, FhirError) else blame(exc)  # a plugin's code: named, with its frame
        log.error("request %s %s %s failed: %s", request_id, scope["method"], scope["path"],
                  culprit.describe(exc) if culprit is not None else exc.__class__.__name__,
                  exc_info=exc if not isinstance(exc, FhirError) else None)
    if error.status >= 500:
        error.diagnostics = f"{error.diagnostics} (request id {request_id})"
    headers = {**error.headers, **challenge(error)}
    if fmt.html:
        page = html_page(error.outcome(), error.status, base_url(scope, Headers(scope=scope), ctx.settings),
                         ctx.settings.fhir.extension_namespace)
        return fhir_response(page, fmt, error.status, headers)
    return fhir_response(error.outcome(), fmt, error.status, headers)


def challenge(error: FhirError) -> dict[str, str]:
    """A scope error's WWW-Authenticate (RFC 6750 section 3.1): `insufficient_scope` and the scope the token lacks,
    which a client asks its authorization server for; nothing for another error (a 401's is its own)."""
    if isinstance(error, Forbidden) and error.scope:
        return {"WWW-Authenticate": f'{REALM}, error="insufficient_scope", scope="{error.scope}"'}
    return {}


class RangedFile(FileResponse):
    """A file, with the `Range` its Answer decided (None: the whole file, whatever was asked)."""

    chunk_size = 1 << 20  # 1 MiB reads: a large file streams in few thread hops

    def __init__(self, body: FileBody, headers: dict[str, str]) -> None:
        super().__init__(body.path, media_type=body.media_type, headers=headers)
        self.served_range = body.served_range

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k, v) for k, v in scope["headers"] if k != b"range"]
        if self.served_range is not None:
            headers.append((b"range", self.served_range.encode("latin-1")))
        await super().__call__({**scope, "headers": headers}, receive, send)


def _close(stream: Iterator[bytes]) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()


async def _chunks(stream: Iterator[bytes]) -> AsyncIterator[bytes]:
    """The stream's chunks, each made in a worker thread (it reads the database); closed however it ends."""
    try:
        while (chunk := await anyio.to_thread.run_sync(next, stream, None)) is not None:
            yield chunk
    except Exception:
        log.exception("a streamed answer failed after its first bytes were sent: the body is cut short")
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_close, stream)


class Streamed(StreamingResponse):
    """An Answer's stream (server.declare.answer.Answer.stream): chunked, read as it is sent; HEAD reads none of it
    (the stream is closed unread)."""

    def __init__(self, stream: Iterator[bytes], status: int, headers: dict[str, str]) -> None:
        self.stream = stream
        super().__init__(_chunks(stream), status, headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") == "HEAD":
            await anyio.to_thread.run_sync(_close, self.stream)
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await super().__call__(scope, receive, send)


def answer_response(answer: Answer) -> Response:
    """A plain Answer as it is: its JSON, its file (a part of it), its stream or no body, with its status and
    headers."""
    headers = dict(answer.headers)
    if answer.file is not None:
        return RangedFile(answer.file, headers)
    if answer.stream is not None:
        return Streamed(answer.stream, answer.status, headers)
    if answer.json is not None:
        return JSONResponse(dict(answer.json), status_code=answer.status, headers=headers)
    return Response(status_code=answer.status, headers=headers)
