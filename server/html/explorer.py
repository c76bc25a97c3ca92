"""The explorer at the server root (`/`) and its static assets (`/static/...`, read once from server/html/static).

The page is a fixed shell: no data is rendered into it, only the API base path and the optional tile URL as data
attributes; static/explorer.js builds everything else from the FHIR API (with the token the user pasted)."""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import lru_cache
from html import escape
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.html.pages import root_path
from server.html.security import HTML_HEADERS, security_headers

STATIC = Path(__file__).parent / "static"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png", ".svg": "image/svg+xml",
          ".txt": "text/plain", "": "text/plain"}
BaseOf = Callable[[Request], str]  # [base] of a request (server.http.responses.base_url)


def _assets() -> dict[str, tuple[bytes, str, str]]:
    """Every file under static/ by its relative path: (content, media type, ETag)."""
    found = {}
    for path in sorted(STATIC.rglob("*")):
        if path.is_file() and path.suffix in _TYPES:
            content = path.read_bytes()
            media = _TYPES[path.suffix] + ("; charset=utf-8" if path.suffix in (".js", ".css", ".txt", "") else "")
            found[path.relative_to(STATIC).as_posix()] = (content, media, f'"{hashlib.sha256(content).hexdigest()[:20]}"')
    return found


@lru_cache(maxsize=64)  # by the base the browser used (a few, behind proxies)
def explorer_shell(base: str, tile_url: str | None) -> bytes:
    root = escape(root_path(base))
    tiles = f' data-tiles="{escape(tile_url)}"' if tile_url else ""
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>orgunit-fhir explorer</title>
<link rel="stylesheet" href="{root}/static/leaflet/leaflet.css">
<link rel="stylesheet" href="{root}/static/fhir.css">
<link rel="stylesheet" href="{root}/static/explorer.css">
<script src="{root}/static/leaflet/leaflet.js" defer></script>
<script src="{root}/static/token.js" defer></script>
<script src="{root}/static/explorer.js" defer></script>
</head><body class="explorer" data-api="{root}/fhir"{tiles}>
<header class="bar"><a class="brand" href="{root}/">orgunit-fhir explorer</a>
<a href="{root}/fhir/metadata">CapabilityStatement</a><span id="token-state"></span></header>
<section id="login" class="token-form" hidden>
<form id="token-form" autocomplete="off"><label for="token-input">Paste a bearer token to explore the registry. It stays
in this tab (sessionStorage) and is sent as <code>Authorization: Bearer</code> to the FHIR API only; never in a URL or
a cookie.</label><textarea id="token-input" rows="4" spellcheck="false"></textarea>
<button type="submit">Use token</button><p id="token-error" class="error" hidden></p></form></section>
<div id="app" hidden>
<aside id="side">
<div class="finder"><label for="search">Find a unit by name</label>
<input id="search" type="search" autocomplete="off" spellcheck="false" placeholder="Name (accents and case ignored)"
 role="combobox" aria-autocomplete="list" aria-expanded="false" aria-controls="results">
<div class="filters"><label>Type <select id="type-filter"><option value="">any</option></select></label>
<label>Status <select id="status-filter"><option value="">any</option><option>active</option>
<option>suspended</option><option>inactive</option></select></label></div>
<ul id="results" role="listbox" aria-label="Matching units"></ul><p id="results-note" class="note"></p></div>
<h2 id="tree-label">Pyramid</h2>
<ul id="tree" role="tree" aria-labelledby="tree-label"></ul>
</aside>
<main id="detail" aria-live="polite"><p class="note">Select a unit in the tree or find it by name.</p></main>
<section id="map-pane" aria-label="Map"><div id="map"></div><p id="map-note" class="note"></p></section>
</div>
</body></html>
""".encode()


def html_routes(base_of: BaseOf, tile_url: str | None = None) -> list[Route]:
    assets = _assets()
    page_headers = {**security_headers(tile_url), "Cache-Control": "no-cache"}

    async def explorer(request: Request) -> Response:
        return Response(explorer_shell(base_of(request), tile_url), media_type="text/html; charset=utf-8",
                        headers=page_headers)

    async def static(request: Request) -> Response:
        found = assets.get(request.path_params["path"])
        if found is None:
            return Response(b"not found", status_code=404, media_type="text/plain", headers=HTML_HEADERS)
        content, media, etag = found
        headers = {**HTML_HEADERS, "ETag": etag, "Cache-Control": "public, max-age=300"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return Response(content, media_type=media, headers=headers)

    return [Route("/", explorer, methods=["GET", "HEAD"]),
            Route("/static/{path:path}", static, methods=["GET", "HEAD"])]
