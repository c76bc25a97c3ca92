"""Chained and _has searches against the unchained search of the same size, in process (no HTTP), on a demo pyramid
with the real Iaso and DHIS2 Sierra Leone data beside it.

    .venv/bin/python bench/chains.py                       # 10k demo, SQLite and PostgreSQL
    .venv/bin/python bench/chains.py --size 100000 --backend sqlite

Each pair is drawn for 50 random targets (a random district of a random region, its reference and name), and each
round runs both searches of one random target, interleaved (chained, unchained), `--rounds` times after a warm-up
of every target; the table (printed, and written to bench/results/chains-latest.md) shows the median of
the whole search (count cached, as a running server keeps it: `warm`) and of the search with its count run every
time (`cold`: _total as the first request of a data generation pays it), their minima (least disturbed by whatever
else the machine runs), and the ratios chained / unchained.
Databases are built once and kept (bench/data/chains-<size>.db; PostgreSQL: orgunit_bench_chains_<size>).
"""
from __future__ import annotations

import argparse
import os
import random
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
from server.access.tenancy import AccessScope  # noqa: E402
from server.engine.context import ServerContext, create_context  # noqa: E402
from server.engine import searches  # noqa: E402
from server.engine.caller import TRUSTED, Caller  # noqa: E402
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


TARGETS = 50  # random (region, district) pairs: each round of a pair draws one, for both searches


def _targets(ctx: ServerContext, rng: random.Random, region: str | None) -> list[dict[str, str]]:
    """Random regions (or the one given) and a random district of each, with their references and names."""
    with ctx.db.connect() as conn:
        def rows(sql: str) -> list[Any]:
            return list(conn.exec_driver_sql(sql))
        typed = ("SELECT u.id, u.source_ref, u.name, u.parent_id FROM org_unit u JOIN org_unit_type t "
                 "ON t.id = u.org_unit_type_id WHERE t.short_name = '{}'")
        regions = {str(r[0]): r for r in rows(typed.format("REGION"))}
        districts = [d for d in rows(typed.format("DISTRICT")) if region is None or str(d[3]) == region]
        iaso, sierra = (str(rows(f"SELECT id FROM data_source WHERE slug = '{slug}'")[0][0])
                        for slug in ("iaso", "sierra-leone"))
    picked = [rng.choice(districts) for _ in range(TARGETS)]
    return [{"district": str(d[0]), "district_ref": d[1], "district_name": d[2], "region": str(d[3]),
             "region_ref": regions[str(d[3])][1], "iaso": iaso, "sierra": sierra} for d in picked]


def _search(ctx: ServerContext, caller: Caller, rtype: str, query: str) -> Callable[[], int | None]:
    items = parse_qsl(query)

    def run() -> int | None:
        return searches.search_type(ctx, caller, "http://bench/fhir", rtype, items).get("total")
    return run


def _medians_ms(pairs: list[tuple[Callable[[], object], Callable[[], object]]], rounds: int, rng: random.Random,
                cold: ServerContext | None) -> tuple[float, float, float, float]:
    """Medians and minima of the chained and the unchained search of a random target, run in turn (what slows the
    machine slows both); `cold`: no count cached."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for run, out in zip(rng.choice(pairs), times):
            if cold is not None:  # as the first request after a load: no count, no condition kept
                cold.counts.clear()
                cold.conditions.clear()
            start = time.perf_counter()
            run()
            out.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[0]), statistics.median(times[1]), min(times[0]), min(times[1])


def bench(backend: str, size: int, rounds: int, scoped: bool) -> list[tuple[Any, ...]]:
    url = _url(backend, size)
    if backend == "postgresql":
        _ensure_pg(url)
    ctx = _context(url, size)
    rng = random.Random(size)
    region = _targets(ctx, rng, None)[0]["region"] if scoped else None
    targets = _targets(ctx, rng, region)
    caller = Caller(None, AccessScope(account="default", roots=(f"Location/{region}",))) if scoped else TRUSTED
    rows = []
    for name, ctype, chained, utype, unchained in PAIRS:
        pairs = [(_search(ctx, caller, ctype, chained.format(**t)), _search(ctx, caller, utype, unchained.format(**t)))
                 for t in targets]
        totals = [(a(), b()) for a, b in pairs]  # and a warm-up
        sizes = f"{sum(a or 0 for a, _ in totals)}/{sum(b or 0 for _, b in totals)}"
        rows.append((name, sizes, *_medians_ms(pairs, rounds, rng, None), *_medians_ms(pairs, rounds, rng, ctx)))
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
    started = time.perf_counter()
    out: list[str] = []
    for backend in backends:
        out += [f"{backend}, demo {args.size} + Iaso + DHIS2 Sierra Leone, {'scoped' if args.scoped else 'trusted'}, "
                f"{TARGETS} random targets, median of {args.rounds} (ms)",
                f"{'':40} {'warm (count cached)':^39} {'cold (counted)':^39}",
                f"{'search':28} {'totals':>11} " + f"{'median':>7} {'unch.':>6} {'ratio':>5} {'min':>6} {'unch.':>6} "
                f"{'ratio':>5} " * 2]
        for name, sizes, *t in bench(backend, args.size, args.rounds, args.scoped):
            cells = [f"{a:7.2f} {b:6.2f} {a / b:5.2f} {c:6.2f} {d:6.2f} {c / d:5.2f}"
                     for a, b, c, d in (t[0:4], t[4:8])]
            out.append(f"{name:28} {sizes:>11} " + " ".join(cells))
        out.append("")
    print("\n".join(out))
    report = ROOT / "bench" / "results" / "chains-latest.md"
    report.write_text(f"# Chained and _has searches vs the unchained search of the same targets\n\n"
                      f"`bench/chains.py {' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                      f"{time.perf_counter() - started:.0f} s; ratios are chained / unchained.\n\n```\n"
                      + "\n".join(out) + "```\n")


if __name__ == "__main__":
    main()
