"""The explorer at the server root (`/`): the org-unit pyramid as a tree (`partof`, `$children`), find by name or
code, a detail pane and a map, served through the engine's `register_web_pages` hook with its assets (static/:
common.js, cluster.js, map.js, tree.js, finder.js, detail.js, explorer.js, explorer.css, Leaflet) under
/static/orgunits/.

The page is a fixed shell: no data is rendered into it, only the API base path and the optional tile URL as data
attributes; static/explorer.js builds everything else from the FHIR API (with the token the user pasted)."""
from __future__ import annotations

from html import escape
from pathlib import Path

from server import Settings, WebAssets, WebPage

ASSETS = WebAssets("orgunits", Path(__file__).parent / "static")


def explorer_shell(root: str, tile_url: str | None) -> str:
    root = escape(root)
    mine = f"{root}/static/orgunits"
    tiles = f' data-tiles="{escape(tile_url)}"' if tile_url else ""
    scripts = "".join(f'<script src="{mine}/{name}.js" defer></script>\n'
                      for name in ("common", "cluster", "map", "tree", "finder", "detail", "explorer"))
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>orgunit-fhir explorer</title>
<link rel="icon" href="{root}/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="{mine}/leaflet/leaflet.css">
<link rel="stylesheet" href="{root}/static/fhir.css">
<link rel="stylesheet" href="{mine}/explorer.css">
<script src="{mine}/leaflet/leaflet.js" defer></script>
<script src="{root}/static/token.js" defer></script>
{scripts}</head><body class="explorer" data-api="{root}/fhir"{tiles}>
<header class="bar"><a class="brand" href="{root}/">orgunit-fhir explorer</a>
<a href="{root}/fhir/metadata">CapabilityStatement</a><span id="token-state"></span></header>
<main id="main"><h1 class="visually-hidden">Org unit explorer</h1>
<section id="login" class="token-form" hidden aria-label="Token">
<form id="token-form" autocomplete="off"><label for="token-input">Paste a bearer token to explore the registry. It stays
in this tab (sessionStorage) and is sent as <code>Authorization: Bearer</code> to the FHIR API only; never in a URL or
a cookie.</label><textarea id="token-input" rows="4" spellcheck="false"></textarea>
<button type="submit">Use token</button><p id="token-error" class="error" hidden></p></form></section>
<div id="app" hidden>
<p id="status" class="visually-hidden" role="status" aria-live="polite"></p>
<section id="side" aria-label="Find and browse units">
<div class="finder" role="search"><label for="search">Find a unit by name, code, uuid or id</label>
<input id="search" type="search" autocomplete="off" spellcheck="false"
 placeholder="Part of a name, the start of a code, a uuid or an id"
 role="combobox" aria-autocomplete="list" aria-expanded="false" aria-controls="results"
 aria-describedby="search-help">
<p id="search-help" class="note">Names: any part, accents, case and extra spaces ignored. Codes: their start, any case.</p>
<details id="filters" class="filters-box" open><summary>Filters</summary><div class="filters">
<label>Type <select id="type-filter"><option value="">any</option></select></label>
<label>Level <select id="level-filter"><option value="">any</option></select></label>
<label>Status <select id="status-filter"><option value="">any</option><option>active</option>
<option>suspended</option><option>inactive</option></select></label>
<label>Closed <select id="closed-filter"><option value="">any</option><option value="open">open only</option>
<option value="closed">closed only</option></select></label>
<label>Changed since <input id="since-filter" type="date"></label></div><div id="types-error"></div></details>
<p id="results-note" class="note"></p>
<ul id="results" role="listbox" aria-label="Matching units"></ul>
<p class="actions"><button type="button" id="more-results" hidden>More results</button></p>
<p id="export-results" class="actions exports" hidden>Export the <span id="export-results-count"></span>:
<button type="button" id="export-results-csv">CSV</button> <button type="button" id="export-results-geojson">GeoJSON</button>
<span id="export-note" class="note" role="status"></span></p></div>
<h2 id="tree-label">Pyramid</h2><div id="tree-note" class="note"></div>
<ul id="tree" role="tree" aria-labelledby="tree-label"></ul>
</section>
<section id="map-pane" aria-label="Map"><div id="map"></div><div id="legend" class="legend"></div>
<div id="map-note" class="note"></div>
<details id="map-list"><summary>What the map shows, as a list</summary><div class="map-list-body"></div></details></section>
<section id="detail" aria-label="Unit detail">
<p class="note">Select a unit in the tree or find it by name.</p></section>
</div></main>
</body></html>
"""


def explorer_pages(settings: Settings) -> list[WebPage | WebAssets]:
    tile_url = settings.server.explorer_tile_url
    return [WebPage("/", lambda root: explorer_shell(root, tile_url)), ASSETS]
