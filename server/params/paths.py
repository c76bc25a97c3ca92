"""Materialized paths ("/1/4/9/": every ancestor's id, each followed by "/"): a subtree is one range of them.

Their format is owned here: `path_of` builds one in Python, `path_below` in SQL (a plugin keeping a path column
fills it with these, exported by `server`). The range `path >= p AND path < p[:-1] + "0"` holds every path that starts with `p` ("0" is the character right
after "/"), so an ordinary index on the path column serves it; it is written here only."""
from __future__ import annotations

from typing import Any

from collections.abc import Iterable

from sqlalchemy import ColumnElement, String, and_, cast, literal

SEPARATOR = "/"


def path_of(ids: Iterable[int | str]) -> str:
    """The path of the node whose ancestors and self are `ids`, outermost first ([1, 4, 9] -> "/1/4/9/")."""
    return SEPARATOR + "".join(f"{node}{SEPARATOR}" for node in ids)


def path_below(parent_path: ColumnElement[Any] | None, node_id: ColumnElement[Any]) -> ColumnElement[str]:
    """`path_of` in SQL: the path of the node `node_id` under the node whose path is `parent_path` (None: a root)."""
    above = literal(SEPARATOR) if parent_path is None else parent_path
    return above + cast(node_id, String) + literal(SEPARATOR)


def _bound(value: str, inline: bool) -> Any:
    return literal(value, literal_execute=True) if inline else value


def subtree(path_column: ColumnElement[Any], path: str, *, strict: bool = False,
            inline: bool = False) -> ColumnElement[bool]:
    """Rows whose path lies in the subtree rooted at `path`. `strict`: without the root itself (paths that
    extend this one). `inline`: the bounds as constants in the SQL, not parameters (a prepared statement's
    generic plan then still knows how many rows they select)."""
    lower = path_column > _bound(path, inline) if strict else path_column >= _bound(path, inline)
    return and_(lower, path_column < _bound(path[:-1] + "0", inline))


def in_subtree(path: str | None, root: str) -> bool:
    """The same test on one path, in Python."""
    return path is not None and path.startswith(root)


def ancestors(path: str) -> list[str]:
    """The ids on the path above its last one, outermost first ("/1/4/9/" -> ["1", "4"])."""
    return path.strip("/").split("/")[:-1]


def outermost(paths: list[str] | tuple[str, ...] | set[str]) -> tuple[str, ...]:
    """The paths that are not inside another one's subtree, sorted."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(in_subtree(path, k) for k in kept):
            kept.append(path)
    return tuple(kept)
