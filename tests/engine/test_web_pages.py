"""The register_web_pages hook: a plugin's pages and static assets served beside the FHIR API, with the engine's
security headers, under the server root the request came through; clashes stop the start-up."""
from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from server import ConfigError, Settings, WebAssets, WebPage, hookimpl
from server.extensions import Extensions
from server.html import html_routes
from server.plugins import get_plugin_manager
from server.settings import parse_settings


class Acme:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @hookimpl
    def register_web_pages(self, settings: Settings) -> list[WebPage | WebAssets]:
        return [WebPage("/acme", lambda root: f'<!doctype html><script src="{root}/static/acme/a.js"></script>'),
                WebAssets("acme", self.directory)]


def _client(*declared: tuple[str, WebPage | WebAssets], base: str = "http://testserver/fhir") -> TestClient:
    return TestClient(Starlette(routes=html_routes(lambda request: base, None, declared)))


@pytest.fixture
def assets(tmp_path: Path) -> Path:
    (tmp_path / "a.js").write_text("'use strict';", encoding="utf-8")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "b.css").write_text("p{}", encoding="utf-8")
    (tmp_path / "secret.py").write_text("x = 1", encoding="utf-8")
    return tmp_path


def test_a_plugins_pages_and_assets_are_collected_and_served(assets: Path) -> None:
    settings = parse_settings({})
    found = Extensions.collect(get_plugin_manager(settings, [("acme", Acme(assets))]), settings)
    assert [(plugin, type(item).__name__) for plugin, item in found.web][-2:] == [("acme", "WebPage"),
                                                                                  ("acme", "WebAssets")]
    client = TestClient(Starlette(routes=html_routes(lambda request: "https://h.org/reg/fhir", None, found.web)))
    page = client.get("/acme")
    assert page.status_code == 200 and page.text.endswith('<script src="/reg/static/acme/a.js"></script>')
    assert "script-src 'self'" in page.headers["content-security-policy"] and page.headers["cache-control"] == "no-cache"
    assert client.get("/static/acme/a.js").headers["content-type"] == "text/javascript; charset=utf-8"
    assert client.get("/static/acme/deep/b.css").text == "p{}"
    assert client.get("/static/acme/secret.py").status_code == 404  # only the asset types are served
    assert client.get("/static/token.js").status_code == 200  # the engine's own assets stay


@pytest.mark.parametrize("declared, message", [
    pytest.param([WebPage("/fhir/x", str)], "under /fhir", id="page-under-fhir"),
    pytest.param([WebPage("/static/x", str)], "under /fhir or /static", id="page-under-static"),
    pytest.param([WebPage("x", str)], "does not start with /", id="page-relative"),
    pytest.param([WebPage("/a", str), WebPage("/a", str)], "already served", id="page-twice"),
    pytest.param([WebAssets("acme", Path("."))] * 2, "already served", id="assets-twice"),
    pytest.param([WebAssets("favicon.svg", Path("."))], "already served", id="assets-over-engine-file"),
    pytest.param([WebAssets("a/b", Path("."))], "hold a /", id="assets-name-with-slash"),
    pytest.param([WebAssets("acme", Path("/nonexistent"))], "no directory", id="assets-missing"),
])
def test_clashes_stop_the_start_up(declared: list[WebPage | WebAssets], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _client(*(("bad", item) for item in declared))
