"""A FHIR response as an HTML page for browsers: the status, any OperationOutcome as a table, the narrative
(sanitized), and the JSON highlighted with every reference, fullUrl and link clickable. A 401 carries the form
where the user pastes a token (static/page.js keeps it in sessionStorage and re-asks with it). Every value is
escaped; the page has no inline script or style (see server.html.security)."""
from __future__ import annotations

import re
from collections.abc import Iterator
from html import escape
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import orjson

from server.html.narrative import sanitize
from server.settings import FHIR_MOUNT

_REFERENCE = re.compile(r"[A-Z][A-Za-z]+/[A-Za-z0-9\-.]{1,64}(?:/_history/[A-Za-z0-9\-.]{1,64})?")
_LINK_KEYS = frozenset({"reference", "fullUrl", "url"})


def root_path(base: str) -> str:
    """The path of the server root the page's assets and the explorer live under ('' at the host's root):
    [base] without its trailing /fhir, path only (the assets are same-origin, whatever host base_url names)."""
    path = urlsplit(base).path.rstrip("/")
    return path.removesuffix(FHIR_MOUNT)


def html_page(body: dict[str, Any], status: int, base: str, namespace: str = "") -> bytes:
    """`namespace`: the server's canonical URL namespace (fhir.extension_namespace): its `{namespace}/fhir/Type/id`
    URLs (extensions, code systems) link to this server's copies."""
    root = root_path(base)
    links = _Links(base, namespace)
    title = _title(body, status)
    parts = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f'<link rel="icon" href="{escape(root)}/static/favicon.svg" type="image/svg+xml">',
        f'<link rel="stylesheet" href="{escape(root)}/static/fhir.css">',
        f'<script src="{escape(root)}/static/token.js" defer></script>',
        f'<script src="{escape(root)}/static/page.js" defer></script>',
        f'</head><body data-api="{escape(root)}{FHIR_MOUNT}" data-status="{status}">',
        '<header class="bar"><a class="brand" href="', escape(root or "/"), '">orgunit-fhir</a>',
        '<span id="token-state"></span></header>',
        '<main id="fhir">', *_content(body, status, links), "</main></body></html>",
    ]
    return "".join(parts).encode("utf-8")


def _title(body: dict[str, Any], status: int) -> str:
    kind = str(body.get("resourceType", "FHIR"))
    if kind == "Bundle":
        return f"Bundle ({body.get('type', '')}, {_counted(body)})"
    if kind != "OperationOutcome" and "id" in body:
        return f"{kind}/{body['id']}"
    return f"{status} {_reason(status)}" if status >= 400 else kind


def _counted(body: dict[str, Any]) -> str:
    """What a Bundle holds, as it says it: its total when it has one ("13,938 matches"), else the entries of this page
    (a search's matches only, not its included resources nor its outcomes) and that the total was not counted."""
    entries = [e for e in body.get("entry") or [] if isinstance(e, dict)]
    searchset = body.get("type") == "searchset"
    shown = sum(1 for e in entries if not searchset or (e.get("search") or {}).get("mode", "match") == "match")
    noun = "match" if searchset else "entry"
    plural = {"match": "matches", "entry": "entries"}[noun]
    total = body.get("total")
    if isinstance(total, int):
        return f"{total:,} {noun if total == 1 else plural}"
    counted = "; total not counted" if searchset and any(
        link.get("relation") == "next" for link in body.get("link") or [] if isinstance(link, dict)) else ""
    return f"{shown:,} {noun if shown == 1 else plural} on this page{counted}"


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _outcomes(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The OperationOutcomes of the answer: itself, or a Bundle's outcome entries (an ignored parameter...)."""
    if body.get("resourceType") == "OperationOutcome":
        return [body]
    entries = [e["resource"] for e in body.get("entry") or [] if isinstance(e, dict) and isinstance(e.get("resource"), dict)]
    return [r for r in entries if r.get("resourceType") == "OperationOutcome"]


def _content(body: dict[str, Any], status: int, links: _Links) -> Iterator[str]:
    state = "ok" if status < 400 else "error"
    outcomes = _outcomes(body)
    warned = sum(len(o.get("issue") or []) for o in outcomes) if status < 400 else 0
    state += " warned" if warned else ""
    also = f" · {warned} warning{'s' if warned > 1 else ''}" if warned else ""
    yield f'<p class="status {state}">HTTP {status} {escape(_reason(status))}{also}</p>'
    yield f"<h1>{escape(_title(body, status))}</h1>"
    if status == 401:
        yield ('<form id="token-form" class="token-form" autocomplete="off">'
               '<label for="token-input">This server needs a bearer token. Paste it here: it stays in this tab '
               "(sessionStorage) and is sent as <code>Authorization: Bearer</code>, never in a URL or a cookie."
               '</label><textarea id="token-input" rows="3" spellcheck="false"></textarea>'
               '<button type="submit">Use token</button><p id="token-error" class="error" hidden></p></form>')
    for outcome in outcomes:
        yield from _outcome(outcome)
    if body.get("resourceType") == "Bundle":
        yield from _paging(body, links)
        yield from _entries(body, links)
    div = (body.get("text") or {}).get("div") if isinstance(body.get("text"), dict) else None
    if isinstance(div, str) and div:
        yield f'<section class="narrative"><h2>Narrative</h2>{sanitize(div)}</section>'
    yield ('<p class="formats"><a href="#" id="raw-json" data-format="json">raw JSON</a> · '
           '<a href="#" id="raw-xml" data-format="xml">raw XML</a></p>')
    yield '<pre class="json" tabindex="0" role="region" aria-label="The answer as JSON">'
    yield from _json(body, links, 0, None)
    yield "</pre>"


def _outcome(body: dict[str, Any]) -> Iterator[str]:
    yield '<table class="outcome"><thead><tr><th>severity</th><th>code</th><th>diagnostics</th></tr></thead><tbody>'
    for issue in body.get("issue") or []:
        if isinstance(issue, dict):
            yield (f'<tr class="{escape(str(issue.get("severity", "")))}"><td>{escape(str(issue.get("severity", "")))}'
                   f'</td><td>{escape(str(issue.get("code", "")))}</td>'
                   f'<td>{escape(str(issue.get("diagnostics", "")))}</td></tr>')
    yield "</tbody></table>"


def _paging(body: dict[str, Any], links: _Links) -> Iterator[str]:
    paging = [link for link in body.get("link") or [] if isinstance(link, dict) and link.get("relation") != "self"]
    if paging:
        yield '<nav class="paging" aria-label="Pages">'
        for link in paging:
            href = links.href(str(link.get("url", "")), "url")
            if href:
                yield f'<a href="{escape(href)}">{escape(str(link.get("relation", "")))}</a> '
        yield "</nav>"


def _entries(body: dict[str, Any], links: _Links) -> Iterator[str]:
    """The Bundle's entries as a table: the resource (linked), its name, version and search mode or request."""
    rows = [e for e in body.get("entry") or [] if isinstance(e, dict) and isinstance(e.get("resource"), dict)]
    if not rows:
        return
    yield ('<table class="entries"><caption>Entries</caption><thead><tr><th scope="col">#</th>'
           '<th scope="col">resource</th><th scope="col">name</th><th scope="col">version</th>'
           '<th scope="col">mode</th></tr></thead><tbody>')
    for index, entry in enumerate(rows, 1):
        resource, search, request = entry["resource"], entry.get("search"), entry.get("request")
        label = f"{resource.get('resourceType', '')}/{resource.get('id', '')}".rstrip("/")
        href = links.href(str(entry.get("fullUrl", "")), "fullUrl")
        name = resource.get("name") if isinstance(resource.get("name"), str) else resource.get("title", "")
        meta = resource.get("meta") if isinstance(resource.get("meta"), dict) else {}
        mode = search.get("mode", "") if isinstance(search, dict) else \
            request.get("method", "") if isinstance(request, dict) else ""
        cell = f'<a href="{escape(href)}">{escape(label)}</a>' if href else escape(label)
        yield (f"<tr><td>{index}</td><td>{cell}</td><td>{escape(str(name or ''))}</td>"
               f"<td>{escape(str(meta.get('versionId', '')))}</td><td>{escape(str(mode))}</td></tr>")
    yield "</tbody></table>"


class _Links:
    """Where a string value links to: an http(s) URL under [base] (any of the link keys: any http(s) URL), a
    relative reference Type/id resolved against [base], or a canonical URL of the server's own namespace
    ({namespace}/fhir/Type/id) to this server's Type/id."""

    def __init__(self, base: str, namespace: str) -> None:
        self.base = base
        self.canonical = f"{namespace}/fhir/" if namespace else None

    def href(self, value: str, key: str | None) -> str | None:
        base = self.base
        if value.startswith(base + "/") or value == base:
            return value
        if self.canonical and value.startswith(self.canonical) and _REFERENCE.fullmatch(value[len(self.canonical):]):
            return f"{base}/{value[len(self.canonical):]}"
        if key in _LINK_KEYS and value.lower().startswith(("http://", "https://")):
            return value
        if key == "reference" and _REFERENCE.fullmatch(value):
            return f"{base}/{value}"
        return None


def _json(value: Any, links: _Links, depth: int, key: str | None) -> Iterator[str]:
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        if not value:
            yield "{}"
            return
        yield "{\n"
        for index, (name, item) in enumerate(value.items()):
            yield f'{pad}<span class="k">{escape(orjson.dumps(str(name)).decode())}</span>: '
            yield from _json(item, links, depth + 1, str(name))
            yield ",\n" if index < len(value) - 1 else "\n"
        yield "  " * depth + "}"
    elif isinstance(value, list):
        if not value:
            yield "[]"
            return
        yield "[\n"
        for index, item in enumerate(value):
            yield pad
            yield from _json(item, links, depth + 1, key)
            yield ",\n" if index < len(value) - 1 else "\n"
        yield "  " * depth + "]"
    elif isinstance(value, str):
        text = escape(orjson.dumps(value).decode())
        href = links.href(value, key)
        yield f'<a class="s" href="{escape(href)}">{text}</a>' if href else f'<span class="s">{text}</span>'
    elif isinstance(value, bool) or value is None:
        yield f'<span class="b">{orjson.dumps(value).decode()}</span>'
    else:
        yield f'<span class="n">{escape(orjson.dumps(value).decode())}</span>'
