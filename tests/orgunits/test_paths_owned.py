"""The materialized path's format is the engine's (server.params.paths, exported by `server`): the org-unit plugin
fills org_unit.path with it and builds no path by hand."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, create_engine, select

import server
from plugins.orgunits.importers.iaso_csv import load_iaso_csv
from plugins.orgunits.tables import org_unit
from server.params import paths
from tests.support.contexts import IASO_CSV

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
nodes = Table("nodes", MetaData(), Column("id", Integer), Column("parent", String))


@pytest.fixture(scope="module")
def sqlite() -> Iterator[Engine]:
    eng = create_engine("sqlite://")
    with eng.begin() as conn:
        nodes.create(conn)
    yield eng
    eng.dispose()


def test_the_plugins_get_the_engines_path_functions() -> None:
    assert (server.path_of, server.path_below, server.path_subtree) == (paths.path_of, paths.path_below,
                                                                        paths.subtree)


@pytest.mark.parametrize("ids, path", [
    pytest.param([1], "/1/", id="root"),
    pytest.param([1, 4, 9], "/1/4/9/", id="three-levels"),
    pytest.param([2049032, 12], "/2049032/12/", id="large-ids"),
])
def test_the_path_round_trips(sqlite: Engine, ids: list[int], path: str) -> None:
    assert paths.path_of(ids) == path
    assert paths.ancestors(path) == [str(i) for i in ids[:-1]]
    assert all(paths.in_subtree(path, paths.path_of(ids[:depth])) for depth in range(1, len(ids) + 1))
    parent = paths.path_of(ids[:-1]) if len(ids) > 1 else None
    with sqlite.begin() as conn:
        conn.execute(nodes.delete())
        conn.execute(nodes.insert().values(id=ids[-1], parent=parent))
        built = select(paths.path_below(None if parent is None else nodes.c.parent, nodes.c.id))
        assert conn.execute(built).scalar_one() == path  # the SQL twin builds the same text


def test_stored_paths_are_path_of_the_chain_of_ids(engine: Engine) -> None:
    load_iaso_csv(engine, IASO_CSV)
    with engine.connect() as conn:
        rows = {row.id: row for row in conn.execute(select(org_unit.c.id, org_unit.c.parent_id, org_unit.c.path))}

    def chain(unit_id: int) -> list[int]:
        parent = rows[unit_id].parent_id
        return [*chain(parent), unit_id] if parent is not None else [unit_id]

    assert len(rows) == 136
    assert {unit_id: row.path for unit_id, row in rows.items()} == {i: paths.path_of(chain(i)) for i in rows}


def test_plugins_build_no_path_by_hand() -> None:
    """No "/" literal in SQL, no LIKE on a path, and a path column set only to `path_below(...)`, None, or another path
    column's value (a kept version takes its unit's path: plugins/orgunits/history.py sync_current_paths)."""
    found = []
    for path in sorted(PLUGINS.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "literal" and any(isinstance(a, ast.Constant) and a.value == "/" for a in node.args):
                found.append(f"{path.name}:{node.lineno} literal('/')")
            if name == "like" and "path" in ast.unparse(node.func):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg == "path" and name == "values" and not (
                        isinstance(value, ast.Constant) and value.value is None
                        or isinstance(value, ast.Call) and getattr(value.func, "id", "") == "path_below"
                        or isinstance(value, ast.Attribute) and value.attr == "path"):
                    found.append(f"{path.name}:{node.lineno} path={ast.unparse(value)}")
    assert not found
