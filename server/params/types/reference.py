"""`reference` parameters: `id`, `Type/id` or an absolute URL; :below and :above over a materialized path.

A reference is a column of the provider's rows, or (`through=`) of a side table holding one row per reference,
for resources that refer to several others by one parameter."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Select, false, select, true

from server.errors import ConfigError, InvalidValue
from server.params.ids import FHIR_ID, coerce_id
from server.params.paths import ancestors, subtree
from server.params.types.base import CompileContext, Match, Through, via

HIERARCHY = ("below", "above")
# found[SCOPE_ROOTS]: the paths of the subtree roots of a caller limited to subtrees (Visibility.paths), set by the
# search: to such a caller a root's parent is hidden, so `:missing=true` on a hierarchical reference (one with a
# path) gives its roots, as it gives the whole tree's roots to the others
SCOPE_ROOTS = "scope-roots"


@dataclass(frozen=True)
class ReferenceTarget:
    column: ColumnElement[Any]  # the referenced id: a column of the provider's rows, or of `through`'s side table
    resource_type: str
    path: ColumnElement[Any] | None = None  # materialized path "/root/.../self/" of the same table: :below, :above
    through: Through | None = None  # the side table holding `column`, one row per reference

    def __post_init__(self) -> None:
        if self.path is not None and self.through is not None:
            raise ConfigError(f"reference to {self.resource_type}: :below/:above (path=) need a reference held in "
                              "the provider's own rows, not through= a side table")


@dataclass(frozen=True)
class ReferenceValue:
    raw: str
    resource_type: str
    id: str


class ReferenceType:
    name: ClassVar[str] = "reference"
    target: ClassVar[type] = ReferenceTarget
    split: ClassVar[bool] = True

    def modifiers(self, targets: Sequence[ReferenceTarget]) -> frozenset[str]:
        hierarchy = all(t.path is not None for t in targets)
        return frozenset({"missing", *(HIERARCHY if hierarchy else ())})

    def parse(self, name: str, targets: Sequence[ReferenceTarget], modifier: str | None,
              raw: str) -> ReferenceValue:
        types = {t.resource_type for t in targets}
        parts = raw.rstrip("/").split("/")
        if len(parts) == 1:
            resource_type, rid = (next(iter(types)) if len(types) == 1 else ""), parts[0]
        else:
            resource_type, rid = parts[-2], parts[-1]
        if resource_type not in types:
            raise InvalidValue(f"{name}: {raw!r} must refer to {' or '.join(sorted(types))} "
                               "(id, Type/id or absolute URL)")
        if not FHIR_ID.fullmatch(rid):
            raise InvalidValue(f"{name}: {rid!r} is not a FHIR id")
        return ReferenceValue(raw, resource_type, rid)

    def lookups(self, target: ReferenceTarget, modifier: str | None, value: ReferenceValue,
                at: CompileContext) -> Sequence[tuple[Hashable, Select[Any]]]:
        """:below and :above: the path of the resource named (found on the provider's own rows)."""
        if modifier not in HIERARCHY or target.path is None or value.resource_type != target.resource_type:
            return ()
        stored = coerce_id(at.id_column, value.id)
        if stored is None:
            return ()
        return [((at.param, value.id), select(target.path).where(at.id_column == stored))]

    def compile(self, target: ReferenceTarget, modifier: str | None, value: ReferenceValue,
                at: CompileContext) -> Match | None:
        if value.resource_type != target.resource_type:
            return false()
        if modifier in HIERARCHY and target.path is not None:
            path = at.found.get((at.param, value.id))
            if path is None:
                return false()
            if modifier == "below":  # strictly inside the subtree: paths that extend this one
                return subtree(target.path, path, strict=True)
            above = [a for a in (coerce_id(at.id_column, part) for part in ancestors(path)) if a is not None]
            return at.id_column.in_(above) if above else false()
        stored = coerce_id(target.column, value.id)
        return false() if stored is None else via(target.through, target.column == stored)

    def present(self, target: ReferenceTarget, at: CompileContext) -> Match:
        roots = at.found.get(SCOPE_ROOTS)
        if roots is not None and target.path is not None:  # a caller limited to subtrees: below its roots
            return target.path.not_in(roots) if roots else true()
        return via(target.through, target.column.is_not(None))


def targets_to(targets: Sequence[Any], resource_type: str) -> list[ReferenceTarget]:
    """The reference targets among a parameter's `targets` that point at `resource_type`."""
    return [t for t in targets if isinstance(t, ReferenceTarget) and t.resource_type == resource_type]


def held(target: ReferenceTarget, ids: Sequence[Any]) -> Select[Any]:
    """(referring id, referenced id) of the references that the resources `ids` hold in a side table."""
    assert target.through is not None
    through = target.through
    query = (select(through.key, target.column).where(through.key.in_(ids), target.column.is_not(None))
             .order_by(through.key, target.column))
    return query if through.where is None else query.where(through.where)


def referring(target: ReferenceTarget, id_column: ColumnElement[Any], referenced: Sequence[Any]) -> ColumnElement[bool]:
    """The resources (ids in `id_column`) whose reference `target` points at one of `referenced`."""
    cond = target.column.in_(referenced)
    return id_column.in_(target.through.ids(cond)) if target.through is not None else cond


TYPE = ReferenceType()
