"""What one database statement costs alone: the server's own statements (a read by id, a page of 100 stored
bodies at a random _after, a name-prefix page of 20), compiled as the server compiles them and run on the driver's
own connection (sqlite3, psycopg), one at a time; the median in microseconds."""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from sqlalchemy import text

from bench.datasets import Dataset
from server.engine.context import create_context
from server.search.request import parse_search
from server.params.types.base import EVERY_ROW
from server.search.bodies import body_page_query
from server.search.sql import where_clause
from server.settings import load_settings


def floor(dataset: Dataset, settings: Path, samples: int = 1000) -> dict[str, float]:
    ctx = create_context(load_settings(settings, dataset.url))
    provider = ctx.registry.get("Location")
    rng = random.Random(7)
    raw = ctx.db.raw_connection()
    top = dataset.size

    def compiled(items: list[tuple[str, str]]) -> str:
        request = parse_search(provider, items)  # type: ignore[arg-type]
        where = where_clause(provider, request, page=True, sight=EVERY_ROW)  # type: ignore[arg-type]
        statement = body_page_query(provider, request, where=where, extra_row=1).compile(  # type: ignore[arg-type]
            dialect=ctx.db.dialect, compile_kwargs={"literal_binds": True})
        return str(statement)

    read = ctx.reads["Location"]
    pages = [compiled([("status", "active"), ("_count", "100"), ("_after", str(rng.randint(1, top)))])
             for _ in range(50)]
    with ctx.db.connect() as conn:  # real prefixes, as bench.datasets.targets draws them
        prefixes = sorted({p for (p,) in conn.execute(text("SELECT DISTINCT substr(norm, 1, 3) FROM org_unit_name"))
                           if p and len(p) == 3})
    names = [compiled([("name", p), ("_count", "20")]) for p in rng.sample(prefixes, min(50, len(prefixes)))]
    runs: dict[str, Callable[[Any], Any]] = {
        "round trip (SELECT 1)": lambda cur: cur.execute("SELECT 1").fetchall(),
        "read by id": lambda cur: cur.execute(read.sql, _params(read, id=rng.randint(1, top))).fetchall(),
        "page of 100 bodies at a random _after": lambda cur: cur.execute(rng.choice(pages)).fetchall(),
        "name-prefix page of 20": lambda cur: cur.execute(rng.choice(names)).fetchall(),
    }
    out: dict[str, float] = {}
    try:
        cursor = raw.cursor()
        for name, run in runs.items():
            out[name] = _median_us(run, cursor, samples if "page" not in name else samples // 4)
        if dataset.backend == "postgresql":  # as the server reads it on the loop: results in binary format
            binary = raw.driver_connection.cursor(binary=True)  # type: ignore[union-attr]
            out["page of 100 bodies at a random _after, binary results"] = _median_us(
                runs["page of 100 bodies at a random _after"], binary, samples // 4)
    finally:
        raw.close()
        ctx.db.dispose()
    return out


def _median_us(run: Callable[[Any], Any], cursor: Any, samples: int) -> float:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        run(cursor)
        times.append(time.perf_counter() - started)
    return round(median(times[len(times) // 10:]) * 1e6)


def _params(prepared: Any, **values: Any) -> Any:
    merged = {**prepared.defaults, **values}
    return tuple(merged[n] for n in prepared.positions) if prepared.positions is not None else merged
