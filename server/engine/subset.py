"""_summary and _elements: subsets of a resource, tagged SUBSETTED as the FHIR search page requires."""
from __future__ import annotations

from functools import cache
from typing import Any

SUBSETTED = {"system": "http://terminology.hl7.org/CodeSystem/v3-ObservationValue", "code": "SUBSETTED",
             "display": "subsetted"}
ALWAYS = frozenset({"resourceType", "id", "meta"})


# keyed by the type of a stored resource: at most the ~150 resource types of FHIR R4 (an unknown one raises, and is
# not kept), so unbounded is bounded
@cache
def summary_elements(resource_type: str) -> frozenset[str]:
    """The elements FHIR R4 marks as in the summary (Σ), from the R4B models' metadata (read once)."""
    from fhir.resources.R4B import get_fhir_model_class

    fields = get_fhir_model_class(resource_type).model_fields
    return ALWAYS | {name for name, info in fields.items()
                     if (info.json_schema_extra or {}).get("summary_element_property")}  # type: ignore[union-attr]


def _tagged(resource: dict[str, Any]) -> dict[str, Any]:
    meta = dict(resource.get("meta") or {})
    meta["tag"] = [*meta.get("tag", []), SUBSETTED]
    resource["meta"] = meta
    return resource


def subset(resource: dict[str, Any], summary: str | None, elements: tuple[str, ...] | None) -> dict[str, Any]:
    if elements is not None:
        keep = ALWAYS | set(elements)
    elif summary == "true":
        keep = summary_elements(resource["resourceType"])
    elif summary == "data":
        keep = set(resource) - {"text"}
    else:
        return resource
    if keep >= set(resource):
        return resource
    return _tagged({k: v for k, v in resource.items() if k in keep})
