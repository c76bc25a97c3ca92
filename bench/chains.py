"""Chained and _has searches against the unchained search of the same size, in process (no HTTP), on a demo pyramid
with the real Iaso and DHIS2 Sierra Leone data beside it.

    .venv/bin/python bench/chains.py                       # 10k demo, SQLite and PostgreSQL
    .venv/bin/python bench/chains.py --size 100000 --backend sqlite

Each pair is run interleaved (chained, unchained) `--rounds` times after a warm-up; the table shows the median of
the whole search (count cached, as a running server keeps it: `warm`) and of the search with its count run every
time (`cold`: _total as the first request of a data generation pays it), their minima (least disturbed by whatever
else the machine runs), and the ratios chained / unchained.
Databases are built once and kept (bench/data/chains-<size>.db; PostgreSQL: orgunit_bench_chains_<size>).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any
from pathlib import Path
from urllib.parse import parse_qsl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from plugins.orgunits.demo import generate_demo  # noqa: E402
from plugins.orgunits.importers.formats import load_file  # noqa: E402
from server.access.scope import AccessScope  # noqa: E402
from server.context import ServerContext, create_context  # noqa: E402
from server.engine import searches  # noqa: E402
from server.engine.caller import TRUSTED, Caller  # noqa: E402
from server.engine.chaining import forget  # noqa: E402
from server.settings import parse_settings  # noqa: E402
from server.storage.prerender import refresh  # noqa: E402

REAL = ROOT.parent / "shared" / "data" / "real"
PG_ADMIN = os.environ.get("ORGUNIT_FHIR_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")

# (name, type, chained query, type, unchained query of the same results or size); {ids} filled from the data
PAIRS = (
    ("partof.identifier", "Location", "partof.identifier={district_ref}", "Location", "partof={district}"),
    ("partof.name:exact", "Location", "partof.name:exact={district_name}", "Location", "partof={district}"),
    ("partof.type", "Location", "partof.type=REGION", "Location", "type=DISTRICT"),
    ("partof.partof.identifier", "Location", "partof.partof.identifier={region_ref}",
     "Location", "partof:below={region}&type=HEALTH_AREA"),
    ("organization.identifier", "Location", "organization.identifier=iaso", "Location", "organization={iaso}"),
    ("organization.name", "Location", "organization.name=Sierra", "Location", "organization={sierra}"),
    ("_has:Location:partof:type", "Location", "_has:Location:partof:type=CHR", "Location", "type=CHR"),
    ("_has nested", "Location", "_has:Location:partof:_has:Location:partof:type=CHR", "Location", "type=DISTRICT"),
    ("Organization _has", "Organization", "_has:Location:organization:status=active", "Organization", "active=true"),
    ("Organization _revinclude", "Organization", "_revinclude=Location:organization&name=iaso",
     "Location", "organization={iaso}&_count=200"),
)


def _url(backend: str, size: int) -> str:
    if backend == "sqlite":
        return f"sqlite:///{ROOT / 'bench' / 'data' / f'chains-{size}.db'}"
    return PG_ADMIN.replace("postgresql://", "postgresql+psycopg://").rsplit("/", 1)[0] + \
        f"/orgunit_bench_chains_{size}"


def _context(url: str, size: int) -> ServerContext:
    settings = parse_settings({"database": {"url": url}, "server": {"data_dir": str(ROOT / "bench" / "data")},
                               "auth": {"secret": "bench-chains-secret-of-at-least-32-bytes"}})
    ctx = create_context(settings)
    ctx.extensions.schema.upgrade(ctx.db)  # kept databases follow the migrations
    with ctx.db.connect() as conn:
        built = conn.exec_driver_sql("SELECT count(*) FROM org_unit").scalar_one() > size
    if not built:
        generate_demo(ctx.db, size, 42)
        load_file(ctx.db, "iaso-csv", REAL / "iaso_burkina_faso" / "org_units.csv")
        load_file(ctx.db, "fhir-bundle", REAL / "dhis2_sierra_leone_fhir" / "orgUnits.bundle.json",
                  data_source="Sierra Leone")
    if refresh(ctx.db, ctx.registry) or not built:  # the stored bodies of this code: pages splice them
        with ctx.db.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
    ctx.freshness.expire()
    return ctx


def _ensure_pg(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def _ids(ctx: ServerContext) -> dict[str, str]:
    with ctx.db.connect() as conn:
        def one(sql: str) -> str:
            return str(conn.exec_driver_sql(sql).scalar_one())
        region = one("SELECT min(u.id) FROM org_unit u JOIN org_unit_type t ON t.id = u.org_unit_type_id "
                     "WHERE t.short_name = 'REGION'")
        district = one("SELECT min(u.id) FROM org_unit u JOIN org_unit_type t ON t.id = u.org_unit_type_id "
                       f"WHERE t.short_name = 'DISTRICT' AND u.parent_id = {region}")  # in the scoped subtree
        return {
            "district": district, "region": region,
            "district_ref": one(f"SELECT source_ref FROM org_unit WHERE id = {district}"),
            "district_name": one(f"SELECT name FROM org_unit WHERE id = {district}"),
            "region_ref": one(f"SELECT source_ref FROM org_unit WHERE id = {region}"),
            "iaso": one("SELECT id FROM data_source WHERE slug = 'iaso'"),
            "sierra": one("SELECT id FROM data_source WHERE slug = 'sierra-leone'"),
        }


def _search(ctx: ServerContext, caller: Caller, rtype: str, query: str) -> Callable[[], int | None]:
    items = parse_qsl(query)

    def run() -> int | None:
        return searches.search_type(ctx, caller, "http://bench/fhir", rtype, items).get("total")
    return run


def _medians_ms(a: Callable[[], object], b: Callable[[], object], rounds: int,
                cold: ServerContext | None) -> tuple[float, float, float, float]:
    """Medians and minima of `a` and `b`, run in turn (what slows the machine slows both); `cold`: no count
    cached."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for run, out in ((a, times[0]), (b, times[1])):
            if cold is not None:  # as the first request after a load: no count, no condition kept
                cold.counts.clear()
                forget(cold)
            start = time.perf_counter()
            run()
            out.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[0]), statistics.median(times[1]), min(times[0]), min(times[1])


def bench(backend: str, size: int, rounds: int, scoped: bool) -> list[tuple[Any, ...]]:
    url = _url(backend, size)
    if backend == "postgresql":
        _ensure_pg(url)
    ctx = _context(url, size)
    ids = _ids(ctx)
    caller = Caller(None, AccessScope(account="default", roots=(f"Location/{ids['region']}",))) if scoped \
        else TRUSTED
    rows = []
    for name, ctype, chained, utype, unchained in PAIRS:
        a = _search(ctx, caller, ctype, chained.format(**ids))
        b = _search(ctx, caller, utype, unchained.format(**ids))
        sizes = (a(), b())
        for _ in range(5):
            a(), b()
        rows.append((name, f"{sizes[0]}/{sizes[1]}", *_medians_ms(a, b, rounds, None), *_medians_ms(a, b, rounds, ctx)))
    ctx.db.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--scoped", action="store_true", help="as a token limited to one region's subtree")
    args = parser.parse_args()
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    for backend in backends:
        print(f"\n{backend}, demo {args.size} + Iaso + DHIS2 Sierra Leone, {'scoped' if args.scoped else 'trusted'}, "
              f"median of {args.rounds} (ms)")
        print(f"{'':40} {'warm (count cached)':^39} {'cold (counted)':^39}")
        print(f"{'search':28} {'totals':>11} " + f"{'median':>7} {'unch.':>6} {'ratio':>5} {'min':>6} {'unch.':>6} "
              f"{'ratio':>5} " * 2)
        for name, sizes, *t in bench(backend, args.size, args.rounds, args.scoped):
            cells = [f"{a:7.2f} {b:6.2f} {a / b:5.2f} {c:6.2f} {d:6.2f} {c / d:5.2f}"
                     for a, b, c, d in (t[0:4], t[4:8])]
            print(f"{name:28} {sizes:>11} " + " ".join(cells))


if __name__ == "__main__":
    main()
