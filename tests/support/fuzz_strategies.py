"""Hypothesis strategies for tests/test_fuzz.py: raw paths, query strings, headers and bearer tokens.

Everything is built as the bytes an HTTP server hands to the ASGI app (percent-encoded ASCII request
targets, raw header bytes), so that nothing is normalized away by a client library on the way in.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from tests.support.data import UNITS, UUID_1

# ------------------------------------------------------------------ building blocks

INJECTIONS = (
    "' OR 1=1 --",
    "' OR '1'='1",
    "%' OR '1'='1",
    "%' OR '1'='1' --",
    "1; DROP TABLE org_unit",
    "1; DROP TABLE org_unit; --",
    "'; DELETE FROM org_unit; --",
    "'); DROP TABLE org_unit_history; --",
    "1 UNION SELECT name FROM sqlite_master --",
    "1' UNION SELECT NULL, version() --",
    "\" OR \"\"=\"",
    "\\",
    "\\'",
    "\\\\%",
    "%",
    "%%",
    "_",
    "__%",
    "[a-z]%",
    "*",
    "?",
    "\x00",
    "a\x00b",
    "\x00' OR 1=1 --",
    "\r\n",
    "x\r\nSet-Cookie: evil=1",
    "x\r\nX-Injected: 1",
    "\u2028\u2029",
    "\ufeff",
    "\ud7ff\ue000\uffff",
    "\U0001f600",
    "Ségou",
    "SEGOU",
    "ﬁ",
    "ℌauts",
    "Ａｉｒｅ",
    "İ",
    "ß",
    "\u0301",
    "e\u0301",
    "../../../../etc/passwd",
    "..%2f..%2f",
    "%2e%2e/%2e%2e",
    "${jndi:ldap://x/a}",
    "{{7*7}}",
    "<script>alert(1)</script>",
    "<?xml version='1.0'?><!DOCTYPE x [<!ENTITY e SYSTEM 'file:///etc/passwd'>]><x>&e;</x>",
    "]]>",
    "&amp;",
    "null",
    "None",
    "NaN",
    "-Infinity",
    "1e309",
    "-0",
    "0x10",
    "9" * 40,
    "-" + "9" * 40,
    " ",
    "\t",
    ",",
    "\\,",
    ",,,",
    "|",
    "||",
    "|||",
    ":",
    "a" * 300,
    "é" * 2000,
    "x" * 9000,
)

#: what the server searches by name: each unit's name and aliases
UNIT_NAMES = {u.id: (u.name, *u.aliases) for u in UNITS}
UNIT_IDS = tuple(str(u.id) for u in UNITS)
KNOWN_TYPES = ("Location", "Organization", "OperationDefinition", "StructureDefinition", "CodeSystem")
UNKNOWN_TYPES = ("Patient", "location", "LOCATION", "Bundle", "OperationOutcome", "SearchParameter", "metadata",
                 "_history", "_search", "$meta", "Location.json", "Location%00", "..", ".", "%2e%2e", "%2e",
                 "Location;x=1", "Location%2F30", "Locati%6Fn")
OPERATIONS = ("$children", "children", "$everything", "$meta", "$validate", "$lastn", "_search", "$", "$$children",
              "%24children", "$children%00", "metadata", "_history")
PARAMS = ("name", "status", "identifier", "type", "partof", "near", "organization", "active", "url", "_id",
          "_lastUpdated", "_count", "_skip", "_sort", "_summary", "_elements", "_include", "_revinclude", "_total",
          "_format", "_pretty", "_after", "_since", "_at", "_has", "_text", "_content", "_list", "_type",
          "_filter", "address", "", "name name", "Name", "NAME")
MODIFIERS = ("exact", "contains", "missing", "not", "text", "below", "above", "iterate", "sounds", "in", "of-type",
             "identifier", "Location", "", ":", "exact:exact")
NS = "https://orgunit-fhir.example.org"

ascii_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20)
any_text = st.text(max_size=30)  # any code point but surrogates (NUL and control characters included)
short_ints = st.integers(min_value=-5, max_value=200).map(str)
huge_ints = st.sampled_from(("0", "00", "007", "2147483648", "9223372036854775808", "1" + "0" * 30, "-1",
                             "1.5", "1e3", " 5", "5 ", "+5", "０", "٣", "1_000", "0x1f"))
ids = st.one_of(st.sampled_from(UNIT_IDS), st.sampled_from(("0", "999999", "-1", "1" * 65, "9" * 19, "9" * 20,
                                                           "01", "30.0", "3a", "abc", "1e1", "Location/30")),
                st.from_regex(r"[A-Za-z0-9\-.]{1,64}", fullmatch=True), any_text)

prefixes = st.sampled_from(("", "", "", "eq", "ne", "gt", "lt", "ge", "le", "sa", "eb", "ap", "xx", "GT", " gt"))

EDGES = (datetime.max.replace(microsecond=0), datetime.min, datetime.max.replace(microsecond=0), datetime.min,
         datetime(1970, 1, 1), datetime(2025, 3, 4, 10, 20, 30),
         datetime.now().replace(microsecond=0))
ZONE_MINUTES = st.one_of(st.sampled_from((0, 0, 1, -1, 60, -60, 14 * 60, -14 * 60, 23 * 60 + 59, -(23 * 60 + 59))),
                         st.integers(-(23 * 60 + 59), 23 * 60 + 59))


@st.composite
def edge_datetimes(draw: st.DrawFn) -> tuple[datetime, int]:
    """(a local time near the ends of what datetime holds, or near the data's own instants; a zone in minutes)."""
    base = draw(st.sampled_from(EDGES))
    seconds = draw(st.one_of(st.sampled_from((0, 1, 59, 3600, 86399)), st.integers(0, 2 * 86400)))
    if base == datetime.max.replace(microsecond=0):
        seconds = -seconds  # inwards from either end
    elif base != datetime.min:
        seconds = seconds * draw(st.sampled_from((1, -1)))
    moment = base + timedelta(seconds=seconds)
    zone = draw(ZONE_MINUTES)
    if base.year in (1, 9999) and draw(st.integers(0, 3)):
        zone = abs(zone) if base.year == 1 else -abs(zone)  # mostly the offset that pushes UTC past the end
    return moment, zone


def _zone(minutes: int, colon: bool) -> str:
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}{':' if colon else ''}{mins:02d}"


@st.composite
def fhir_edge_dates(draw: st.DrawFn) -> str:
    moment, zone = draw(edge_datetimes())
    text = moment.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0")
    return text[:draw(st.sampled_from((4, 7, 10, 16, 19, 19)))] + (
        ("Z" if zone == 0 else _zone(zone, True)) if draw(st.integers(0, 3)) else "")


@st.composite
def fhir_dates(draw: st.DrawFn) -> str:
    """Dates and instants of every precision, with their parts at (and past) their limits."""
    year = draw(st.one_of(st.sampled_from(("0000", "0001", "1969", "1970", "2025", "2025", "9999", "9999", "10000",
                                           "٢٠٢٥", "20x5")), st.integers(0, 9999).map("{:04d}".format)))
    text = year
    precision = draw(st.integers(0, 5))
    if precision >= 1:
        text += "-" + draw(st.sampled_from(("01", "03", "12", "12", "00", "13", "1", "99")))
    if precision >= 2:
        text += "-" + draw(st.sampled_from(("01", "04", "28", "29", "30", "31", "31", "00", "32")))
    if precision >= 3:
        text += "T" + draw(st.sampled_from(("00:00", "10:20", "23:59", "23:59", "24:00", "25:61", "1:2")))
        if precision >= 4:
            text += ":" + draw(st.sampled_from(("00", "30", "59", "60", "99")))
            if draw(st.booleans()):
                text += "." + draw(st.sampled_from(("1", "123", "999999", "9999999", "1234567890")))
        text += draw(st.sampled_from(("", "Z", "Z", "+00:00", "-00:00", "+14:00", "-14:00", "+23:59", "-23:59",
                                      "+24:00", "-24:00", "+99:99", "+02:30", "+0200", "z")))
    return text


dates = st.one_of(
    fhir_dates(), fhir_edge_dates(), fhir_dates(), fhir_edge_dates(), fhir_dates(), fhir_edge_dates(),
    st.sampled_from(("2025-03-04 10:20", "20250304", "now", "", "2025-03-04T10:20:30.123456789012345Z",
                     "9999-12-31T23:59:59.999999999-14:00")),
    st.datetimes().map(lambda d: d.isoformat()),
    any_text,
)


@st.composite
def dated(draw: st.DrawFn) -> str:
    return draw(prefixes) + draw(dates)


floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(("11.7", "-3.3", "90", "-90.0000001", "180", "1e400", "nan", "inf", "", "a",
                                    "0x1p3", "1_0", " 11.7")))


@st.composite
def near_values(draw: st.DrawFn) -> str:
    n = draw(st.integers(1, 5))
    parts = [draw(floats) for _ in range(min(n, 3))]
    if n >= 4:
        parts.append(draw(st.sampled_from(("km", "m", "mi", "[mi_i]", "KM", "", "furlong", "|"))))
    if n == 5:
        parts.append(draw(ascii_text))
    return "|".join(parts)


sort_values = st.lists(st.sampled_from(("_id", "-_id", "name", "-name", "status", "-status", "_lastUpdated",
                                        "-_lastUpdated", "type", "near", "--name", " name", "", "_score")),
                       min_size=1, max_size=4).map(",".join)
element_values = st.lists(st.sampled_from(("id", "name", "alias", "status", "partOf", "position", "identifier",
                                           "meta", "resourceType", "type", "extension", "Location.name", "nope",
                                           "", " ", "name.family", "*")),
                          min_size=1, max_size=5).map(",".join)
include_values = st.sampled_from(("Location:partof", "Location:partof:Location", "Location:organization",
                                  "Location:organization:Organization", "Location:partof:Organization",
                                  "Organization:partof", "Location", "Location:", ":", "*", "Location:*",
                                  "Location:name", "Location:partof,Location:organization", "Patient:partof", ""))
VALUES_BY_PARAM: dict[str, st.SearchStrategy[str]] = {
    "name": st.one_of(st.sampled_from(("burkina", "Ségou", "segou nord", "HBS", "cma boromo 50%", "cma boromo 50%_",
                                       "aire,csps", "aire\\,x", "dine", "ds ")), any_text),
    "status": st.sampled_from(("active", "suspended", "inactive", "http://hl7.org/fhir/location-status|active",
                               "|active", "http://hl7.org/fhir/location-status|", "active,inactive", "ACTIVE",
                               "open", "true", "false")),
    "identifier": st.sampled_from(("zmSNCYjqQGj", UUID_1, f"urn:uuid:{UUID_1}", f"urn:ietf:rfc:3986|urn:uuid:{UUID_1}",
                                   "|HBS", "HBS", "ASN-20", f"{NS}/fhir/sid/alias|", f"{NS}/fhir/sid/alias|Segou Nord",
                                   "urn:uuid:", "urn:uuid:not-a-uuid", "system|", "|", "a|b|c", "zm")),
    "type": st.sampled_from(("CSPS", "COUNTRY", "CHR", f"{NS}/fhir/CodeSystem/org-unit-type|CSPS", "|CSPS",
                             f"{NS}/fhir/CodeSystem/org-unit-type|", "Centre", "csps", "HF")),
    "partof": st.one_of(ids, st.sampled_from(("Location/20", "Location/1", "http://testserver/fhir/Location/20",
                                              "https://elsewhere.example/fhir/Location/2/", "Organization/1",
                                              "Location/", "/", "Location/20/_history/1", "Patient/20"))),
    "organization": st.one_of(ids, st.sampled_from(("Organization/1", "Location/1"))),
    "active": st.sampled_from(("true", "false", "yes")),
    "url": st.sampled_from((f"{NS}/fhir/OperationDefinition/Location-children", f"{NS}/fhir/CodeSystem/org-unit-type",
                            "http://x", "")),
    "near": near_values(),
    "_id": ids,
    "_after": ids,
    "_lastUpdated": dated(),
    "_since": dates,
    "_at": dates,
    "_count": st.one_of(short_ints, huge_ints),
    "_skip": st.one_of(short_ints, huge_ints),
    "_sort": sort_values,
    "_summary": st.sampled_from(("true", "false", "count", "data", "text", "TRUE", "")),
    "_elements": element_values,
    "_include": include_values,
    "_revinclude": include_values,
    "_total": st.sampled_from(("none", "estimate", "accurate", "exact", "")),
    "_format": st.sampled_from(("json", "xml", "application/json", "application/fhir+json", "application/fhir%2Bjson",
                                "application/fhir+xml", "text/xml", "application/xml", "turtle", "html", "JSON",
                                "json;charset=utf-8", " json", "application/json+fhir")),
    "_pretty": st.sampled_from(("true", "false", "TRUE", "1", "")),
}

GENERIC_VALUES = st.one_of(st.sampled_from(INJECTIONS), any_text, ascii_text)


@st.composite
def _values(draw: st.DrawFn, own: st.SearchStrategy[str]) -> str:
    # an explicit choice: hypothesis favours the first branch and simple draws, so plausible values come first
    return draw(GENERIC_VALUES if draw(st.integers(0, 5)) == 5 else own)


def values_for(param: str) -> st.SearchStrategy[str]:
    """Mostly values made for the parameter, sometimes anything."""
    own = VALUES_BY_PARAM.get(param)
    return GENERIC_VALUES if own is None else _values(own)


def encode(text: str, how: str) -> str:
    """Percent-encode `text` for a request target (always ASCII), in one of a few styles."""
    if how == "plus":  # form style: spaces as '+'
        return quote(text, safe="").replace("%20", "+")
    if how == "loose":  # what a sloppy client sends: only what cannot be ASCII is encoded
        return quote(text, safe="!$'()*,/:;=?@[]|^`{}~\\\"<>+ ").replace(" ", "%20").replace("#", "%23").replace(
            "&", "%26")
    return quote(text, safe="")


@st.composite
def query_pairs(draw: st.DrawFn, names: tuple[str, ...] = PARAMS) -> list[tuple[str, str]]:
    pairs = []
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from(names))
        modifier = draw(st.one_of(st.none(), st.none(), st.sampled_from(MODIFIERS), ascii_text))
        key = f"{name}:{modifier}" if modifier is not None else name
        pairs.append((key, draw(values_for(name))))
    return pairs


@st.composite
def query_strings(draw: st.DrawFn, names: tuple[str, ...] = PARAMS) -> tuple[bytes, list[tuple[str, str]]]:
    """(the raw query string, the pairs it was built from)."""
    pairs = draw(query_pairs(names))
    how = draw(st.sampled_from(("strict", "strict", "plus", "loose")))
    parts = [f"{encode(k, how)}={encode(v, how)}" for k, v in pairs]
    junk = draw(st.lists(st.sampled_from(("", "&", "=", "==", "a", "%", "%zz", "%C3", "%ff%fe", "%00", "a=b=c",
                                          ";", "_count", "_format=", "&&&", "%26", "%3D%3D")), max_size=2))
    for j in junk:
        parts.insert(draw(st.integers(0, len(parts))), j)
    return "&".join(parts).encode("ascii"), pairs


# ------------------------------------------------------------------ paths

def _segment_text(text: str) -> str:
    return quote(text, safe="")


segments = st.one_of(
    st.sampled_from(KNOWN_TYPES), st.sampled_from(KNOWN_TYPES), st.sampled_from(UNKNOWN_TYPES),
    st.sampled_from(OPERATIONS), st.sampled_from(UNIT_IDS),
    st.sampled_from(("_history", "_history", "1", "2", "0", "metadata", "Location-children", "org-unit-type",
                     "..", ".", "%2e%2e", "%2E%2E", "..%2f", "%2f", "%5c..%5c", "...", "%00", "%", "%zz",
                     "%c0%ae%c0%ae", "%25", "%252e%252e", ";", ";jsessionid=1", "~", "?", "#", "%23")),
    ids.map(_segment_text),
    any_text.map(_segment_text),
    st.sampled_from(INJECTIONS).map(_segment_text),
)


@st.composite
def resource_paths(draw: st.DrawFn) -> str:
    """[base]/Type/id[/_history[/vid] | /$op]: the shapes the routes take, with odd types, ids and versions."""
    rtype = draw(st.one_of(st.sampled_from(KNOWN_TYPES[:1] * 3 + KNOWN_TYPES), st.sampled_from(UNKNOWN_TYPES)))
    rid = draw(st.one_of(st.sampled_from(UNIT_IDS), ids.map(_segment_text), any_text.map(_segment_text),
                         st.sampled_from(("org-unit-type", "Location-children", "closing-date", "1"))))
    tail = draw(st.sampled_from(("", "", "/_history", "/_history/1", "/_history/", "/$children", "/children",
                                 "/$everything", "/_history/VID", "/OP")))
    if tail.endswith("VID"):
        tail = tail[:-3] + _segment_text(draw(st.one_of(ids, st.sampled_from(("2", "0", "-1", "1.0", "01")))))
    elif tail.endswith("OP"):
        tail = "/" + draw(st.one_of(st.sampled_from(OPERATIONS), any_text.map(_segment_text)))
    return f"/fhir/{rtype}/{rid}{tail}"


@st.composite
def paths(draw: st.DrawFn) -> bytes:
    """A raw (percent-encoded, ASCII) path, nearly always under /fhir."""
    if draw(st.booleans()):
        path = draw(resource_paths())
    else:
        prefix = draw(st.sampled_from(("/fhir", "/fhir", "/fhir", "/fhir", "/fhir/", "/FHIR", "/fhir/..", "/fhir%2F",
                                       "", "/", "//fhir", "/fhir/./", "/../fhir")))
        parts = draw(st.lists(segments, max_size=5))
        path = prefix.rstrip("/") + "".join("/" + p for p in parts) if parts else prefix
    if draw(st.integers(0, 3)) == 0:
        path += "/"
    if not path.startswith("/"):
        path = "/" + path
    return path.encode("ascii")


# ------------------------------------------------------------------ headers

media_types = st.sampled_from(("application/fhir+json", "application/json", "application/fhir+xml", "application/xml",
                               "text/xml", "*/*", "application/*", "text/*", "text/html", "text/plain",
                               "application/json+fhir", "application/xml+fhir", "image/png", "", "*", "*/",
                               "application/fhir+json; fhirVersion=4.0", "APPLICATION/FHIR+JSON",
                               "application/fhir+json;charset=latin1"))
q_values = st.sampled_from(("", ";q=0", ";q=0.5", ";q=1", ";q=1.0", ";q=-1", ";q=2", ";q=abc", ";q=", ";q=nan",
                            ";q=inf", ";Q=0.1", "; q = 0.3", ";level=1", ";q=0.001;x=y"))


@st.composite
def accept_headers(draw: st.DrawFn) -> str:
    ranges = draw(st.lists(st.tuples(media_types, q_values), min_size=1, max_size=4))
    return ",".join(m + q for m, q in ranges) if draw(st.integers(0, 9)) else draw(any_text)


WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@st.composite
def rfc_dates(draw: st.DrawFn) -> str:
    """RFC 5322 / 9110 dates with every part at (and past) its limits, as email.utils parses them."""
    day = draw(st.sampled_from(("01", "04", "31", "00", "32", "1")))
    month = draw(st.sampled_from(MONTHS + ("Foo",)))
    year = draw(st.sampled_from(("2025", "2025", "1970", "0001", "9999", "9999", "99999", "25", "70", "0000")))
    clock = draw(st.sampled_from(("10:20:30", "10:20:29", "00:00:00", "23:59:59", "24:00:00", "99:99:99", "10:20")))
    zone = draw(st.sampled_from(("GMT", "GMT", "UTC", "+0000", "-0000", "+2359", "-2359", "+9999", "-9999", "EST",
                                 "+14", "")))
    weekday = draw(st.sampled_from(WEEKDAYS + ("", "Xyz")))
    return f"{weekday + ', ' if weekday else ''}{day} {month} {year} {clock} {zone}".strip()


@st.composite
def rfc_edge_dates(draw: st.DrawFn) -> str:
    moment, zone = draw(edge_datetimes())
    zone_text = draw(st.sampled_from(("GMT", _zone(zone, False), _zone(zone, False))))
    return (f"{WEEKDAYS[moment.weekday()]}, {moment.day:02d} {MONTHS[moment.month - 1]} {moment.year:04d} "
            f"{moment.strftime('%H:%M:%S')} {zone_text}")


http_dates = st.one_of(
    rfc_edge_dates(), rfc_dates(), rfc_edge_dates(), rfc_dates(), rfc_edge_dates(),
    st.sampled_from(("Tue, 04 Mar 2025 10:20:30 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "Tuesday, 04-Mar-25 10:20:30 GMT",
                     "Tue Mar  4 10:20:30 2025", "2025-03-04T10:20:30Z", "yesterday", "", " ", "0", "-1")),
    st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
    any_text,
)
etags = st.one_of(
    st.sampled_from(('W/"1"', '"1"', "*", 'W/"2", W/"1"', "W/", 'W/""', '""', ",", ", ,", "W/*", '"*"', 'W/"1', "1",
                     'w/"1"')),
    st.lists(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=22).map(lambda t: f'W/"{t}"'),
             max_size=3).map(", ".join),
    any_text,
)
crlf = st.sampled_from(("\r\n", "\n", "\r", "\r\nX-Injected: 1", "\r\n\r\n<html>", "\x00", "\x0b", "\x7f"))


@st.composite
def header_values(draw: st.DrawFn, base: st.SearchStrategy[str]) -> str:
    value = draw(base)
    if draw(st.integers(0, 7)) == 0:
        at = draw(st.integers(0, len(value)))
        value = value[:at] + draw(crlf) + value[at:]
    return value


HEADER_STRATEGIES: dict[str, st.SearchStrategy[str]] = {
    "accept": accept_headers(),
    "prefer": st.one_of(st.sampled_from(("handling=strict", "handling=lenient", "return=minimal",
                                         "return=OperationOutcome", "respond-async", "handling = strict",
                                         "HANDLING=STRICT", "handling=strict, return=representation", "wait=10")),
                        any_text),
    "if-none-match": etags,
    "if-modified-since": http_dates,
    "x-request-id": st.one_of(st.uuids().map(str), ascii_text, any_text, st.just("a" * 5000)),
    "x-forwarded-proto": st.one_of(st.sampled_from(("https", "http", "https, http", "ftp", "", "javascript",
                                                    "https://evil", "HTTPS")), any_text),
    "x-forwarded-host": st.one_of(st.sampled_from(("example.org", "example.org:8443", "a, b", "evil.example/x?y#",
                                                   "[::1]:80", "", "user@host", "host\"><x", "a b")), any_text),
    "x-forwarded-for": st.one_of(st.sampled_from(("1.2.3.4", "1.2.3.4, 5.6.7.8", "unknown", "::1")), any_text),
    "x-forwarded-prefix": st.sampled_from(("/api", "../", "")),
    "host": st.one_of(st.sampled_from(("testserver", "testserver", "example.org:8080", "", "a b", "x/y", "[::1]",
                                       "testserver:99999")), ascii_text),
    "content-type": st.sampled_from(("application/fhir+json", "multipart/form-data", "text/plain; charset=x")),
    "accept-encoding": st.sampled_from(("gzip", "br, *", "identity;q=0")),
    "origin": st.sampled_from(("http://evil.example", "null")),
}
#: how likely each header is in one request (the conditional ones most, as they reach the most code)
HEADER_ODDS = {"if-modified-since": 5, "if-none-match": 2, "accept": 3, "x-request-id": 3, "prefer": 2}


@st.composite
def header_sets(draw: st.DrawFn) -> list[tuple[str, str]]:
    out = []
    for name in sorted(HEADER_STRATEGIES):
        if draw(st.integers(0, 9)) < HEADER_ODDS.get(name, 1):
            out.append((name, draw(header_values(HEADER_STRATEGIES[name]))))
    if out and draw(st.integers(0, 9)) == 0:  # the same header twice
        out.append(out[draw(st.integers(0, len(out) - 1))])
    return out


def header_bytes(value: str) -> bytes:
    """A header value as a server hands it on: UTF-8 bytes (Starlette reads them as latin-1)."""
    return value.encode("utf-8", "surrogatepass")


# ------------------------------------------------------------------ tokens

def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign_raw(header: Any, payload: Any, secret: str, header_text: str | None = None,
             payload_text: str | None = None) -> str:
    """A JWT with any JSON header and payload, HMAC-signed with `secret` by the hash its alg names (else SHA-256)."""
    h = header_text if header_text is not None else json.dumps(header, allow_nan=True)
    p = payload_text if payload_text is not None else json.dumps(payload, allow_nan=True)
    signing_input = f"{b64url(h.encode('utf-8', 'surrogatepass'))}.{b64url(p.encode('utf-8', 'surrogatepass'))}"
    alg = header.get("alg") if isinstance(header, dict) else None
    digest = {"HS384": hashlib.sha384, "HS512": hashlib.sha512}.get(alg if isinstance(alg, str) else "", hashlib.sha256)
    signature = hmac.new(secret.encode(), signing_input.encode(), digest).digest()
    return f"{signing_input}.{b64url(signature)}"


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), any_text)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(any_text, inner, max_size=3)), max_leaves=8)
NOW = int(time.time())
#: numeric dates at the limits: integers too large for a float, floats at the edge, the 32/64-bit limits
NUMERIC_EDGES = (10 ** 400, -(10 ** 400), 2 ** 1024, 10 ** 309, 2 ** 63, 2 ** 31, 1e308, -1e308)
exp_values = st.one_of(
    st.sampled_from(NUMERIC_EDGES),
    st.sampled_from((NOW + 3600, NOW - 3600, NOW - 20, NOW + 10, 0, -1, 10 ** 20, float("inf"), float("-inf"),
                     float("nan"), str(NOW + 3600), f" {NOW + 3600} ", f"{NOW + 3600}.5", "1" + "0" * 400, True, False,
                     None, [], {}, "soon", NOW + 3600.5, "٣" * 11, [NOW + 3600], {"$date": NOW + 3600})),
    st.integers(), st.floats(allow_nan=True), json_values,
)
PERMISSION_VALUES = st.one_of(
    st.sampled_from((["service_org_units"], "service_org_units other", [], ["other"], "service_org_units_x",
                     "SERVICE_ORG_UNITS", ["service_org_units", 1, None, {}], [["service_org_units"]],
                     {"service_org_units": True}, " service_org_units ", None, 1, True, "service_org_units\x00",
                     "service_org_units\nother", "service_org_units\u00a0x", ["service_org_units"] * 1000)),
    json_values,
)
ALGS = ("HS256", "HS384", "HS512", "none", "None", "NONE", "RS256", "ES256", "PS256", "EdDSA", "hs256", "", "HS256 ",
        "中", "é", "\"", "a\r\nb", "a\"b", None, 1, ["HS256"], {"a": "中"}, "HS256\x00")
#: the values worth trying for each header and claim of an otherwise valid token
HEADER_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "alg": st.one_of(st.sampled_from(ALGS), json_values),
    "typ": st.one_of(st.sampled_from(("JWT", "jwt", "at+jwt", "", "JWS")), json_values),
    "kid": st.one_of(st.sampled_from(("", "1", "../../etc/passwd", "' OR 1=1 --", "x" * 5000)), json_values),
    "crit": st.one_of(st.sampled_from((["exp"], ["b64"], [], "exp", ["nope"])), json_values),
    "b64": st.one_of(st.booleans(), json_values),
    "jku": st.sampled_from(("http://127.0.0.1:1/jwks", "file:///etc/passwd")),
    "x5u": st.sampled_from(("http://127.0.0.1:1/x5u",)),
    "jwk": json_values,
    "cty": json_values,
    "zip": st.sampled_from(("DEF", "")),
}
CLAIM_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "exp": exp_values,
    "nbf": st.one_of(exp_values, st.just(NOW - 60)),
    "iat": st.one_of(exp_values, st.just(NOW - 60)),
    "permissions": PERMISSION_VALUES,
    "scope": st.one_of(st.sampled_from(("openid service_org_units", "service_org_units", "openid", "",
                                        "service_org_units\tprofile")), json_values),
    "sub": st.one_of(st.sampled_from(("", "admin", "x" * 5000, "\x00", "中")), json_values),
    "aud": st.one_of(st.sampled_from(("orgunit-fhir", ["a", "b"], [], "")), json_values),
    "iss": st.one_of(st.sampled_from(("https://idp.test", "")), json_values),
    "realm_access": st.one_of(st.just({"roles": ["service_org_units"]}), json_values),
    "tenant": json_values,
    "tenants": json_values,
    "jti": json_values,
}


#: the fields that decide most: drawn more often
FAVOURITES = {"header": ("alg", "alg", "kid"), "claims": ("exp", "exp", "exp", "permissions", "permissions", "nbf", "iat")}


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _valid_parts() -> tuple[dict[str, Any], dict[str, Any]]:
    return {"alg": "HS256", "typ": "JWT"}, {"sub": "fuzz", "exp": NOW + 3600, "permissions": ["service_org_units"]}


@st.composite
def mutated_jwts(draw: st.DrawFn, secret: str) -> tuple[Any, Any, str]:
    """A valid token's header and claims with one to three fields changed, dropped or added; signed with the
    right secret (nearly always), by the hash its alg names. Returns (header, claims, key)."""
    header: Any
    claims: Any
    header, claims = _valid_parts()
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(("header", "claims", "claims", "claims", "whole")))
        if where == "whole":  # not even an object
            if draw(st.booleans()):
                header = draw(json_values)
            else:
                claims = draw(json_values)
            continue
        target, fields = (header, HEADER_FIELDS) if where == "header" else (claims, CLAIM_FIELDS)
        if not isinstance(target, dict):
            continue
        name = draw(st.one_of(st.sampled_from(FAVOURITES[where] + tuple(sorted(fields))), any_text))
        if name in target and draw(st.integers(0, 3)) == 0:
            del target[name]
        else:
            target[name] = draw(fields.get(name, json_values))
    key = secret if draw(st.integers(0, 7)) else "another-secret-of-32-bytes-or-more!"
    return header, claims, key


@st.composite
def tokens(draw: st.DrawFn, secret: str, valid: str) -> tuple[str | None, Any, bool]:
    """(the Authorization header value or None, the claims of a correctly signed token or None, whether the
    token may authenticate at all: correctly signed, or a damaged copy of the valid one)."""
    kind = draw(st.integers(0, 9))
    scheme = draw(st.sampled_from(("Bearer ", "Bearer ", "Bearer ", "Bearer ", "Bearer ", "bearer ", "BEARER ",
                                   "Bearer  ", "Bearer\t", "Basic ", "Token ", "", "Bearer")))
    if kind == 0:
        return draw(st.one_of(st.none(), any_text, st.sampled_from(("Bearer", "Bearer ", "Bearer null",
                                                                       "Bearer undefined", "Bearer a.b.c",
                                                                       "Bearer ..", "Bearer " + "a" * 9000,
                                                                       f"Bearer {valid} {valid}",
                                                                       f"Bearer {valid},Bearer x")))), None, False
    if kind == 1:  # truncated or damaged valid token
        cut = draw(st.integers(0, len(valid)))
        token = valid[:cut] if draw(st.booleans()) else valid[:cut] + draw(ascii_text) + valid[cut + 1:]
        return scheme + token, None, True
    if kind == 2:  # garbage dotted segments, or an unsigned token
        if draw(st.booleans()):
            header, claims = _valid_parts()
            header["alg"] = draw(st.sampled_from(("none", "None", "HS256")))
            unsigned = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}."
            return scheme + unsigned, None, False
        segs = draw(st.lists(st.one_of(ascii_text, st.binary(max_size=30).map(lambda b: b64url(b))), min_size=1,
                             max_size=5))
        return scheme + ".".join(segs), None, False
    if kind == 3:  # a header or payload that is not JSON, or deeply nested
        bad = draw(st.sampled_from(("{", "", "null", "[]", "1", "\"x\"", "{\"alg\":\"HS256\"", _deep(3000),
                                    "{\"alg\":\"HS256\",\"x\":" + _deep(1500) + "}", "\udcff", "{\"alg\":NaN}",
                                    "{\"alg\":\"HS256\",\"alg\":\"none\"}")))
        header = {"alg": "HS256", "typ": "JWT"}
        if draw(st.booleans()):
            return scheme + sign_raw(header, None, secret, header_text=bad, payload_text="{}"), None, False
        return scheme + sign_raw(header, None, secret, payload_text=bad), None, False
    header, claims, key = draw(mutated_jwts(secret))
    token = sign_raw(header, claims, key)
    correctly_signed = key == secret and isinstance(header, dict) and header.get("alg") in ("HS256", "HS384", "HS512")
    return scheme + token, (claims if correctly_signed else None), correctly_signed


# ------------------------------------------------------------------ one parameter at a time, where it applies

SEARCH = (b"/fhir/Location", b"/fhir/Location", b"/fhir/Location/20/$children", b"/fhir/Location/2/children")
HISTORY = (b"/fhir/Location/_history", b"/fhir/Location/30/_history")
READS = (b"/fhir/Location/30", b"/fhir/Location/30/_history/1", b"/fhir/CodeSystem/org-unit-type")
ORG = (b"/fhir/Organization",)
CANON = (b"/fhir/CodeSystem", b"/fhir/OperationDefinition", b"/fhir/StructureDefinition")
WHERE: dict[str, tuple[bytes, ...]] = {
    "name": SEARCH + ORG, "status": SEARCH, "type": SEARCH, "partof": SEARCH, "near": SEARCH,
    "identifier": SEARCH + ORG, "organization": SEARCH, "active": ORG, "url": CANON,
    "_id": SEARCH + ORG, "_lastUpdated": SEARCH + ORG, "_sort": SEARCH + ORG, "_include": SEARCH,
    "_revinclude": SEARCH, "_total": SEARCH + ORG, "_after": SEARCH,
    "_count": SEARCH + HISTORY + ORG + CANON, "_skip": SEARCH + HISTORY + ORG + CANON,
    "_since": HISTORY, "_at": HISTORY, "_summary": SEARCH + READS + ORG + HISTORY,
    "_elements": SEARCH + READS + ORG, "_format": SEARCH + READS + HISTORY, "_pretty": SEARCH + READS,
}
VALID_MODIFIERS = {"name": ("exact", "contains", "missing"), "_id": ("not", "missing"),
                   "status": ("not", "missing"), "identifier": ("not", "missing", "text"),
                   "type": ("not", "missing", "text"), "partof": ("missing", "below", "above"),
                   "_lastUpdated": ("missing",), "_include": ("iterate",), "_revinclude": ("iterate",)}


@st.composite
def focused_requests(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(path, query) with one or two parameters, each where it applies and with a value made for it."""
    first = draw(st.sampled_from(sorted(WHERE)))
    path = draw(st.sampled_from(WHERE[first]))
    names = [first] + [n for n in draw(st.lists(st.sampled_from(sorted(WHERE)), max_size=1)) if path in WHERE[n]]
    parts = []
    for name in names:
        key = name
        if draw(st.integers(0, 6)) == 6:
            key += ":" + draw(st.one_of(st.sampled_from(VALID_MODIFIERS.get(name, ("missing",))),
                                        st.sampled_from(MODIFIERS)))
        value = draw(st.sampled_from(("true", "false")) if key.endswith(":missing") else values_for(name))
        parts.append(f"{quote(key, safe=':')}={quote(value, safe='')}")
    return path, "&".join(parts).encode("ascii")
