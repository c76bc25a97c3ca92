"""One search value, parsed by the parameter's type (string, token, reference)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from server.errors import InvalidValue
from server.provider import ReferenceTarget, SearchParam, TokenTarget
from server.text import normalize

FHIR_ID = re.compile(r"[A-Za-z0-9\-.]{1,64}")


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


SearchValue = StringValue | TokenValue | ReferenceValue


def parse_value(param: SearchParam, modifier: str | None, raw: str) -> SearchValue:
    if param.type == "string":
        return StringValue(raw, normalize(raw))
    if param.type == "token":
        return _token(param, raw)
    return _reference(param, raw)


def _token(param: SearchParam, raw: str) -> TokenValue:
    if "|" in raw:
        system, _, code = raw.partition("|")
        value = TokenValue(raw, system, code or None)
    else:
        value = TokenValue(raw, None, raw)
    if value.system == "" and value.code is None:
        raise InvalidValue(f"{param.name}: '|' alone is not a token", expression=param.name)
    closed = [t.codes for t in param.targets if isinstance(t, TokenTarget)]
    if value.code is not None and closed and all(c is not None for c in closed):
        allowed = sorted({code for codes in closed if codes for code in codes})
        if value.code not in allowed:
            raise InvalidValue(
                f"{param.name}: {value.code!r} is not one of the allowed values {', '.join(allowed)}",
                expression=param.name,
            )
    return value


def _reference(param: SearchParam, raw: str) -> ReferenceValue:
    targets = {t.resource_type for t in param.targets if isinstance(t, ReferenceTarget)}
    parts = raw.rstrip("/").split("/")
    if len(parts) == 1:
        resource_type, rid = (next(iter(targets)) if len(targets) == 1 else ""), parts[0]
    else:
        resource_type, rid = parts[-2], parts[-1]
    if resource_type not in targets:
        raise InvalidValue(
            f"{param.name}: {raw!r} must refer to {' or '.join(sorted(targets))} (id, Type/id or absolute URL)",
            expression=param.name,
        )
    if not FHIR_ID.fullmatch(rid):
        raise InvalidValue(f"{param.name}: {rid!r} is not a FHIR id", expression=param.name)
    return ReferenceValue(raw, resource_type, rid)
