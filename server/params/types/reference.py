"""`reference` parameters: `id`, `Type/id` or an absolute URL; :below and :above over a materialized path.

A reference is a column of the provider's rows, or (`through=`) of a side table holding one row per reference,
for resources that refer to several others by one parameter.

The hierarchy modifiers come two ways. A self-reference with `path=` (Location.partof, the provider's own
materialized path) selects resources of the tree itself: `partof:below=X` the resources strictly inside X's subtree
(whose parent is X or below it), `partof:above=X` X's ancestors (not X). A reference to a type that has a tree
(`hierarchy`, found by the registry on that type's provider: server.declare.registry) selects by the referenced
resource, as FHIR's :below/:above on a reference to a hierarchical resource do: `location:below=X` the resources
referring to X itself or to a resource inside X's subtree, `location:above=X` to X or one of its ancestors. Those
read the other type's rows: the named resource's path among those the caller's look-ups read (its account's and
subtree roots'), the references matched among the live ones the caller sees (`reads`: the engine hands their
conditions as at.sight.of(type)), so a reference it cannot see matches nothing."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, FromClause, Select, false, select, true

from server.errors import ConfigError, InvalidValue
from server.params.ids import FHIR_ID, coerce_id
from server.params.paths import ancestors, subtree
from server.params.types.base import CompileContext, Form, Match, Through, binds_of, via

HIERARCHY = ("below", "above")


@dataclass(frozen=True)
class Hierarchy:
    """The tree of a referenced type, as the registry finds it on that type's provider (the `path` of its
    self-reference, else of its subtree tenancy): its table, its ids and their materialized paths."""

    resource_type: str
    table: FromClause
    id_column: ColumnElement[Any]
    path: ColumnElement[Any]  # "/root/.../self/", a column of `table`


@dataclass(frozen=True)
class ReferenceTarget:
    column: ColumnElement[Any]  # the referenced id: a column of the provider's rows, or of `through`'s side table
    resource_type: str
    path: ColumnElement[Any] | None = None  # materialized path "/root/.../self/" of the same table: :below, :above
    through: Through | None = None  # the side table holding `column`, one row per reference
    # the referenced type's tree (:below, :above by the referenced resource): set by the registry when that type's
    # provider has one (server.declare.registry); a provider declares nothing
    hierarchy: Hierarchy | None = None

    def __post_init__(self) -> None:
        if self.path is not None and self.through is not None:
            raise ConfigError(f"reference to {self.resource_type}: :below/:above (path=) need a reference held in "
                              "the provider's own rows, not through= a side table")
        if self.hierarchy is not None and self.hierarchy.resource_type != self.resource_type:
            raise ConfigError(f"reference to {self.resource_type}: its hierarchy is {self.hierarchy.resource_type}'s")
        if self.through is not None and not self.through.table.c.contains_column(self.column):
            raise ConfigError(f"reference to {self.resource_type}: {self.column} is not a column of its side table "
                              "(through=): give the table that holds it, or a join of both")

    @property
    def tree(self) -> Hierarchy | None:
        """The other type's tree that :below and :above select by (None: the own `path`'s, or none)."""
        return self.hierarchy if self.path is None else None


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
        hierarchy = all(t.path is not None or t.hierarchy is not None for t in targets)
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

    def reads(self, target: ReferenceTarget, modifier: str | None) -> str | None:
        """:below and :above on a reference to another type's tree read that type's rows."""
        tree = target.tree
        return tree.resource_type if modifier in HIERARCHY and tree is not None else None

    def lookups(self, target: ReferenceTarget, modifier: str | None, value: ReferenceValue,
                at: CompileContext) -> Sequence[tuple[Hashable, Select[Any]]]:
        """:below and :above: the path of the resource named (on the provider's own rows, or on the referenced
        type's: `reads`)."""
        if modifier not in HIERARCHY or value.resource_type != target.resource_type:
            return ()
        tree = target.tree
        if tree is not None:
            named = coerce_id(tree.id_column, value.id)
            if named is None:
                return ()
            return [((at.param, tree.resource_type, value.id),
                     select(tree.path).select_from(tree.table).where(tree.id_column == named))]
        if target.path is None:
            return ()
        stored = coerce_id(at.id_column, value.id)
        if stored is None:
            return ()
        return [((at.param, value.id), select(target.path).where(at.id_column == stored))]

    def form(self, target: ReferenceTarget, modifier: str | None, value: ReferenceValue) -> Form | None:
        """A reference to another type ("false"), an id the column cannot hold ("false") or the stored id; None for
        :below and :above, which depend on the path looked up."""
        if value.resource_type != target.resource_type:
            return Form("false")
        if modifier in HIERARCHY and (target.tree is not None or target.path is not None):
            return None
        stored = coerce_id(target.column, value.id)
        return Form("false") if stored is None else Form("id", (stored,))

    def build(self, target: ReferenceTarget, modifier: str | None, key: Hashable,
              binds: Sequence[ColumnElement[Any]]) -> Match:
        return false() if key == "false" else via(target.through, target.column == binds[0])

    def compile(self, target: ReferenceTarget, modifier: str | None, value: ReferenceValue,
                at: CompileContext) -> Match | None:
        form = self.form(target, modifier, value)
        if form is not None:
            return self.build(target, modifier, form.key, binds_of(form.values))
        tree = target.tree
        if tree is not None:
            return _by_tree(target, tree, modifier, value, at)
        assert target.path is not None
        path = at.found.get((at.param, value.id))
        if path is None:
            return false()
        if modifier == "below":  # strictly inside the subtree: paths that extend this one
            return subtree(target.path, path, strict=True)
        above = [a for a in (coerce_id(at.id_column, part) for part in ancestors(path)) if a is not None]
        return at.id_column.in_(above) if above else false()

    def present(self, target: ReferenceTarget, at: CompileContext) -> Match:
        """On a hierarchical reference (one with a path), a parent the caller cannot see is as missing: to a caller
        narrowed by a SMART scope's query, `:missing=true` gives the top of what it sees (the explorer's roots); to
        one limited to subtrees, its roots; to the others, the whole tree's roots."""
        narrowed, roots = at.sight.narrowed, at.sight.roots
        if narrowed is not None and target.path is not None:  # the parent is one the caller sees
            return target.column.in_(select(at.id_column).select_from(at.source).where(narrowed).correlate(None))
        if roots is not None and target.path is not None:  # a caller limited to subtrees: below its roots
            return target.path.not_in(roots) if roots else true()
        return via(target.through, target.column.is_not(None))


def _by_tree(target: ReferenceTarget, tree: Hierarchy, modifier: str | None, value: ReferenceValue,
             at: CompileContext) -> Match:
    """The references to the resource named or to one inside its subtree (:below) or above it (:above), among the
    live rows of the referenced type the caller sees (at.sight.of(type), a scope's query applied)."""
    path = at.found.get((at.param, tree.resource_type, value.id))
    if path is None:  # unknown, or out of the caller's sight
        return false()
    scope = at.sight.of(tree.resource_type)
    if modifier == "below":
        inside = subtree(tree.path, path)
    else:
        named = [a for a in (coerce_id(tree.id_column, part) for part in path.strip("/").split("/")) if a is not None]
        if not scope:  # every one of them is seen: the ids themselves
            return via(target.through, target.column.in_(named))
        inside = tree.id_column.in_(named)
    ids = select(tree.id_column).select_from(tree.table).where(inside, *scope).correlate(None)
    return via(target.through, target.column.in_(ids))


def targets_to(targets: Sequence[Any], resource_type: str) -> list[ReferenceTarget]:
    """The reference targets among a parameter's `targets` that point at `resource_type`."""
    return [t for t in targets if isinstance(t, ReferenceTarget) and t.resource_type == resource_type]


def held(target: ReferenceTarget, ids: Sequence[Any]) -> Select[Any]:
    """(referring id, referenced id) of the references that the resources `ids` hold in a side table."""
    assert target.through is not None
    through = target.through
    query = (select(through.key, target.column).select_from(through.table)
             .where(through.key.in_(ids), target.column.is_not(None)).order_by(through.key, target.column))
    return query if through.where is None else query.where(through.where)


def referring(target: ReferenceTarget, id_column: ColumnElement[Any], referenced: Sequence[Any]) -> ColumnElement[bool]:
    """The resources (ids in `id_column`) whose reference `target` points at one of `referenced`."""
    cond = target.column.in_(referenced)
    return id_column.in_(target.through.ids(cond)) if target.through is not None else cond


TYPE = ReferenceType()
