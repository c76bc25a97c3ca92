"""The headers of every HTML page and static asset: a strict Content-Security-Policy (scripts and styles only
from this server, no inline ones; fetch only to this server; no framing), nosniff, no referrer."""
from __future__ import annotations

from urllib.parse import urlsplit


def csp(tile_url: str | None = None) -> str:
    images = "'self' data:"
    if tile_url:
        parts = urlsplit(tile_url)  # https://{s}.tile.example.org/{z}/{x}/{y}.png: any subdomain
        images += f" {parts.scheme}://{parts.netloc.replace('{s}', '*')}"
    return ("default-src 'none'; script-src 'self'; style-src 'self'; img-src " + images + "; connect-src 'self'; "
            "form-action 'none'; base-uri 'none'; frame-ancestors 'none'")


def security_headers(tile_url: str | None = None) -> dict[str, str]:
    return {"Content-Security-Policy": csp(tile_url), "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}


HTML_HEADERS = security_headers()
