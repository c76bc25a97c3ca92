"""A search parameter as a provider declares it: a name, its FHIR type and the targets that bind it to columns."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import ColumnElement

from server.params.types import type_of
from server.params.types.base import ParamType
from server.params.types.reference import ReferenceTarget, targets_to


@dataclass(frozen=True)
class SearchParam:
    name: str
    type: str  # the FHIR type: "string", "token", "reference", "date", "special" (its targets' type's name)
    targets: tuple[Any, ...]  # StringTarget, TokenTarget, ReferenceTarget, DateTarget, NearTarget... (one class)
    documentation: str
    definition: str | None = None  # canonical URL of the SearchParameter (the HL7 one for standard parameters)
    sort: ColumnElement[Any] | None = None  # what _sort orders by; None: not sortable

    @property
    def kind(self) -> ParamType[Any, Any]:
        """The parameter type its targets belong to (ResourceProvider.check has refused any other)."""
        kind = type_of(self.targets[0]) if self.targets else None
        if kind is None:
            raise TypeError(f"search parameter {self.name}: {self.targets!r} are not search targets")
        return kind

    @cached_property
    def referenced_types(self) -> frozenset[str]:
        """The resource types the parameter refers to, computed once: empty unless it is a reference parameter
        (what every reader asks instead of comparing `type` to "reference")."""
        return frozenset(t.resource_type for t in self.targets if isinstance(t, ReferenceTarget))

    def targets_to(self, resource_type: str) -> list[ReferenceTarget]:
        """Its reference targets pointing at `resource_type` (none for a parameter of another type)."""
        return targets_to(self.targets, resource_type)

    @property
    def modifiers(self) -> frozenset[str]:
        return self.kind.modifiers(self.targets)

    def problem(self) -> str | None:
        """What is wrong with the declaration, or None."""
        kind = type_of(self.targets[0]) if self.targets else None
        if kind is None or not all(type(t) is kind.target for t in self.targets):
            return f"needs targets of one search type, got {', '.join(type(t).__name__ for t in self.targets) or 'none'}"
        if kind.name != self.type:
            return f"is declared {self.type!r} but its {kind.target.__name__} targets make it {kind.name!r}"
        return None
