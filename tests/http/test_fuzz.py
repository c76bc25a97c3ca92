"""Property-based fuzzing (hypothesis) of the HTTP surface: paths, query strings, headers and tokens.

Properties, on SQLite and PostgreSQL (the module-scoped `small_ctx`/`client` fixtures):
- no 5xx, ever (the database is up here, so not even 503);
- every non-2xx/304 answer with a body is an OperationOutcome whose issues carry severity and code (JSON,
  or XML when the request asked for XML); 401 carries WWW-Authenticate, 405 carries Allow;
- every 2xx JSON body is a FHIR resource (resourceType) without `{}`, `[]`, `""` or null anywhere, and every
  Bundle link and fullUrl is a FHIR uri (no whitespace or control characters, whatever Host or X-Forwarded-* say);
- a 2xx XML body is well-formed FHIR XML;
- no response header carries a raw CR, LF or NUL (nothing a request sends is echoed unsanitized);
- tokens: only a correctly signed token authenticates (200 or 403), and 200 only with the permission;
- injection payloads are inert: the database keeps every row (every table counted before and after each test), and
  a name search with a payload finds exactly the units whose name or alias starts with it (as the README defines
  it; normally none), or is refused with a 400 (a NUL) or 414 (too long).

About 7,000 examples per backend (FUZZ_EXAMPLES=1), 45-60 s per backend on 2 cores when nothing fails.

Requests are handed to the app as raw ASGI scopes through the TestClient's portal (in process, fast), so that
paths like `/fhir/Location/%2e%2e/x` and header values with CR/LF reach the app as an HTTP server would pass
them, instead of being normalized or refused by the client library first.

Seeds are fixed (derandomize); FUZZ_EXAMPLES=<multiplier> runs more (or fewer) examples, e.g. FUZZ_EXAMPLES=10.
FUZZ_COLLECT=<file> records every violation as a JSON line there instead of failing (triage: every bug at once,
not just the first of each kind that hypothesis shrinks).

Found bugs stay failing here until fixed in the engine; each kind of violation (what failed, the status, the
exception and the project line that raised it) is its own exception type, so hypothesis reports each separately.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree
from sqlalchemy import func, inspect, select, table
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.engine.context import ServerContext
from server.params.text import normalize
from tests.support import fuzz_strategies as fs
from tests.support.contexts import SECRET, make_settings

MULTIPLIER = float(os.environ.get("FUZZ_EXAMPLES", "1"))
COLLECT = os.environ.get("FUZZ_COLLECT")
MAX_URL = 8192  # server.max_url_length: longer request targets may be answered 414
FHIR_NS = "http://hl7.org/fhir"
PERMISSION = "service_org_units"
NOT_URI = re.compile(r"[\s\x00-\x1f\x7f]")  # FHIR uri is \S*; control characters are never part of a URL


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * MULTIPLIER)),
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                               HealthCheck.data_too_large, HealthCheck.filter_too_much,
                               HealthCheck.large_base_example],
    )


# ------------------------------------------------------------------ raw requests through the TestClient's portal

class _ServerErrors(logging.Handler):
    """Keeps the exception behind each logged 5xx (server/http.py logs it with the request id), for the reports."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.by_request: dict[str, Any] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and isinstance(record.args, tuple) and record.args:
            self.by_request[str(record.args[0])] = record.exc_info


SERVER_ERRORS = _ServerErrors()
PROJECT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="module", autouse=True)
def _capture_server_errors() -> Iterator[None]:
    logger = logging.getLogger("orgunit_fhir")
    logger.addHandler(SERVER_ERRORS)
    yield
    logger.removeHandler(SERVER_ERRORS)


def _origin(exc_info: Any) -> str:
    """`ExceptionType at file:line`, the deepest frame in the project's own code."""
    tb, where = exc_info[2], "?"
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(PROJECT) and "/.venv/" not in filename:
            where = f"{os.path.relpath(filename, PROJECT)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return f"{exc_info[0].__name__} at {where}"


@dataclass
class Answer:
    method: str
    target: bytes
    request_headers: list[tuple[bytes, bytes]]
    backend: str = ""
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    error: str | None = None  # the exception behind a 5xx (or one that escaped the app)
    origin: str | None = None  # its type and the deepest project frame that raised it
    note: Any = None  # what the test knows about the request (a token's claims)

    def header(self, name: str) -> str | None:
        key = name.lower().encode()
        return next((v.decode("latin-1") for k, v in self.headers if k.lower() == key), None)

    def reproducer(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "method": self.method,
            "target": self.target.decode("ascii", "backslashreplace"),
            "headers": {k.decode("latin-1"): v.decode("utf-8", "backslashreplace")
                        for k, v in self.request_headers if k != b"authorization"} |
                       {"authorization": _short(self.auth())},
            "status": self.status,
            "content_type": self.header("content-type"),
            "body": self.body[:600].decode("utf-8", "backslashreplace"),
            "origin": self.origin,
            "error": self.error,
            **({"note": self.note} if self.note is not None else {}),
        }

    def auth(self) -> str | None:
        return next((v.decode("latin-1") for k, v in self.request_headers if k == b"authorization"), None)


def _short(value: str | None) -> str | None:
    return value if value is None or len(value) < 120 else f"{value[:100]}...({len(value)} chars)"


def send(client: TestClient, method: str, path: bytes, query: bytes = b"",
         headers: Sequence[tuple[str, str | bytes]] = (), auth: str | None | bool = True) -> Answer:
    """One request, handed to the app as an HTTP server would (uvicorn: path percent-decoded, raw bytes kept)."""
    raw_headers: list[tuple[bytes, bytes]] = []
    names = {n.lower() for n, _ in headers}
    if "host" not in names:
        raw_headers.append((b"host", b"testserver"))
    if auth is True:
        raw_headers.append((b"authorization", client.headers["authorization"].encode()))
    elif isinstance(auth, str):
        raw_headers.append((b"authorization", fs.header_bytes(auth)))
    raw_headers += [(n.lower().encode("latin-1"), v if isinstance(v, bytes) else fs.header_bytes(v))
                    for n, v in headers]
    text_path = path.decode("ascii")
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
        "method": method, "scheme": "http", "path": unquote(text_path) if "%" in text_path else text_path,
        "raw_path": path, "root_path": "", "query_string": query, "headers": raw_headers,
        "client": ("testclient", 50000), "server": ("testserver", 80), "state": dict(client.app_state),
        "extensions": {},
    }
    answer = Answer(method, path + (b"?" + query if query else b""), raw_headers,
                    client.app.state.ctx.settings.database_url.partition(":")[0])

    async def run() -> None:
        done = anyio.Event()
        received = False

        async def receive() -> dict[str, Any]:
            nonlocal received
            if not received:
                received = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send_message(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer.status = message["status"]
                answer.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                answer.body += message.get("body", b"")
                if not message.get("more_body"):
                    done.set()

        try:
            await client.app(scope, receive, send_message)
        except Exception:  # the app let an exception out (its error middleware has sent a 500 first, if anything)
            answer.error = traceback.format_exc(limit=-6)
            answer.origin = _origin(sys.exc_info())
            answer.status = answer.status or 500
        finally:
            done.set()

    assert client.portal is not None, "the client fixture must be entered (with TestClient(...))"
    client.portal.call(run)
    logged = SERVER_ERRORS.by_request.pop(answer.header("x-request-id") or "", None)
    if logged is not None:
        answer.error = "".join(traceback.format_exception(*logged, limit=-4))[-1500:]
        answer.origin = _origin(logged)
    return answer


# ------------------------------------------------------------------ properties

class Violation(AssertionError):
    """A property does not hold. Each kind (what failed, the status, the endpoint) gets its own subclass, so that
    hypothesis reports (and shrinks) distinct bugs separately instead of stopping at the first."""


_KINDS: dict[str, type[Violation]] = {}
_FIXED_SEGMENTS = {"fhir", "metadata", "_history", "$children", "children", *fs.KNOWN_TYPES}


def _endpoint(target: bytes) -> str:
    path = unquote(target.partition(b"?")[0].decode("ascii"))
    return "/".join(p if p in _FIXED_SEGMENTS or not p else "*" for p in path.split("/"))


def fail(answer: Answer, why: str) -> None:
    record = {"why": why, **answer.reproducer()}
    if COLLECT:
        with open(COLLECT, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    kind = f"{re.split(r'[:(]', why)[0].strip()} | {answer.status} | {answer.origin or _endpoint(answer.target)}"
    cls = _KINDS.setdefault(kind, type(f"Violation[{kind}]", (Violation,), {}))
    raise cls(f"{why}\n{json.dumps(record, indent=2, ensure_ascii=False)}")


def asked_for_html(answer: Answer) -> bool:
    """A browser's request (text/html in Accept, or _format=html), or a page outside the FHIR API (the explorer at
    /, its static files): HTML (and, for static files, CSS/JS/images) is the right answer there."""
    path = answer.target.partition(b"?")[0]
    query = unquote(answer.target.partition(b"?")[2].decode("ascii", "replace")).lower()
    accept = " ".join(v.decode("latin-1") for k, v in answer.request_headers if k == b"accept").lower()
    return not path.startswith(b"/fhir") or "html" in query or "html" in accept


def asked_for_xml(answer: Answer) -> bool:
    query = unquote(answer.target.partition(b"?")[2].decode("ascii")).lower()
    accept = " ".join(v.decode("latin-1") for k, v in answer.request_headers if k == b"accept").lower()
    return "xml" in query or "xml" in accept


def empty_values(value: Any, where: str = "$") -> list[str]:
    """JSON paths of the `{}`, `[]`, `""` and null values in a parsed body."""
    if value is None:
        return [where]
    if isinstance(value, dict):
        return ([where] if not value else []) + [p for k, v in value.items() for p in empty_values(v, f"{where}.{k}")]
    if isinstance(value, list):
        return ([where] if not value else []) + [p for i, v in enumerate(value) for p in empty_values(v, f"{where}[{i}]")]
    if isinstance(value, str) and value == "":
        return [where]
    return []


def xml_root(answer: Answer) -> etree._Element | None:
    try:
        return etree.fromstring(answer.body, parser=etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError as exc:
        fail(answer, f"XML body is not well-formed: {exc}")
        return None


def check_outcome_json(answer: Answer, body: Any) -> None:
    if not isinstance(body, dict) or body.get("resourceType") != "OperationOutcome":
        fail(answer, f"a {answer.status} body is not an OperationOutcome")
        return
    issues = body.get("issue")
    if not isinstance(issues, list) or not issues or not all(
            isinstance(i, dict) and i.get("severity") and i.get("code") for i in issues):
        fail(answer, "an OperationOutcome without an issue carrying severity and code")


def check_outcome_xml(answer: Answer) -> None:
    root = xml_root(answer)
    if root is None:
        return
    if root.tag != f"{{{FHIR_NS}}}OperationOutcome":
        fail(answer, f"a {answer.status} XML body is not an OperationOutcome ({root.tag})")
        return
    issues = root.findall(f"{{{FHIR_NS}}}issue")
    if not issues or not all(i.find(f"{{{FHIR_NS}}}severity") is not None and
                             i.find(f"{{{FHIR_NS}}}code") is not None for i in issues):
        fail(answer, "an XML OperationOutcome without an issue carrying severity and code")


def check(answer: Answer) -> Any:
    """Every property of one answer; returns the parsed JSON body (2xx JSON) or None."""
    if answer.error is not None or answer.status >= 500 or answer.status < 100:
        fail(answer, f"server error {answer.status}")
        return None
    for name, value in answer.headers:
        if any(c in name + value for c in (b"\r"[0], b"\n"[0], 0)):
            fail(answer, f"response header {name!r} carries a raw CR, LF or NUL: {value[:200]!r}")
    lowered = {k.lower() for k, _ in answer.headers}
    if b"x-injected" in lowered or b"set-cookie" in lowered:
        fail(answer, "a request header injected a response header")
    ctype = (answer.header("content-type") or "").lower()
    status = answer.status
    if status == 401 and not (answer.header("www-authenticate") or "").startswith("Bearer"):
        fail(answer, "401 without WWW-Authenticate: Bearer")
    if status == 405 and not answer.header("allow"):
        fail(answer, "405 without Allow")
    if status == 414 and len(answer.target) <= MAX_URL:
        fail(answer, f"414 for a request target of {len(answer.target)} bytes")
    if status == 304:
        if answer.body:
            fail(answer, "304 with a body")
        return None
    # HEAD: the app may send GET's body (the HTTP server drops it, as the TestClient does); check it as GET's
    if not answer.body:
        if not 200 <= status < 300:
            return None  # an error without a body is allowed
        fail(answer, f"{status} without a body")
        return None
    if "json" not in ctype and "xml" not in ctype:
        if asked_for_html(answer):
            return None  # a page (tests/html checks the pages themselves: escaping, links, headers)
        fail(answer, f"content type {ctype!r} is neither FHIR JSON nor XML")
        return None
    is_xml = "xml" in ctype
    if is_xml and not asked_for_xml(answer):
        fail(answer, "an XML answer to a request that did not ask for XML")
    if not is_xml and "json" not in ctype:
        fail(answer, f"content type {ctype!r} is neither FHIR JSON nor XML")
        return None
    if is_xml:
        if 200 <= status < 300:
            root = xml_root(answer)
            if root is not None and not root.tag.startswith(f"{{{FHIR_NS}}}"):
                fail(answer, f"XML root {root.tag} is not a FHIR resource")
        else:
            check_outcome_xml(answer)
        return None
    try:
        body = orjson.loads(answer.body)
    except orjson.JSONDecodeError as exc:
        fail(answer, f"body is not JSON: {exc}")
        return None
    if 200 <= status < 300:
        if not isinstance(body, dict) or not isinstance(body.get("resourceType"), str):
            fail(answer, "a 2xx JSON body without resourceType")
            return None
        empties = empty_values(body)
        if empties:
            fail(answer, f"empty or null values at {', '.join(empties[:5])}")
        if body["resourceType"] == "Bundle":
            for entry in body.get("entry", []):
                resource = entry.get("resource") if isinstance(entry, dict) else None
                if resource is not None and "resourceType" not in resource:
                    fail(answer, "a Bundle entry's resource without resourceType")
            # link.url and fullUrl are FHIR uri values (no whitespace): the base URL comes from Host or
            # X-Forwarded-*, so whatever those carry must not make the Bundle invalid
            urls = [link.get("url") for link in body.get("link", [])] + [e.get("fullUrl") for e in body.get("entry", [])]
            bad = [u for u in urls if u is not None and (not isinstance(u, str) or NOT_URI.search(u))]
            if bad:
                fail(answer, f"a Bundle link or fullUrl is not a FHIR uri (whitespace or control characters): {bad[0]!r}")
        return body
    check_outcome_json(answer, body)
    return None


# ------------------------------------------------------------------ fixtures

def _counts(ctx: ServerContext) -> dict[str, int]:
    with ctx.db.connect() as conn:
        names = inspect(conn).get_table_names()
        return {n: conn.execute(select(func.count()).select_from(table(n))).scalar_one() for n in names}


@pytest.fixture
def intact(small_ctx: ServerContext) -> Iterator[None]:
    """Every table keeps every row through the test (and org_unit is not empty to begin with)."""
    before = _counts(small_ctx)
    assert before["org_unit"] == len(fs.UNITS)
    yield
    assert _counts(small_ctx) == before


@pytest.fixture(scope="module")
def forwarded_client(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The same database behind an app that trusts X-Forwarded-* (what a reverse proxy deployment uses)."""
    settings_ = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("fwd"),
                              auth={"secret": SECRET}, server={"trust_forwarded": True})
    app = create_app(settings_, db=small_ctx.db)
    with TestClient(app) as c:
        c.headers["Authorization"] = f"Bearer {mint_token(small_ctx.settings)}"
        yield c


# ------------------------------------------------------------------ the fuzz tests

METHODS = st.one_of(st.just("GET"), st.just("GET"), st.just("GET"), st.just("GET"), st.just("HEAD"),
                    st.sampled_from(("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "get", "FOO")))
ENDPOINTS = st.sampled_from((
    b"/fhir/Location", b"/fhir/Location", b"/fhir/Location", b"/fhir/Location/", b"/fhir/Location/20/$children",
    b"/fhir/Location/2/children", b"/fhir/Location/_history", b"/fhir/Location/30/_history",
    b"/fhir/Location/30", b"/fhir/Location/30/_history/1", b"/fhir/Organization", b"/fhir/metadata",
    b"/fhir/CodeSystem", b"/fhir/OperationDefinition", b"/fhir/StructureDefinition", b"/fhir/Location/999/$children",
))


@fuzz(1200)
@given(method=METHODS, path=fs.paths(), query=st.one_of(st.just(b""), st.just(b""), fs.query_strings().map(lambda q: q[0])),
       xml=st.sampled_from(("", "", "", "query", "accept")))
def test_paths(client: TestClient, intact: None, method: str, path: bytes, query: bytes, xml: str) -> None:
    """Random paths under /fhir: known and unknown types, ids of any characters, _history, operations; in JSON,
    and in XML (whose errors carry the path's characters too)."""
    if xml == "query":
        query = b"&".join(q for q in (query, b"_format=xml") if q)
    check(send(client, method, path, query, [("accept", "application/fhir+xml")] if xml == "accept" else []))


@fuzz(1200)
@given(path=ENDPOINTS, query=fs.query_strings(), strict=st.booleans())
def test_search_queries(client: TestClient, intact: None, path: bytes, query: tuple[bytes, Any], strict: bool) -> None:
    """Random query strings built from the real parameter names, modifiers and values."""
    headers = [("prefer", "handling=strict")] if strict else []
    answer = send(client, "GET", path, query[0], headers)
    body = check(answer)
    if body is not None and body.get("resourceType") == "Bundle" and body.get("type") == "searchset":
        matches = [e for e in body.get("entry", []) if e.get("search", {}).get("mode", "match") == "match"]
        if "total" in body and body["total"] < 0:
            fail(answer, "a negative total")
        if len(matches) > 100:
            fail(answer, f"{len(matches)} matches on one page (more than fhir.max_count)")


HEADER_ENDPOINTS = st.sampled_from((
    b"/fhir/Location/30", b"/fhir/Location/30", b"/fhir/Location/31", b"/fhir/Location/30/_history/1",
    b"/fhir/CodeSystem/org-unit-type", b"/fhir/Location", b"/fhir/Location/20/$children", b"/fhir/Location/_history",
    b"/fhir/metadata", b"/fhir/Organization", b"/fhir/Nope", b"/fhir/Location/999"))


@fuzz(900)
@given(path=HEADER_ENDPOINTS, query=st.one_of(st.just(b""), fs.query_strings(("_format", "_pretty", "_summary", "_elements",
                                                                      "_count", "name")).map(lambda q: q[0])),
       headers=fs.header_sets(), forwarded=st.integers(0, 3))
def test_headers(client: TestClient, forwarded_client: TestClient, intact: None, path: bytes, query: bytes,
                 headers: list[tuple[str, str]], forwarded: int) -> None:
    """Random Accept, Prefer, If-None-Match, If-Modified-Since, X-Request-ID, X-Forwarded-*, Host (CR/LF too)."""
    target = forwarded_client if forwarded == 0 else client
    answer = send(target, "GET" if forwarded != 1 else "HEAD", path, query, headers)
    check(answer)


@fuzz(1200)
@given(request=fs.focused_requests())
def test_parameter_values(client: TestClient, intact: None, request: tuple[bytes, bytes]) -> None:
    """One or two parameters at a time, each on an endpoint that takes it, with values made for it
    (dates at their limits, numbers out of range, malformed tokens and references...)."""
    check(send(client, "GET", *request))


RESOURCES = st.sampled_from((
    b"/fhir/Location/30", b"/fhir/Location/31", b"/fhir/Location/32", b"/fhir/Location/1", b"/fhir/Location/30/_history/1",
    b"/fhir/Organization/1", b"/fhir/CodeSystem/org-unit-type", b"/fhir/OperationDefinition/Location-children",
    b"/fhir/StructureDefinition/org-unit-validation-status", b"/fhir/StructureDefinition/closing-date",
    b"/fhir/metadata", b"/fhir/Location", b"/fhir/Location/20/$children", b"/fhir/Location/_history",
    b"/fhir/Location/30/_history", b"/fhir/Organization", b"/fhir/CodeSystem", b"/fhir/StructureDefinition"))
SUBSETS = st.one_of(
    st.tuples(st.just("_summary"), st.sampled_from(("true", "data", "false", "count", "text"))),
    st.tuples(st.just("_elements"), st.one_of(fs.element_values, st.lists(st.sampled_from((
        "id", "url", "name", "status", "type", "concept", "kind", "code", "date", "version", "title", "identifier",
        "active", "partOf", "fhirVersion", "format", "rest", "entry", "total", "link")), min_size=1, max_size=3).map(
        ",".join))),
)


@fuzz(300)
@given(path=RESOURCES, subsets=st.lists(SUBSETS, max_size=2),
       fmt=st.sampled_from(("xml", "xml", "json", "", "application/fhir+xml", "text/xml")),
       pretty=st.sampled_from(("", "true", "false")), by_accept=st.booleans())
def test_rendering(client: TestClient, intact: None, path: bytes, subsets: list[tuple[str, str]], fmt: str,
                   pretty: str, by_accept: bool) -> None:
    """Every resource the server has (Location, Organization, canonical, CapabilityStatement, Bundles), in JSON
    and XML, pretty or not, whole or cut down by _summary/_elements: a valid body or an OperationOutcome."""
    pairs = list(subsets) + ([("_pretty", pretty)] if pretty else [])
    headers = []
    if fmt and by_accept:
        headers.append(("accept", fmt if "/" in fmt else f"application/fhir+{fmt}"))
    elif fmt:
        pairs.append(("_format", fmt))
    check(send(client, "GET", path, "&".join(f"{k}={quote(v, safe=',')}" for k, v in pairs).encode(), headers))


TOKEN_MISSING = (b"/fhir/Nope", b"/fhir/Location/nope")  # 404 once authenticated


def _token_parts(authorization: str | None) -> Any:
    """The decoded (unverified) header and claims of a token, for the failure report."""
    try:
        parts = (authorization or "").partition(" ")[2].strip().split(".")
        return [json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
                for p in parts[:2]] if len(parts) == 3 else None
    except (ValueError, RecursionError):
        return None


def _expected_permission(claims: Any) -> bool:
    """Whether decoded claims hold the permission (README: `permissions` array or space-separated string, or scope)."""
    if not isinstance(claims, dict):
        return False
    found: set[str] = set()
    for source in (claims.get("permissions"), claims.get("scope")):
        if isinstance(source, str):
            found.update(source.split())
        elif isinstance(source, list):
            found.update(item for item in source if isinstance(item, str))
    return PERMISSION in found


@fuzz(1000)
@given(path=st.sampled_from((b"/fhir/Location/30", b"/fhir/metadata", b"/fhir/Location", b"/fhir/Location/20/$children",
                             *TOKEN_MISSING)),
       data=st.data())
def test_tokens(client: TestClient, intact: None, path: bytes, data: st.DataObject) -> None:
    """Garbage, truncated and damaged tokens; JWTs with random headers and claims signed with the right secret."""
    authorization, claims, may_pass = data.draw(fs.tokens(SECRET, client.headers["authorization"].removeprefix("Bearer ")))
    answer = send(client, "GET", path, b"name=a" if path == b"/fhir/Location" else b"", auth=authorization)
    answer.note = _token_parts(authorization)
    check(answer)
    if answer.status not in ((200, 401, 403, 404) if path in TOKEN_MISSING else (200, 401, 403)):
        fail(answer, f"a token gave {answer.status}")
    if answer.status in (200, 403) and not may_pass:
        fail(answer, f"an unsigned or malformed token gave {answer.status}")
    if answer.status == 200 and claims is not None and not _expected_permission(claims):
        fail(answer, f"200 for a token without the permission: claims {str(claims)[:300]}")


def _expected_names(value: str, mode: str) -> set[str]:
    """The ids a name search must find, straight from the README's definition and the test data."""
    parts = [p.replace("\\,", ",") for p in re.split(r"(?<!\\),", value)] if mode != "missing" else [value]
    found = set()
    for uid, names in fs.UNIT_NAMES.items():
        for part in parts:
            if mode == "exact" and part in names:
                found.add(str(uid))
            elif mode == "contains" and any(normalize(part) in normalize(n) for n in names):
                found.add(str(uid))
            elif mode == "" and any(normalize(n).startswith(normalize(part)) for n in names):
                found.add(str(uid))
    return found


payloads = st.one_of(
    st.sampled_from(fs.INJECTIONS),
    st.tuples(st.sampled_from(("", "ds", "Aire de ", "CMA Boromo 50", "segou", "HB", "dispensaire k")),
              st.sampled_from(fs.INJECTIONS)).map("".join),
    st.text(max_size=12),
    st.text(st.sampled_from("%_\\'\";-,|*?[]()&=+ \x00\r\nabdsSéÉ"), max_size=12),
)


@fuzz(800)
@given(payload=payloads, mode=st.sampled_from(("", "", "", "exact", "contains")),
       how=st.sampled_from(("strict", "plus", "loose")))
def test_injection_is_inert(client: TestClient, intact: None, payload: str, mode: str, how: str) -> None:
    """A name search with an injection payload finds exactly the units whose name or alias starts with it."""
    key = f"name:{mode}" if mode else "name"
    query = f"{key}={fs.encode(payload, how)}&_count=100&_elements=id".encode("ascii")
    answer = send(client, "GET", b"/fhir/Location", query)
    body = check(answer)
    if answer.status == 414:
        return
    received = payload.replace("+", " ") if how == "loose" else payload  # "loose" leaves '+' raw: a space
    values = [v.replace("\\,", ",") for v in re.split(r"(?<!\\),", received)]
    blank = received and any(not v.strip() or (mode != "exact" and not normalize(v)) for v in values)
    if answer.status == 400 and ("\x00" in payload or len(values) > 100 or blank):
        return  # refusing a NUL, more than 100 OR-ed values, or a blank one (it would match all) is fine
    if body is None:
        fail(answer, f"a name search answered {answer.status}")
        return
    found = {e["resource"]["id"] for e in body.get("entry", [])}
    expected = _expected_names(received, mode) if received else {str(u) for u in fs.UNIT_NAMES}
    if found != expected or body.get("total") != len(expected):
        fail(answer, f"{key}={received!r} found {sorted(found)} (total {body.get('total')}), expected {sorted(expected)}")


@fuzz(400)
@given(param=st.sampled_from(("identifier", "type", "_id", "partof", "status", "name:exact", "name:contains",
                              "identifier:text", "type:text", "identifier:not", "_lastUpdated", "near", "_sort",
                              "_include", "_elements", "organization", "_after", "url")),
       payload=st.sampled_from(fs.INJECTIONS), path=st.sampled_from((b"/fhir/Location", b"/fhir/Location/20/$children",
                                                                     b"/fhir/Location/_history", b"/fhir/Organization",
                                                                     b"/fhir/CodeSystem")))
def test_injection_in_every_parameter(client: TestClient, intact: None, param: str, payload: str, path: bytes) -> None:
    """Every parameter takes every payload without a 5xx, and a search never finds more than there is."""
    answer = send(client, "GET", path, f"{quote(param)}={quote(payload, safe='')}".encode("ascii"))
    body = check(answer)
    if body is not None and body.get("resourceType") == "Bundle" and body.get("total", 0) > len(fs.UNITS) * 3:
        fail(answer, f"total {body['total']} is more than the database holds")


@pytest.mark.parametrize("since", [
    "Fri, 31 Dec 9999 23:59:59 -2359",  # UTC would be in year 10000: OverflowError in astimezone (was a 500)
    "Fri, 31 Dec 9999 22:59:59 -2358",
    "Tue, 04 Mar 2025 10:20:30 +9999",  # an offset of more than a day
    "not a date",
])
def test_if_modified_since_out_of_range_is_ignored(client: TestClient, since: str) -> None:
    """RFC 9110: an If-Modified-Since that is not a valid date is ignored (found by test_headers)."""
    answer = send(client, "GET", b"/fhir/Location/30", headers=[("if-modified-since", since)])
    assert answer.status == 200, answer.reproducer()
    assert check(answer)["id"] == "30"
