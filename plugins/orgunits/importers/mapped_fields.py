"""One field of a record read through a mapping file (`importers.mapping`), checked: the errors name the record,
the field and its mapping key."""
from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

from plugins.orgunits.coordinates import Axis, bounds, within
from plugins.orgunits.importers.mapping import FieldSpec, Unmapped
from plugins.orgunits.importers.parsers import FHIR_STATUSES, parse_date, parse_decimal
from plugins.orgunits.importers.tabular import Record
from plugins.orgunits.tables import VALIDATION_STATUSES
from server import LoadError


def value_of(spec: FieldSpec | None, record: Record, label: str) -> Any:
    if spec is None:
        return None
    try:
        return spec.get(record.fields)
    except Unmapped as exc:
        raise LoadError(f"{label}: {spec.key} {str(exc)!r} ({spec.describe()}) is not in {spec.key}.map "
                        f"(it lists {', '.join(map(repr, spec.mapping or {}))}); add it") from None


def code_of(spec: FieldSpec, record: Record) -> str | None:
    value = value_of(spec, record, record.label)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip() or None


def required_text(spec: FieldSpec, record: Record, label: str) -> str:
    value = value_of(spec, record, label)
    if value is None or isinstance(value, (dict, list)) or not str(value).strip():
        raise LoadError(f"{label}: no {spec.key.rpartition('.')[2]} ({spec.describe()}, {spec.key})")
    return str(value).strip()


def texts_of(spec: FieldSpec, record: Record, label: str) -> Iterator[str]:
    value = value_of(spec, record, label)
    for item in value if isinstance(value, list) else [value]:
        if item is not None and not isinstance(item, (dict, list)) and str(item).strip():
            yield str(item).strip()


def status_of(spec: FieldSpec | None, record: Record, label: str) -> str:
    """The validation status: VALID when the mapping names none; a status field left blank (with no `default`) is
    refused, never published active (issue 38: a blank cell re-activated a facility that was REJECTED)."""
    value = value_of(spec, record, label)
    if value is None and spec is not None and spec.path is not None:
        raise LoadError(f"{label}: the status is blank ({spec.describe()}) and {spec.key} has no default: fill the "
                        f"cell, or give the status of a blank one ({spec.key}: {{field: {spec.path}, ..., default: "
                        "VALID}})")
    if value is None:
        return "VALID"
    text = str(value).strip()
    if text.upper() in VALIDATION_STATUSES:
        return text.upper()
    if text.lower() in FHIR_STATUSES:
        return FHIR_STATUSES[text.lower()]
    assert spec is not None
    raise LoadError(f"{label}: status {text!r} ({spec.describe()}) is none of {', '.join(VALIDATION_STATUSES)} or "
                    f"{', '.join(FHIR_STATUSES)}; map it: {spec.key}: {{field: ..., map: {{{text}: VALID}}}}")


def coordinate_of(spec: FieldSpec | None, record: Record, label: str, axis: Axis) -> float | None:
    value = value_of(spec, record, label)
    if value is None:
        return None
    assert spec is not None
    text = str(value).strip()
    if isinstance(value, bool):
        raise LoadError(f"{label}: {spec.key} {value!r} is not a number")
    try:
        number = parse_decimal(text)
    except ValueError:
        raise LoadError(f"{label}: {spec.key} {text!r} ({spec.describe()}) is not a number") from None
    if not within(axis, number):
        raise LoadError(f"{label}: {spec.key} {text!r} is outside {bounds(axis)}")
    return number


def date_of(spec: FieldSpec | None, record: Record, label: str, date_format: str | None) -> date | None:
    value = value_of(spec, record, label)
    if value is None:
        return None
    assert spec is not None
    text = str(value).strip()
    try:
        return datetime.strptime(text, date_format).date() if date_format else parse_date(text)
    except ValueError:
        raise LoadError(f"{label}: {spec.key} {text!r} ({spec.describe()}) is not a date "
                        f"({date_format or 'YYYY-MM-DD'}{'' if date_format else '; or set date_format'})") from None
