"""What the caller sees reaches a clause as one typed value (`CompileContext.sight`, built by the engine from the
caller's visibility), never as untyped entries of what the look-ups found: a hierarchical reference's `:missing`
and a `:below` by another type's tree read it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, literal_column

from server.params.types.base import EVERY_ROW, CompileContext, Sight
from server.params.types.reference import Hierarchy, ReferenceTarget, ReferenceType, ReferenceValue

ROOT = Path(__file__).resolve().parents[2]
units = Table("sight_unit", MetaData(), Column("id", Integer, primary_key=True), Column("parent", Integer),
              Column("path", String))
services = Table("sight_service", MetaData(), Column("id", Integer, primary_key=True), Column("unit", Integer))
PARTOF = ReferenceTarget(units.c.parent, "Location", path=units.c.path)
UNIT_TREE = Hierarchy("Location", units, units.c.id, units.c.path)
LOCATION = ReferenceTarget(services.c.unit, "Location", hierarchy=UNIT_TREE)
NARROWED = literal_column("sight_unit.id % 2 = 0")
LOCATION_SEEN = literal_column("sight_unit.id < 100")


def _at(table: Table, sight: Sight, found: dict[object, object] | None = None) -> CompileContext:
    return CompileContext(table.c.id, table, "p", found or {}, sight)


def _sql(element: object) -> str:
    return str(element.compile(compile_kwargs={"literal_binds": True}))  # type: ignore[attr-defined]


@pytest.mark.parametrize("sight, says", [
    pytest.param(EVERY_ROW, "sight_unit.parent IS NOT NULL", id="every-row-a-parent-is-present"),
    pytest.param(Sight(roots=("/1/4/",)), "sight_unit.path NOT IN ('/1/4/')", id="subtrees-below-the-roots"),
    pytest.param(Sight(roots=()), "true", id="no-subtree-every-parent-hidden"),
    pytest.param(Sight(narrowed=NARROWED), "sight_unit.id % 2 = 0", id="narrowed-a-parent-it-sees"),
    pytest.param(Sight(roots=("/1/",), narrowed=NARROWED), "sight_unit.id % 2 = 0", id="narrowed-first"),
])
def test_a_hierarchical_references_missing_reads_the_sight(sight: Sight, says: str) -> None:
    assert says in _sql(ReferenceType().present(PARTOF, _at(units, sight)))


def test_a_plain_references_missing_ignores_the_sight() -> None:
    plain = ReferenceTarget(services.c.unit, "Location")
    for sight in (EVERY_ROW, Sight(roots=("/1/",)), Sight(narrowed=NARROWED)):
        assert _sql(ReferenceType().present(plain, _at(services, sight))) == "sight_service.unit IS NOT NULL"


def test_below_by_another_types_tree_keeps_to_the_rows_the_sight_hands() -> None:
    value = ReferenceValue("Location/4", "Location", "4")
    found = {("p", "Location", "4"): "/1/4/"}
    match = ReferenceType().compile(LOCATION, "below", value, _at(services, Sight({"Location": (LOCATION_SEEN,)}),
                                                                    found))
    assert "sight_unit.id < 100" in _sql(match)
    every = ReferenceType().compile(LOCATION, "below", value, _at(services, Sight({"Location": ()}), found))
    assert "sight_unit.id < 100" not in _sql(every)


def test_a_type_read_but_not_handed_is_an_error_not_every_row() -> None:
    value = ReferenceValue("Location/4", "Location", "4")
    with pytest.raises(KeyError, match="Location"):
        ReferenceType().compile(LOCATION, "below", value, _at(services, EVERY_ROW, {("p", "Location", "4"): "/1/4/"}))


def test_no_clause_reads_the_callers_sight_from_what_was_found() -> None:
    """The sight is not smuggled through `found` again under some key (the untyped hand-off it replaced)."""
    offending = []
    for path in sorted((ROOT / "server").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id in ("SCOPE", "SCOPE_ROOTS", "SCOPE_SEEN"):
                offending.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offending


def test_look_ups_read_their_own_rows_of_another_type_and_matches_the_rows_seen() -> None:
    """A scope's query narrows what a value matches through (`of`), not where a :below's unit is found
    (`looked_up_of`); a type the engine did not hand is an error, never another field's rows."""
    held = literal_column("sight_unit.id < 1000")
    narrowed = Sight(others={"Location": (LOCATION_SEEN,)}, looked_up={"Location": (held,)})
    assert (narrowed.of("Location"), narrowed.looked_up_of("Location")) == ((LOCATION_SEEN,), (held,))
    with pytest.raises(KeyError):
        Sight(others={"Location": (LOCATION_SEEN,)}).looked_up_of("Location")
