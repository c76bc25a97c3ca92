"""Issue 36, item 6: no token in the logs. A JWT-shaped value wherever a request puts it (a query value or name, the
path, a header the access line keeps, the request id), encoded or not, and the credentials of an Authorization
value, are masked in the audit and access lines (JSON and text) and in every other log line; the values of query
parameters named like a credential stay masked. Requests go through the app; every line it writes is read. On both
backends."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote

import jwt
import pytest
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.app import create_app
from server.engine.context import ServerContext
from server.telemetry.logs import JsonFormatter, RequestIds, TextFormatter
from server.telemetry.redact import redact
from tests.support.records import recording

SHORT = jwt.encode({"exp": 1}, "a-key-of-thirty-two-bytes-at-least!!", algorithm="HS256")  # fits a request id
BASIC = "YWRtaW46czNjcmV0"  # admin:s3cret
OPAQUE = "opaque-Access-Token-7f3a9c"


@pytest.fixture(scope="module", params=["json", "text"])
def app(request: pytest.FixtureRequest, small_ctx: ServerContext) -> Iterator[tuple[TestClient, str]]:
    """The app in each log format, and the real token its requests carry (the credential that must not leak)."""
    settings = replace(small_ctx.settings, server=replace(small_ctx.settings.server, log_format=request.param))
    token = mint_token(settings)
    with TestClient(create_app(settings, context=replace(small_ctx, settings=settings)),
                    base_url="http://testserver") as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client, token


def _secrets(token: str) -> list[str]:
    """What must never be written: the token, nor the start of its payload or of its signature."""
    return [token, *(segment[:16] for segment in token.split(".")[1:])]


def _lines_of(client: TestClient, path: str, headers: dict[str, str]) -> tuple[int, list[str]]:
    with recording(client.app) as recorded:  # type: ignore[arg-type]
        status = client.get(path, headers=headers).status_code
        lines = recorded.raw()
    return status, lines


# (path and query, with {jwt} the token in some form; extra headers; what the JSON audit line shows in its place)
CASES = [
    pytest.param("/fhir/Location?bearer={jwt}", {}, {"query": "bearer=%2A%2A%2A"}, id="bearer=JWT"),
    pytest.param("/fhir/Location?code={jwt}", {}, {"query": "code=***"}, id="code=JWT"),
    pytest.param("/fhir/Location?x={jwt}", {}, {"query": "x=***"}, id="x=JWT"),
    pytest.param("/fhir/Location?name=a&x={jwt}&_count=2", {}, {"query": "name=a&x=***&_count=2"},
                 id="between-parameters"),
    pytest.param("/fhir/Location?access_token={jwt}", {}, {"query": "access_token=%2A%2A%2A"},
                 id="a-name-like-a-token"),
    pytest.param("/fhir/Location?client_assertion={jwt}", {}, {"query": "client_assertion=%2A%2A%2A"},
                 id="client-assertion"),
    pytest.param("/fhir/Location?authorization=Bearer%20" + OPAQUE, {}, {"query": "authorization=%2A%2A%2A"},
                 id="an-authorization-parameter"),
    pytest.param("/fhir/Location?{jwt}=1", {}, None, id="a-JWT-as-a-name"),
    pytest.param("/fhir/Location?_id={jwt}", {}, {"query": "_id=***"}, id="a-JWT-as-an-id"),
    pytest.param("/fhir/Location?x={dots}", {}, {"query": "x=***"}, id="its-dots-percent-encoded"),
    pytest.param("/fhir/Location?x={all}", {}, {"query": "x=***"}, id="every-byte-percent-encoded"),
    pytest.param("/fhir/Location?x={double}", {}, {"query": "x=***"}, id="double-encoded"),
    pytest.param("/fhir/Location?x=Bearer%20{jwt}", {}, {"query": "x=***"}, id="a-bearer-value"),
    pytest.param("/fhir/Location?x=Bearer+" + OPAQUE, {}, {"query": "x=Bearer+***"},
                 id="an-opaque-bearer-value"),
    pytest.param("/fhir/Location?x=prefix.{jwt}", {}, {"query": "x=***"}, id="glued-to-a-segment"),
    pytest.param("/fhir/Location?x={jwt}." + "a" * 20, {}, {"query": "x=***"}, id="with-more-segments"),
    pytest.param("/fhir/Location?x=" + "a" * 940 + "{jwt}", {}, None, id="across-the-cut-of-a-long-query"),
    pytest.param("/fhir/Location/{jwt}", {}, {"path": "/fhir/Location/***"}, id="in-the-path"),
    pytest.param("/fhir/{jwt}", {}, {"path": "/fhir/***"}, id="as-the-type"),
    pytest.param("/fhir/Location/{jwt}/_history/{jwt}", {}, {"path": "/fhir/Location/***/_history/***"},
                 id="twice"),
    pytest.param("/fhir/Location/{dots}", {}, {"path": "/fhir/Location/***"}, id="in-the-path-encoded"),
    pytest.param("/fhir/Location/30", {"User-Agent": "{jwt}"}, None, id="as-the-user-agent"),
    pytest.param("/fhir/Location/30", {"User-Agent": "curl/8 Bearer " + OPAQUE}, None,
                 id="bearer-in-the-user-agent"),
    pytest.param("/fhir/Location/30", {"User-Agent": "Basic " + BASIC}, None, id="basic-in-the-user-agent"),
    pytest.param("/fhir/Location/30", {"X-Forwarded-For": "10.0.0.7, {jwt}"}, None, id="in-x-forwarded-for"),
    pytest.param("/fhir/Location/30", {"X-Request-ID": SHORT}, None, id="as-the-request-id"),
    pytest.param("/healthz?x={jwt}", {"User-Agent": "{jwt}"}, None, id="an-ops-endpoint"),
    pytest.param("/fhir/Location?x={jwt}", {"Authorization": "Bearer {jwt}x"}, {"query": "x=***"},
                 id="an-invalid-token-401"),
]


@pytest.mark.parametrize("target, headers, shown", CASES)
def test_no_line_holds_a_token(app: tuple[TestClient, str], target: str, headers: dict[str, str],
                               shown: dict[str, str] | None) -> None:
    client, token = app
    forms = {"jwt": token, "dots": token.replace(".", "%2E"), "all": "".join(f"%{b:02X}" for b in token.encode()),
             "double": quote(token.replace(".", "%2E"), safe="")}
    path = target.format(**forms)
    status, lines = _lines_of(client, path, {k: v.format(**forms) for k, v in headers.items()})
    assert lines and status < 500
    for line in lines:
        for text in (line, unquote(line), unquote(unquote(line))):
            for leaked in [*_secrets(token), *_secrets(SHORT), OPAQUE, BASIC, "s3cret"]:
                assert leaked not in text, line
    if shown is not None and client.app.state.recorder.json:
        [audit] = [line for line in map(json.loads, lines) if line["logger"] == "orgunit_fhir.audit"]
        assert {k: audit[k] for k in shown} == shown


def test_the_audit_line_keeps_what_is_not_a_credential(client: TestClient) -> None:
    with recording(client.app) as recorded:  # type: ignore[arg-type]
        client.get("/fhir/Location?partof.partof.name=Boucle&name=Basic+health&address-city=x.y.z&_count=2",
                   headers={"User-Agent": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko)",
                            "X-Forwarded-For": "10.0.0.7", "X-Request-ID": "req.1.2"})
        [audit] = recorded.of("orgunit_fhir.audit")
        [access] = recorded.of("orgunit_fhir.access")
    assert audit["query"] == "partof.partof.name=Boucle&name=Basic+health&address-city=x.y.z&_count=2"
    assert access["user_agent"] == "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko)"
    assert access["forwarded_for"] == "10.0.0.7" and access["request_id"] == audit["request_id"] == "req.1.2"


def test_a_request_id_holding_a_token_is_not_taken() -> None:
    ids = RequestIds()
    assert ids.accept("req.1.2") == "req.1.2"
    replaced = ids.accept(SHORT)
    assert replaced != SHORT and len(replaced) == 32


@pytest.mark.parametrize("formatter", [pytest.param(JsonFormatter(), id="json"),
                                       pytest.param(TextFormatter("%(levelname)s %(name)s %(message)s"), id="text")])
def test_every_other_log_line_is_redacted(formatter: logging.Formatter) -> None:
    """A line any module writes (the 500 of a request names its path) and its traceback."""
    try:
        raise ValueError(f"bad {SHORT}")
    except ValueError as exc:
        record = logging.LogRecord("orgunit_fhir", logging.ERROR, __file__, 1, "request %s failed: Bearer %s",
                                   (f"/fhir/Location/{SHORT}", OPAQUE), (type(exc), exc, exc.__traceback__))
    line = formatter.format(record)
    assert SHORT not in line and SHORT.split(".")[2] not in line and OPAQUE not in line
    assert "request /fhir/Location/*** failed: Bearer ***" in line


@pytest.mark.parametrize("text, expected", [
    pytest.param("partof.partof.name=DS", "partof.partof.name=DS", id="a-chain"),
    pytest.param("10.0.0.7", "10.0.0.7", id="an-address"),
    pytest.param("example.com.au", "example.com.au", id="a-host-resembling-a-header"),
    pytest.param("name=Basic+health+unit", "name=Basic+health+unit", id="basic-as-a-word"),
    pytest.param("Basic " + BASIC, "Basic ***", id="basic-credentials"),
    pytest.param("DPoP " + OPAQUE, "DPoP ***", id="dpop"),
    pytest.param("bearer\t" + OPAQUE, "bearer\t***", id="a-tab"),
    pytest.param("e30.e30.", "***", id="an-unsecured-jwt"),
    pytest.param("eyJhbGciOiJIUzI1NiJ9.eyJhIjoxfQ.c2ln.aXY.dGFn", "***", id="five-segments-a-jwe"),
    pytest.param("ewogICJhbGciOiJIUzI1NiJ9.e30.c2ln", "***", id="a-header-with-white-space"),
    # white space before the header's `{` (JSON allows it, PyJWT verifies such a token: an attacker's walk)
    pytest.param("name=CnsiYWxnIjoiSFMyNTYifQ.e30.c2ln", "name=***", id="a-header-after-a-line-feed"),
    pytest.param("name=IHsiYWxnIjoiSFMyNTYifQ.e30.c2ln", "name=***", id="a-header-after-a-space"),
    pytest.param("DQp7ImFsZyI6IkhTMjU2In0.e30.c2ln", "***", id="a-header-after-cr-lf"),
    pytest.param("CXsiYWxnIjoiSFMyNTYifQ.e30.c2ln", "***", id="a-header-after-a-tab"),
    # padding before a dot: a reader deletes it and holds the token
    pytest.param("name=eyJhbGciOiJIUzI1NiJ9=.eyJhIjoxfQ.c2ln", "name=***", id="padded-before-a-dot"),
    pytest.param("name=eyJhbGciOiJIUzI1NiJ9==.eyJhIjoxfQ==.c2ln&_count=2", "name=***&_count=2",
                 id="padded-segments"),
    pytest.param("name=Cote.Ivoire.Dispensaire&x=a=b", "name=Cote.Ivoire.Dispensaire&x=a=b",
                 id="words-resembling-white-space-headers"),
    pytest.param("CSPS.Dakar.Centre", "CSPS.Dakar.Centre", id="a-dotted-name"),
])
def test_redact(text: str, expected: Any) -> None:
    assert redact(text) == expected
