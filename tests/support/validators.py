"""The independent validators the shared checker uses (fhirkit-rs, google-fhir-r4, JSON rules),
plus strict R4 model parsing (fhir.resources R4B, fhirclient)."""
from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from typing import Any


def json_rule_problems(value: Any, path: str = "$") -> Iterator[str]:
    if isinstance(value, dict):
        if not value:
            yield f"{path}: empty object"
        for key, item in value.items():
            yield from json_rule_problems(item, f"{path}.{key}")
    elif isinstance(value, list):
        if not value:
            yield f"{path}: empty array"
        for i, item in enumerate(value):
            yield from json_rule_problems(item, f"{path}[{i}]")
    elif value is None:
        yield f"{path}: null"
    elif isinstance(value, str) and not value.strip():
        yield f"{path}: blank string"


def fhirkit_problems(resource: dict[str, Any]) -> list[str]:
    import fhirkit

    return [f"fhirkit: {i.path}: {i.message}" for i in fhirkit.validate(resource)
            if str(getattr(i, "severity", "error")).lower() in ("error", "fatal")]


#: the texts of the resources google-fhir-r4 found valid (this process): its validation is a function of the text
_GOOGLE_VALID: set[str] = set()
_GOOGLE_KEPT = 20_000


def google_problems(resource: dict[str, Any]) -> list[str]:
    """google-fhir-r4's problems with the resource. A Bundle is validated in parts, each distinct part once (the
    same Location is in many tests' pages): the Bundle without its entries, then each entry in a Bundle of its own.
    Its parser and validator go field by field (no rule joins a Bundle's fields to its entries'), so the Bundle is
    valid exactly when the parts are; where a part is not, the whole Bundle is validated and its message returned."""
    entries = resource.get("entry") if resource.get("resourceType") == "Bundle" else None
    if not entries or not isinstance(entries, list):
        return _google_whole(resource)
    shell = {k: v for k, v in resource.items() if k != "entry"}
    parts = [shell, *({"resourceType": "Bundle", "type": resource.get("type"), "entry": [entry]} for entry in entries)]
    if all(not _google_whole(part) for part in parts):
        return []
    return _google_whole(resource)


def _google_whole(resource: dict[str, Any]) -> list[str]:
    text = json.dumps(resource)
    if text in _GOOGLE_VALID:
        return []
    found = _google_validated(resource, text)
    if not found:
        if len(_GOOGLE_VALID) >= _GOOGLE_KEPT:
            _GOOGLE_VALID.clear()
        _GOOGLE_VALID.add(text)
    return found


def _google_validated(resource: dict[str, Any], text: str) -> list[str]:
    from google.fhir.r4 import json_format
    from google.fhir.r4.proto.core.resources import (
        bundle_and_contained_resource_pb2 as bcr,
    )

    rtype = resource["resourceType"]
    if rtype == "Bundle":
        cls = bcr.Bundle
    else:
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", rtype).lower()
        cls = getattr(importlib.import_module(f"google.fhir.r4.proto.core.resources.{snake}_pb2"), rtype)
    try:
        json_format.json_fhir_string_to_proto(text, cls, validate=True)
    except Exception as exc:  # the library raises several unrelated types
        return [f"google-fhir-r4: {type(exc).__name__}: {str(exc)[:300]}"]
    return []


def model_problems(resource: dict[str, Any]) -> list[str]:
    from fhir.resources.R4B import get_fhir_model_class

    try:
        get_fhir_model_class(resource["resourceType"]).model_validate(resource)
    except Exception as exc:
        return [f"fhir.resources R4B: {str(exc)[:300]}"]
    return []


def problems(resource: dict[str, Any]) -> list[str]:
    return [*json_rule_problems(resource), *fhirkit_problems(resource), *google_problems(resource),
            *model_problems(resource)]


def assert_valid(resource: dict[str, Any]) -> None:
    found = problems(resource)
    assert not found, "\n".join(found)
