"""One search value, parsed by the parameter's type and modifier."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from server.errors import InvalidValue
from server.engine.provider import ReferenceTarget, SearchParam, TokenTarget
from server.search.dates import DateRange, parse_range
from server.engine.text import normalize

FHIR_ID = re.compile(r"[A-Za-z0-9\-.]{1,64}")
KM_PER_UNIT = {"km": 1.0, "m": 0.001, "mi": 1.609344, "[mi_i]": 1.609344}
DEFAULT_NEAR_KM = 50.0


@dataclass(frozen=True)
class StringValue:
    raw: str
    normalized: str


@dataclass(frozen=True)
class TokenValue:
    raw: str
    system: str | None  # None: any system; "": explicitly no system ("|code")
    code: str | None    # None: any code ("system|")


@dataclass(frozen=True)
class ReferenceValue:
    raw: str
    resource_type: str
    id: str


@dataclass(frozen=True)
class MissingValue:
    raw: str
    missing: bool


@dataclass(frozen=True)
class TextValue:
    raw: str


@dataclass(frozen=True)
class NearValue:
    raw: str
    latitude: float
    longitude: float
    km: float


SearchValue = StringValue | TokenValue | ReferenceValue | DateRange | MissingValue | TextValue | NearValue


def parse_value(param: SearchParam, modifier: str | None, raw: str) -> SearchValue:
    if modifier == "missing":
        if raw not in ("true", "false"):
            raise InvalidValue(f"{param.name}:missing takes true or false, not {raw!r}")
        return MissingValue(raw, raw == "true")
    if modifier == "text":
        return TextValue(raw)
    if param.type == "string":
        return StringValue(raw, normalize(raw))
    if param.type == "token":
        return _token(param, raw)
    if param.type == "date":
        return parse_range(param.name, raw)
    if param.type == "special":
        return parse_near(param.name, raw)
    return _reference(param, raw)


def _token(param: SearchParam, raw: str) -> TokenValue:
    if "|" in raw:
        system, _, code = raw.partition("|")
        value = TokenValue(raw, system, code or None)
    else:
        value = TokenValue(raw, None, raw)
    if value.system == "" and value.code is None:
        raise InvalidValue(f"{param.name}: '|' alone is not a token")
    closed = [t.codes for t in param.targets if isinstance(t, TokenTarget)]
    if value.code is not None and closed and all(c is not None for c in closed):
        allowed = sorted({code for codes in closed if codes for code in codes})
        if value.code not in allowed:
            raise InvalidValue(f"{param.name}: {value.code!r} is not one of the allowed values {', '.join(allowed)}")
    return value


def _reference(param: SearchParam, raw: str) -> ReferenceValue:
    targets = {t.resource_type for t in param.targets if isinstance(t, ReferenceTarget)}
    parts = raw.rstrip("/").split("/")
    if len(parts) == 1:
        resource_type, rid = (next(iter(targets)) if len(targets) == 1 else ""), parts[0]
    else:
        resource_type, rid = parts[-2], parts[-1]
    if resource_type not in targets:
        raise InvalidValue(f"{param.name}: {raw!r} must refer to {' or '.join(sorted(targets))} "
                           "(id, Type/id or absolute URL)")
    if not FHIR_ID.fullmatch(rid):
        raise InvalidValue(f"{param.name}: {rid!r} is not a FHIR id")
    return ReferenceValue(raw, resource_type, rid)


def _number(name: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidValue(f"{name}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InvalidValue(f"{name}: {what} {text!r} is not a finite number")
    return value


def parse_near(name: str, raw: str) -> NearValue:
    """`latitude|longitude|distance|units`, latitude first; km when units are omitted."""
    parts = raw.split("|")
    if not 2 <= len(parts) <= 4:
        raise InvalidValue(f"{name}: expected latitude|longitude|distance|units, got {raw!r}")
    latitude = _number(name, parts[0], "latitude")
    longitude = _number(name, parts[1], "longitude")
    if not -90 <= latitude <= 90:
        raise InvalidValue(f"{name}: latitude {latitude} is outside -90..90 (latitude comes first)")
    if not -180 <= longitude <= 180:
        raise InvalidValue(f"{name}: longitude {longitude} is outside -180..180")
    distance = _number(name, parts[2], "distance") if len(parts) > 2 and parts[2] else DEFAULT_NEAR_KM
    units = parts[3] if len(parts) > 3 and parts[3] else "km"
    if units not in KM_PER_UNIT:
        raise InvalidValue(f"{name}: units {units!r} are not supported; use km, m or mi")
    if distance <= 0:
        raise InvalidValue(f"{name}: distance must be positive, got {distance}")
    return NearValue(raw, latitude, longitude, distance * KM_PER_UNIT[units])
