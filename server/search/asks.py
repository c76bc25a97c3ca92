"""What the search layer asks of the database, without I/O: a generator yields (statement, shape) and is sent the
rows in that shape; whoever drives it runs the statements (server.engine.steps on either driver; `run_on` on a
connection at hand, for work that already holds one)."""
from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, Literal, TypeVar

from sqlalchemy import Connection, Select

T = TypeVar("T")
Shape = Literal["rows", "mappings", "scalars", "scalar"]
Asks = Generator[tuple[Select[Any], Shape], Any, T]


def shaped(found: Sequence[Any], shape: Shape) -> Any:
    """Rows (tuples, or dicts by name for "mappings") in the shape asked: as they are, their first column, or the
    first column of the first row (None without a row)."""
    if shape == "scalars":
        return [row[0] for row in found]
    if shape == "scalar":
        return found[0][0] if found else None
    return list(found)


def run_on(conn: Connection, asks: Asks[T]) -> T:
    sent: Any = None
    try:
        while True:
            statement, shape = asks.send(sent)
            result = conn.execute(statement)
            sent = shaped(result.mappings().all() if shape == "mappings" else result.all(), shape)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
