"""Materialized paths: the one subtree range, against the rows of a real table."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Engine, MetaData, String, Table, create_engine, select

from server.params.paths import ancestors, in_subtree, outermost, subtree

PATHS = ["/1/", "/1/2/", "/1/2/3/", "/1/20/", "/1/29/", "/10/", "/1/2/30/"]
nodes = Table("nodes", MetaData(), Column("path", String))


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    eng = create_engine("sqlite://")
    with eng.begin() as conn:
        nodes.create(conn)
        conn.execute(nodes.insert(), [{"path": p} for p in PATHS])
    yield eng
    eng.dispose()


@pytest.mark.parametrize("root, strict, inline, expected", [
    pytest.param("/1/2/", False, False, ["/1/2/", "/1/2/3/", "/1/2/30/"], id="with-root"),
    pytest.param("/1/2/", True, False, ["/1/2/3/", "/1/2/30/"], id="strict"),
    pytest.param("/1/", False, True, ["/1/", "/1/2/", "/1/2/3/", "/1/2/30/", "/1/20/", "/1/29/"], id="inline"),
    pytest.param("/1/2/3/", True, False, [], id="leaf"),
])
def test_subtree(engine: Engine, root: str, strict: bool, inline: bool, expected: list[str]) -> None:
    with engine.connect() as conn:
        found = conn.execute(select(nodes.c.path).where(subtree(nodes.c.path, root, strict=strict, inline=inline))
                             .order_by(nodes.c.path)).scalars().all()
    assert found == expected
    assert sorted(p for p in PATHS if in_subtree(p, root) and not (strict and p == root)) == expected


@pytest.mark.parametrize("paths, expected", [
    pytest.param(["/1/2/", "/1/", "/1/2/3/"], ("/1/",), id="nested"),
    pytest.param(["/1/2/", "/1/20/"], ("/1/2/", "/1/20/"), id="siblings-sharing-a-prefix"),
    pytest.param([], (), id="none"),
])
def test_outermost(paths: list[str], expected: tuple[str, ...]) -> None:
    assert outermost(paths) == expected


def test_ancestors() -> None:
    assert ancestors("/1/4/9/") == ["1", "4"] and ancestors("/1/") == []
