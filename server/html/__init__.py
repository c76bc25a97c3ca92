"""What people see in a browser: FHIR responses as HTML pages (pages), the explorer at `/` and its static assets
(explorer, static/), and the security headers of both (security). Imports nothing from server.http."""
from server.html.explorer import html_routes
from server.html.pages import html_page
from server.html.security import HTML_HEADERS

__all__ = ["HTML_HEADERS", "html_page", "html_routes"]
