"""Response format from `_format` (first) and `Accept` (q-values honoured): FHIR JSON (default), XML, or HTML for
browsers (`text/html` ranked first by q-value and position, as browsers send it, or `_format=html`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from server.errors import NotAcceptable

FHIR_JSON = "application/fhir+json"
JSON = "application/json"
FHIR_XML = "application/fhir+xml"
XML = "application/xml"
HTML = "text/html"
_FORMAT_PARAM = {"json": FHIR_JSON, JSON: JSON, FHIR_JSON: FHIR_JSON, "application/json+fhir": FHIR_JSON,
                 "xml": FHIR_XML, XML: XML, "text/xml": "text/xml", FHIR_XML: FHIR_XML,
                 "application/xml+fhir": FHIR_XML, "html": HTML, HTML: HTML}
_ACCEPT = {FHIR_JSON: FHIR_JSON, "application/json+fhir": FHIR_JSON, JSON: JSON,
           "application/*": FHIR_JSON, "*/*": FHIR_JSON,
           FHIR_XML: FHIR_XML, "application/xml+fhir": FHIR_XML, XML: XML, "text/xml": "text/xml", HTML: HTML}


@dataclass(frozen=True)
class Format:
    media_type: str = FHIR_JSON
    pretty: bool = False

    @property
    def content_type(self) -> str:
        return f"{self.media_type};charset=utf-8"

    @property
    def xml(self) -> bool:
        return self.media_type.endswith("xml")

    @property
    def html(self) -> bool:
        return self.media_type == HTML


def _accept_ranges(header: str) -> list[tuple[float, int, str]]:
    ranges = []
    for position, part in enumerate(header.split(",")):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media:
            ranges.append((-q, position, media.lower()))
    return sorted(ranges)


def negotiate(format_param: str | None, accept: str | None, pretty: str | None) -> Format:
    is_pretty = (pretty or "").lower() == "true"
    if format_param:
        media = _FORMAT_PARAM.get(format_param.strip().lower().split(";")[0].replace(" ", "+"))
        if media is None:
            raise NotAcceptable(f"_format={format_param!r} is not supported; use json, xml, html, "
                                f"{FHIR_JSON} or {FHIR_XML}")
        return Format(media, is_pretty)
    if not accept or not accept.strip():
        return Format(FHIR_JSON, is_pretty)
    for negative_q, _, media in _accept_ranges(accept):
        if negative_q < 0 and media in _ACCEPT:
            return Format(_ACCEPT[media], is_pretty)
    raise NotAcceptable(f"none of the accepted media types ({accept}) is served; "
                        f"this server answers {FHIR_JSON}, {JSON}, {FHIR_XML}, {XML} or {HTML}")


def answering(media_types: frozenset[str]) -> Callable[[str | None, str | None, str | None], Format]:
    """The negotiator of an operation that answers `media_types` besides FHIR JSON and XML (Bulk Data's files):
    an Accept naming one of them (or any) takes the handler's answer as it is (its errors in FHIR JSON); 406 for
    an Accept that takes none of them nor FHIR."""
    accepted = {*media_types, "*/*", "application/*"}

    def negotiator(format_param: str | None, accept: str | None, pretty: str | None) -> Format:
        if not accept or any(part.split(";")[0].strip().lower() in accepted for part in accept.split(",")):
            return Format()
        try:
            return negotiate(None, accept, None)
        except NotAcceptable:
            raise NotAcceptable(f"this answer is {', '.join(sorted(media_types))}; not served as {accept}") from None

    return negotiator
