"""FHIR responses as HTML (escaped, linked, with the token form on a 401), the explorer shell under a path
prefix, the security headers and the static files, without a browser."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.engine.context import ServerContext
from server.html.narrative import sanitize
from server.html.pages import html_page, root_path
from tests.support.contexts import bearer, make_settings

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def auth(small_ctx: ServerContext) -> dict[str, str]:
    return bearer(small_ctx.settings)


@pytest.fixture(scope="module")
def prefixed(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The same data behind server.base_url with a path: a proxy strips /registry before the app."""
    settings = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("prefix"),
                             server={"base_url": "https://registry.example.org/registry/fhir",
                                     "explorer_tile_url": "https://{s}.tiles.example.org/{z}/{x}/{y}.png"},
                             auth={"secret": small_ctx.settings.auth.secret})
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.mark.parametrize("path, accept, media", [
    pytest.param("/fhir/Location/30", BROWSER, "text/html", id="browser-read"),
    pytest.param("/fhir/Location?name=s", BROWSER, "text/html", id="browser-search"),
    pytest.param("/fhir/Location/30?_format=html", "application/fhir+json", "text/html", id="format-html"),
    pytest.param("/fhir/Location/30", "application/fhir+json", "application/fhir+json", id="fhir-client"),
    pytest.param("/fhir/Location/30", "application/json, text/html;q=0.9", "application/json", id="json-first"),
    pytest.param("/fhir/Location/30", "*/*", "application/fhir+json", id="any"),
    pytest.param("/fhir/Location/30?_format=json", BROWSER, "application/fhir+json", id="format-json-in-browser"),
])
def test_browsers_get_html_clients_json(client: TestClient, auth: dict[str, str], path: str, accept: str,
                                        media: str) -> None:
    response = client.get(path, headers={**auth, "Accept": accept})
    assert response.status_code == 200
    assert response.headers["content-type"] == f"{media};charset=utf-8"


@pytest.mark.parametrize("path, method, accept, status, media", [
    pytest.param("/fhir", "GET", BROWSER, 404, "text/html", id="the-base-in-a-browser"),
    pytest.param("/fhir/", "GET", BROWSER, 404, "text/html", id="the-base-with-a-slash"),
    pytest.param("/fhir?_format=html", "GET", "application/fhir+json", 404, "text/html", id="the-base-format-html"),
    pytest.param("/fhir/metadata/Nope", "GET", BROWSER, 404, "text/html", id="no-such-type-metadata"),
    pytest.param("/fhir/Location/30", "DELETE", BROWSER, 405, "text/html", id="a-write-in-a-browser"),
    pytest.param("/fhir", "GET", "application/fhir+json", 404, "application/fhir+json", id="the-base-to-a-client"),
    pytest.param("/fhir?_format=nope", "GET", BROWSER, 404, "application/fhir+json", id="a-format-not-served"),
])
def test_errors_before_any_interaction_are_pages_in_a_browser(client: TestClient, auth: dict[str, str], path: str,
                                                             method: str, accept: str, status: int, media: str) -> None:
    """README: any FHIR URL opened in a browser answers as a page, its errors too; the base and the routes no
    interaction serves answered JSON (found by a walk)."""
    response = client.request(method, path, headers={**auth, "Accept": accept})
    assert response.status_code == status
    assert response.headers["content-type"] == f"{media};charset=utf-8"


def test_html_page_links_and_headers(client: TestClient, auth: dict[str, str]) -> None:
    response = client.get("/fhir/Location?name=s&_count=1", headers={**auth, "Accept": BROWSER})
    page = response.text
    assert '<a class="s" href="http://testserver/fhir/Location/' in page  # fullUrl
    assert 'href="http://testserver/fhir/Organization/1"' in page  # a relative reference, resolved
    assert '<nav class="paging" aria-label="Pages"><a href="http://testserver/fhir/Location?name=s' in page  # paging
    assert "<script>" not in page and " style=" not in page and "onerror" not in page
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"


def test_401_is_a_page_with_the_token_form(small_ctx: ServerContext) -> None:
    with TestClient(create_app(small_ctx.settings, context=small_ctx)) as anonymous:
        response = anonymous.get("/fhir/Location/30", headers={"Accept": BROWSER})
    assert response.status_code == 401 and response.headers["content-type"] == "text/html;charset=utf-8"
    assert '<form id="token-form"' in response.text and 'data-status="401"' in response.text
    assert '<textarea id="token-input"' in response.text and "name=" not in response.text.split("<form")[1][:600]
    assert "<td>login</td>" in response.text  # the OperationOutcome, readable


@pytest.mark.parametrize("body, present, absent", [
    pytest.param({"resourceType": "Location", "id": "1", "name": XSS}, ["&lt;img src=x onerror=alert(1)&gt;"],
                 [XSS], id="value-escaped"),
    pytest.param({"resourceType": "Location", "id": "1", "partOf": {"reference": 'Location/1"><script>'}},
                 ["&lt;script&gt;"], ["<script>", 'href="https://x.org/fhir/Location/1"'], id="bad-reference-not-linked"),
    pytest.param({"resourceType": "Location", "id": "1", "partOf": {"reference": "javascript:alert(1)"}},
                 [], ['href="javascript'], id="javascript-url-not-linked"),
    pytest.param({"resourceType": "Location", "id": "1", XSS: 1}, ["&lt;img"], [XSS], id="key-escaped"),
    pytest.param({"resourceType": "Location", "id": "1",
                  "text": {"status": "generated", "div": f'<div xmlns="http://www.w3.org/1999/xhtml"><b>Hi</b>{XSS}'
                                                         '<script>alert(1)</script><a href="javascript:x">l</a></div>'}},
                 ['<section class="narrative"><h2>Narrative</h2><div><b>Hi</b>l</div></section>'],
                 ["<script>", "<img", "javascript:x\""], id="narrative-sanitized"),
])
def test_html_page_escapes_every_value(body: dict, present: list[str], absent: list[str]) -> None:
    page = html_page(body, 200, "https://x.org/fhir").decode()
    main = page.split('<main id="fhir">')[1]
    for text in present:
        assert text in main
    for text in absent:
        assert text not in main


@pytest.mark.parametrize("xhtml, safe", [
    pytest.param("<div><p>a &amp; b</p></div>", "<div><p>a &amp; b</p></div>", id="kept"),
    pytest.param('<div onclick="x()"><span style="color:red">t</span></div>', "<div><span>t</span></div>",
                 id="attributes-dropped"),
    pytest.param("<div><style>*{}</style><iframe src=x></iframe>t</div>", "<div>t</div>", id="dropped-with-content"),
    pytest.param("<div><b>unclosed", "<div><b>unclosed</b></div>", id="closed"),
])
def test_narrative_sanitizer(xhtml: str, safe: str) -> None:
    assert sanitize(xhtml) == safe


@pytest.mark.parametrize("base, root", [
    pytest.param("http://testserver/fhir", "", id="host-root"),
    pytest.param("https://registry.example.org/registry/fhir", "/registry", id="prefix"),
    pytest.param("https://a.org/x/y/fhir/", "/x/y", id="trailing-slash"),
])
def test_root_path(base: str, root: str) -> None:
    assert root_path(base) == root


def test_explorer_shell(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"] == "text/html; charset=utf-8"
    assert 'data-api="/fhir"' in response.text and '<script src="/static/orgunits/explorer.js" defer>' in response.text
    assert "<script>" not in response.text and " style=" not in response.text and "data-tiles" not in response.text
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


def test_explorer_under_a_path_prefix(prefixed: TestClient, auth: dict[str, str]) -> None:
    page = prefixed.get("/").text
    assert 'data-api="/registry/fhir"' in page and 'src="/registry/static/orgunits/leaflet/leaflet.js"' in page
    assert 'data-tiles="https://{s}.tiles.example.org/{z}/{x}/{y}.png"' in page
    assert "img-src 'self' data: https://*.tiles.example.org;" in prefixed.get("/").headers["content-security-policy"]
    fhir_page = prefixed.get("/fhir/Location/30", headers={**auth, "Accept": BROWSER}).text
    assert 'href="/registry/static/fhir.css"' in fhir_page and 'data-api="/registry/fhir"' in fhir_page
    assert 'href="https://registry.example.org/registry/fhir/Organization/1"' in fhir_page


@pytest.mark.parametrize("path, status, media", [
    pytest.param("/static/page.js", 200, "text/javascript; charset=utf-8", id="engine-script"),
    pytest.param("/static/favicon.svg", 200, "image/svg+xml; charset=utf-8", id="icon"),
    pytest.param("/favicon.ico", 200, "image/svg+xml; charset=utf-8", id="favicon-ico"),
    pytest.param("/static/orgunits/explorer.js", 200, "text/javascript; charset=utf-8", id="plugin-script"),
    pytest.param("/static/orgunits/leaflet/leaflet.css", 200, "text/css; charset=utf-8", id="vendored-css"),
    pytest.param("/static/orgunits/leaflet/LICENSE", 200, "text/plain; charset=utf-8", id="license"),
    pytest.param("/static/explorer.js", 404, "text/plain; charset=utf-8", id="plugin-asset-outside-its-folder"),
    pytest.param("/static/../app.py", 404, None, id="traversal"),
    pytest.param("/static/%2e%2e/settings.py", 404, "text/plain; charset=utf-8", id="encoded-traversal"),
    pytest.param("/static/nope.js", 404, "text/plain; charset=utf-8", id="missing"),
])
def test_static_files(client: TestClient, path: str, status: int, media: str | None) -> None:
    response = client.get(path)
    assert response.status_code == status
    if media is not None:  # None: the path left /static (a FHIR 404)
        assert response.headers["content-type"] == media and response.headers["x-content-type-options"] == "nosniff"


def test_static_files_are_vendored() -> None:
    static = Path(__file__).resolve().parents[2] / "plugins" / "orgunits" / "static"
    assert (static / "leaflet" / "leaflet.js").read_text().startswith("/* @preserve\n * Leaflet 1.9.4")


def test_an_html_page_is_not_revalidated_into_the_json_of_the_same_version(client: TestClient,
                                                                            auth: dict[str, str]) -> None:
    json_tag = client.get("/fhir/Location/30", headers={**auth, "Accept": "application/fhir+json"}).headers["etag"]
    page = client.get("/fhir/Location/30", headers={**auth, "Accept": BROWSER})
    assert json_tag.startswith('W/"') and page.headers["etag"] != json_tag
    assert client.get("/fhir/Location/30", headers={**auth, "Accept": BROWSER,
                                                    "If-None-Match": json_tag}).status_code == 200
    assert client.get("/fhir/Location/30", headers={**auth, "Accept": BROWSER,
                                                    "If-None-Match": page.headers["etag"]}).status_code == 304


def test_a_searchs_warning_is_on_top_of_its_page(client: TestClient, auth: dict[str, str]) -> None:
    """An ignored parameter (another server's result control, `_totalMethod`): the warning under the status line, before the JSON."""
    page = client.get("/fhir/Location?_totalMethod=count", headers={**auth, "Accept": BROWSER}).text
    status = page.index('<p class="status ok warned">HTTP 200 OK · 1 warning</p>')
    warning = page.index('<tr class="warning"><td>warning</td><td>not-supported</td><td>unknown search parameter _totalMethod')
    assert status < warning < page.index('<table class="entries">') < page.index('<pre class="json"')


@pytest.mark.parametrize(("url", "title"), [
    pytest.param("/fhir/Location?_id=30", "Bundle (searchset, 1 match)", id="one"),
    pytest.param("/fhir/Location?_totalMethod=count&_count=2", "Bundle (searchset, 9 matches)", id="a-warning-is-no-match"),
    pytest.param("/fhir/Location?_count=2&_total=none", "Bundle (searchset, 2 matches on this page; total not counted)",
                 id="not-counted"),
    pytest.param("/fhir/Location?_id=30&_include=Location:partof&_total=none", "Bundle (searchset, 1 match on this page)",
                 id="includes-are-no-matches"),
])
def test_a_bundles_title_says_its_total_or_that_it_is_not_counted(client: TestClient, auth: dict[str, str], url: str,
                                                                  title: str) -> None:
    page = client.get(url, headers={**auth, "Accept": BROWSER}).text
    assert f"<title>{title}</title>" in page and f"<h1>{title}</h1>" in page


def test_the_json_of_a_page_scrolls_from_the_keyboard(client: TestClient, auth: dict[str, str]) -> None:
    """A scrollable region is focusable (axe: scrollable-region-focusable), the 401 page's too."""
    for headers in ({**auth, "Accept": BROWSER}, {"Accept": BROWSER}):
        page = client.get("/fhir/Location/30", headers=headers).text
        assert '<pre class="json" tabindex="0" role="region" aria-label="The answer as JSON">' in page


def test_a_bundles_entries_are_a_table(client: TestClient, auth: dict[str, str]) -> None:
    page = client.get("/fhir/Location?_id=30&_include=Location:partof", headers={**auth, "Accept": BROWSER}).text
    table = page[page.index('<table class="entries">'):page.index("</table>", page.index('<table class="entries">'))]
    assert table.count("<tr><td>") == 2
    assert '<td>1</td><td><a href="http://testserver/fhir/Location/30">Location/30</a></td>' in table
    assert "<td>match</td>" in table and "<td>include</td>" in table


def test_the_servers_own_canonical_urls_link_to_its_copies(client: TestClient, auth: dict[str, str]) -> None:
    """Extensions and code systems of the server's namespace open here; others' (HL7) stay as they are."""
    page = client.get("/fhir/Location/30", headers={**auth, "Accept": BROWSER}).text
    assert 'href="http://testserver/fhir/StructureDefinition/org-unit-validation-status"' in page
    assert 'href="https://orgunit-fhir.example.org/fhir/StructureDefinition/' not in page
    page = client.get("/fhir/CodeSystem/org-unit-type", headers={**auth, "Accept": BROWSER}).text
    assert 'href="http://testserver/fhir/CodeSystem/org-unit-type"' in page
    assert 'href="http://testserver/fhir/sid/' not in page  # an identifier system names no resource
