"""What a provider declares: a resource type, where its rows live, how a row becomes a resource,
its typed search parameters bound to columns, and its operations. The engine does the rest."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import ColumnElement, FromClause
from sqlalchemy.engine import RowMapping

from server.errors import ConfigError

SearchParamType = Literal["string", "token", "reference"]
NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
RESOURCE_TYPE_RE = re.compile(r"^[A-Z][A-Za-z]+$")


@dataclass(frozen=True)
class Through:
    """A side table holding several values per resource: `key` points at the provider's id."""

    table: FromClause
    key: ColumnElement[Any]
    where: ColumnElement[bool] | None = None


@dataclass(frozen=True)
class StringTarget:
    normalized: ColumnElement[Any]  # holds server.text.normalize(text)
    exact: ColumnElement[Any]
    through: Through | None = None


@dataclass(frozen=True)
class TokenTarget:
    code: ColumnElement[Any]
    system: str | ColumnElement[Any] | None = None
    codes: Mapping[str, tuple[Any, ...]] | None = None  # FHIR code -> stored values; closes the value set
    prefix: str = ""  # a value written "<prefix><stored>" (urn:uuid:...) also matches
    through: Through | None = None


@dataclass(frozen=True)
class ReferenceTarget:
    column: ColumnElement[Any]
    resource_type: str


Target = StringTarget | TokenTarget | ReferenceTarget
TARGET_TYPES: dict[str, type] = {"string": StringTarget, "token": TokenTarget, "reference": ReferenceTarget}
MODIFIERS: dict[str, frozenset[str]] = {
    "string": frozenset({"exact", "contains"}),
    "token": frozenset(),
    "reference": frozenset(),
}


@dataclass(frozen=True)
class SearchParam:
    name: str
    type: SearchParamType
    targets: tuple[Target, ...]
    documentation: str
    definition: str | None = None  # canonical URL of the SearchParameter (the HL7 one for standard parameters)

    @property
    def modifiers(self) -> frozenset[str]:
        return MODIFIERS[self.type]


@dataclass(frozen=True)
class Operation:
    """An instance operation answered as a named search: `clause(id)` is added to the search."""

    name: str
    param: str  # the search parameter the instance id is bound to (children: partof)
    documentation: str
    definition: str


@dataclass(frozen=True)
class ResourceProvider:
    resource_type: str
    table: FromClause
    id_column: ColumnElement[Any]
    columns: tuple[ColumnElement[Any], ...]
    to_resource: Callable[[RowMapping], dict[str, Any]]
    search_params: tuple[SearchParam, ...] = ()
    operations: tuple[Operation, ...] = ()
    from_clause: FromClause | None = None  # the table joined with what to_resource needs
    profile: str | None = None
    documentation: str | None = None
    params_by_name: Mapping[str, SearchParam] = field(init=False, repr=False, compare=False)
    operations_by_name: Mapping[str, Operation] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params_by_name", {p.name: p for p in self.search_params})
        object.__setattr__(self, "operations_by_name", {o.name: o for o in self.operations})

    @property
    def source(self) -> FromClause:
        return self.from_clause if self.from_clause is not None else self.table

    def check(self) -> None:
        """Refuse a bad declaration at start-up rather than at the first request."""
        where = f"provider {self.resource_type}"
        if not RESOURCE_TYPE_RE.match(self.resource_type):
            raise ConfigError(f"{where}: resource type must look like 'Location'")
        if len(self.params_by_name) != len(self.search_params):
            raise ConfigError(f"{where}: duplicate search parameter names")
        if len(self.operations_by_name) != len(self.operations):
            raise ConfigError(f"{where}: duplicate operation names")
        for param in self.search_params:
            if not NAME_RE.match(param.name):
                raise ConfigError(f"{where}: search parameter {param.name!r} is not a valid name")
            expected = TARGET_TYPES.get(param.type)
            if expected is None:
                raise ConfigError(f"{where}: search parameter {param.name} has unknown type {param.type!r}")
            if not param.targets or not all(isinstance(t, expected) for t in param.targets):
                raise ConfigError(f"{where}: search parameter {param.name} ({param.type}) needs {expected.__name__} targets")
        for op in self.operations:
            if not NAME_RE.match(op.name):
                raise ConfigError(f"{where}: operation {op.name!r} is not a valid name")
            bound = self.params_by_name.get(op.param)
            if bound is None or bound.type != "reference":
                raise ConfigError(f"{where}: operation {op.name} must bind a reference search parameter, not {op.param!r}")
