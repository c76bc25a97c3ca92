"""The elements of a FHIR Location that the Bundle importer reads, each checked and turned into stored values;
every error names the entry (`label`)."""
from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import date
from typing import Any

from plugins.orgunits.coordinates import Axis, bounds, within
from plugins.orgunits.importers.parsers import parse_date
from plugins.orgunits.importers.geometry import BOUNDARY_TYPES, check_geometry
from plugins.orgunits.tables import VALIDATION_STATUSES
from server import LoadError

BOUNDARY_URL = "http://hl7.org/fhir/StructureDefinition/location-boundary-geojson"
UUID_SYSTEM = "urn:ietf:rfc:3986"
_LOCATION_REFERENCE = re.compile(r"(?:.*/)?Location/([A-Za-z0-9\-.]{1,64})(?:/_history/[^/]+)?")


def identifiers(raw: Any, location_id: str, label: str) -> tuple[str | None, str | None, list[str]]:
    """(system of the identifier equal to the id, uuid, alias values)."""
    if raw is None:
        return None, None, []
    if not isinstance(raw, list):
        raise LoadError(f"{label}: identifier is not a list")
    system: str | None = None
    uuid: str | None = None
    values: list[str] = []
    for position, identifier in enumerate(raw):
        value = identifier.get("value") if isinstance(identifier, dict) else None
        if not isinstance(value, str) or not value.strip():
            raise LoadError(f"{label}: identifier[{position}] has no value")
        identifier_system = identifier.get("system")
        if value == location_id:
            system = system or identifier_system
        elif identifier_system == UUID_SYSTEM and value.startswith("urn:uuid:"):
            uuid = uuid or value[len("urn:uuid:"):]
        else:
            values.append(value)
    return system, uuid, values


def extensions(raw: Any, label: str) -> dict[str, dict[str, Any]]:
    """Extensions by the last segment of their URL (ours, whatever the namespace), the boundary by its full URL."""
    if raw is None:
        return {}
    if not isinstance(raw, list) or not all(isinstance(item, dict) and isinstance(item.get("url"), str)
                                            for item in raw):
        raise LoadError(f"{label}: extension is not a list of objects with a url")
    found: dict[str, dict[str, Any]] = {}
    for item in raw:
        url = item["url"]
        key = url if url == BOUNDARY_URL else url.rstrip("/").rsplit("/", 1)[-1]
        if key in (BOUNDARY_URL, "org-unit-validation-status", "opening-date", "closing-date"):
            if key in found:
                raise LoadError(f"{label}: extension {url} is given twice")
            found[key] = item
    return found


def code(extension: dict[str, Any], label: str) -> str:
    value = extension.get("valueCode")
    if value not in VALIDATION_STATUSES:
        raise LoadError(f"{label}: extension {extension['url']}: valueCode {value!r} is not one of "
                        f"{', '.join(VALIDATION_STATUSES)}")
    return str(value)


def date_of(extension: dict[str, Any] | None, what: str, label: str) -> date | None:
    if extension is None:
        return None
    value = extension.get("valueDate", extension.get("valueDateTime"))
    try:
        return parse_date(value)
    except ValueError:
        raise LoadError(f"{label}: extension {extension['url']}: {value!r} is not a date") from None


def position(raw: Any, label: str) -> tuple[float | None, float | None, float | None]:
    if raw is None:
        return None, None, None
    if not isinstance(raw, dict):
        raise LoadError(f"{label}: position is not an object")
    values: dict[str, float | None] = {}
    axes: tuple[Axis, ...] = ("latitude", "longitude", "altitude")
    for key in axes:
        value = raw.get(key)
        if value is None and key == "altitude":
            values[key] = None
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not within(key, value):
            bound = "a number" if key == "altitude" else f"a number in {bounds(key)}"
            raise LoadError(f"{label}: position.{key} {value!r} is not {bound}")
        values[key] = float(value)
    return values["latitude"], values["longitude"], values["altitude"]


def parent_of(raw: Any, full_urls: dict[str, str], label: str) -> str | None:
    if raw is None:
        return None
    reference = raw.get("reference") if isinstance(raw, dict) else None
    if not isinstance(reference, str) or not reference.strip():
        raise LoadError(f"{label}: partOf has no reference (only literal references are supported)")
    if reference in full_urls:
        return full_urls[reference]
    match = _LOCATION_REFERENCE.fullmatch(reference.strip())
    if match is None:
        raise LoadError(f"{label}: partOf reference {reference!r} is not a Location reference")
    return match.group(1)


def boundary(extension: dict[str, Any] | None, label: str) -> dict[str, Any] | None:
    if extension is None:
        return None
    attachment = extension.get("valueAttachment")
    data = attachment.get("data") if isinstance(attachment, dict) else None
    if not isinstance(data, str):
        raise LoadError(f"{label}: extension {BOUNDARY_URL} has no valueAttachment.data")
    try:
        geojson = json.loads(base64.b64decode(data, validate=True))
        return check_geometry(geojson, BOUNDARY_TYPES)
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoadError(f"{label}: the boundary is not base64-encoded GeoJSON ({exc})") from None
    except ValueError as exc:
        raise LoadError(f"{label}: malformed boundary: {exc}") from None
