"""FHIR XML through fhir.resources R4B models (built once per XML response). fhir.resources and pydantic are
imported on the first XML answer only: a server answering JSON never loads them."""
from __future__ import annotations

import functools
import re
from typing import Any

# characters XML 1.0 cannot hold (they may come from a request: an id, a Host header copied into a link)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
SUBSETTED = "SUBSETTED"


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _NOT_XML.sub("\ufffd", value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _subsetted(resource: dict[str, Any]) -> bool:
    return any(tag.get("code") == SUBSETTED for tag in resource.get("meta", {}).get("tag", ()))


@functools.cache  # per model class: at most the ~150 resource types of FHIR R4B
def _lenient(cls: type) -> type:
    """The model without its top-level mandatory elements: a SUBSETTED resource (_elements, _summary) may lack
    them, as the FHIR search page allows."""
    return type(f"Subsetted{cls.__name__}", (cls,), {"get_required_fields": lambda self: []})


def to_xml(resource: dict[str, Any], pretty: bool) -> bytes:
    from fhir.resources.R4B import get_fhir_model_class
    from pydantic import ValidationError

    resource = _clean(resource)
    cls = get_fhir_model_class(resource["resourceType"])
    try:
        model = cls.model_validate(resource)
    except ValidationError:
        if not _subsetted(resource):
            raise
        model = _lenient(cls).model_validate(resource)
    return model.model_dump_xml(pretty_print=pretty)  # type: ignore[no-any-return]
