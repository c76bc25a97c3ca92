"""What people see in a browser: FHIR responses as HTML pages (pages), the engine's static assets and the pages
and assets plugins declare (web, static/), and the security headers of both (security). Imports nothing from
server.http."""
from server.html.pages import html_page
from server.html.security import HTML_HEADERS
from server.html.web import WebAssets, WebPage, html_routes

__all__ = ["HTML_HEADERS", "WebAssets", "WebPage", "html_page", "html_routes"]
