"""Browser pages and static assets: the engine's own (server/html/static: the FHIR pages' script and style, the
token script, the icon) at `/static/...`, and what plugins declare with the `register_web_pages` hook: pages at
their paths (a fixed shell the plugin renders, with the engine's security headers) and assets under
`/static/{name}/...`. Every asset is read once, at start-up."""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.declare.validators import not_modified
from server.errors import ConfigError
from server.settings import FHIR_MOUNT
from server.html.pages import root_path
from server.html.security import HTML_HEADERS, security_headers

STATIC = Path(__file__).parent / "static"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png", ".svg": "image/svg+xml",
          ".txt": "text/plain", "": "text/plain"}
_TEXT = (".js", ".css", ".svg", ".txt", "")
BaseOf = Callable[[Request], str]  # [base] of a request (server.http.responses.base_url)


@dataclass(frozen=True)
class WebPage:
    """A page at `path` ("/", "/about"...): `render(root)` returns its HTML, `root` being the path of the server
    root ('' at the host's root) its links and assets start with (`{root}/static/{name}/...`, `{root}/fhir`). It
    is served with Cache-Control: no-cache and the engine's Content-Security-Policy: scripts and styles from this
    server only, none inline."""

    path: str
    render: Callable[[str], str]


@dataclass(frozen=True)
class WebAssets:
    """The files under `directory` (.js, .css, .png, .svg, .txt), served at `/static/{name}/{relative path}`."""

    name: str
    directory: Path


def _files(directory: Path, prefix: str) -> dict[str, tuple[bytes, str, str]]:
    """Every served file under `directory` by its path under /static/: (content, media type, ETag)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.suffix in _TYPES:
            content = path.read_bytes()
            media = _TYPES[path.suffix] + ("; charset=utf-8" if path.suffix in _TEXT else "")
            found[prefix + path.relative_to(directory).as_posix()] = (
                content, media, f'"{hashlib.sha256(content).hexdigest()[:20]}"')
    return found


def _assets(declared: Sequence[tuple[str, WebAssets]]) -> dict[str, tuple[bytes, str, str]]:
    assets = _files(STATIC, "")
    names: dict[str, str] = {}
    for plugin, item in declared:
        if not item.name or "/" in item.name or item.name in names or any(p.startswith(item.name + "/")
                                                                           or p == item.name for p in assets):
            raise ConfigError(f"plugin {plugin}: the static assets {item.name!r} are empty, hold a / or are "
                              "already served")
        if not item.directory.is_dir():
            raise ConfigError(f"plugin {plugin}: the static assets {item.name!r} are no directory: {item.directory}")
        names[item.name] = plugin
        assets.update(_files(item.directory, item.name + "/"))
    return assets


def _pages(declared: Sequence[tuple[str, WebPage]]) -> dict[str, WebPage]:
    pages: dict[str, WebPage] = {}
    for plugin, page in declared:
        if not page.path.startswith("/") or page.path.startswith((FHIR_MOUNT, "/static")) or page.path in pages:
            raise ConfigError(f"plugin {plugin}: the page {page.path!r} does not start with /, is under {FHIR_MOUNT} or "
                              "/static, or is already served")
        pages[page.path] = page
    return pages


def html_routes(base_of: BaseOf, tile_url: str | None = None,
                declared: Sequence[tuple[str, WebPage | WebAssets]] = ()) -> list[Route]:
    """The routes of the static assets and of the pages the plugins declared (plugin name, declaration)."""
    assets = _assets([(p, d) for p, d in declared if isinstance(d, WebAssets)])
    page_headers = {**security_headers(tile_url), "Cache-Control": "no-cache"}

    def page_route(page: WebPage) -> Route:
        # by the base the browser used (a few, behind proxies): a request's Host header, so bounded (a page each).
        # Owned by the route; html sits below server.storage, whose Bounded it cannot import
        @lru_cache(maxsize=64)
        def shell(base: str) -> bytes:
            return page.render(root_path(base)).encode("utf-8")

        async def endpoint(request: Request) -> Response:
            return Response(shell(base_of(request)), media_type="text/html; charset=utf-8", headers=page_headers)

        return Route(page.path, endpoint, methods=["GET", "HEAD"])

    async def static(request: Request) -> Response:
        found = assets.get(request.path_params["path"])
        if found is None:
            return Response(b"not found", status_code=404, media_type="text/plain", headers=HTML_HEADERS)
        content, media, etag = found
        return _conditional(request, content, media,
                            {**HTML_HEADERS, "ETag": etag, "Cache-Control": "public, max-age=300"})

    async def favicon(request: Request) -> Response:  # asked for by browsers on every origin
        content, media, etag = assets["favicon.svg"]
        return _conditional(request, content, media,
                            {**HTML_HEADERS, "ETag": etag, "Cache-Control": "public, max-age=86400"})

    pages = _pages([(p, d) for p, d in declared if isinstance(d, WebPage)])
    return [*(page_route(page) for page in pages.values()),
            Route("/favicon.ico", favicon, methods=["GET", "HEAD"]),
            Route("/static/{path:path}", static, methods=["GET", "HEAD"])]


def _conditional(request: Request, content: bytes, media: str, headers: dict[str, str]) -> Response:
    """The file, or 304 when the browser holds it (server.declare.validators, as every answer decides it)."""
    if not_modified(request.headers, headers["ETag"]):
        return Response(status_code=304, headers=headers)
    return Response(content, media_type=media, headers=headers)
