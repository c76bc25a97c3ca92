"""What access control costs, and whether an out-of-scope id can be told from an unknown one by its timing.

    .venv/bin/python bench/access.py [--size 10000] [--samples 2000] [--backends sqlite,postgresql]

In process (no HTTP, no wrk: the cost is the engine's), on a demo pyramid of `--size` units (account
`default`) plus the DHIS2 Sierra Leone sample in account `beta`, so account filtering is really applied. Each
row is the median of `--samples` calls, interleaved round-robin so that drift hits every row alike; ratios
are against the baseline measured in the same run: a trusted caller that sees everything (no scope
condition at all). Token rows: verifying a token once (cache miss) against the cached check every request
pays. Results: stdout and bench/results/access-latest.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.engine import reads, searches  # noqa: E402
from server.engine.caller import TRUSTED, Caller, caller_of  # noqa: E402
from server.access.mint import mint_token  # noqa: E402
from server.access.tokens import Authenticator, Principal  # noqa: E402
from server.engine.context import ServerContext, create_context  # noqa: E402
from server.errors import FhirError  # noqa: E402
from server.storage.prerender import refresh  # noqa: E402
from server.declare.rendered import materialized  # noqa: E402
from server.settings import parse_settings  # noqa: E402
from server.extensions import load_extensions  # noqa: E402
from server.storage.db import analyze, create_db_engine  # noqa: E402
from plugins.orgunits.demo import generate_demo  # noqa: E402
from plugins.orgunits.importers.formats import load_file  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DHIS2 = ROOT / "tests" / "fixtures" / "dhis2_sierra_leone_sample.json"
BASE = "http://bench/fhir"
SECRET = "bench-secret-with-at-least-32-bytes!!"


def _principal(**claims: Any) -> Principal:
    return Principal("bench", frozenset({"service_org_units"}), {"permissions": ["service_org_units"], **claims})


def _first_id(ctx: ServerContext, query: list[tuple[str, str]]) -> str:
    bundle = materialized(searches.search_type(ctx, TRUSTED, BASE, "Location", [*query, ("_count", "1")]))
    return str(bundle["entry"][0]["resource"]["id"])


def _calls(ctx: ServerContext) -> dict[str, Callable[[], Any]]:
    facility = _first_id(ctx, [("type", "CSPS"), ("_sort", "-_id")])
    district = _first_id(ctx, [("type", "DISTRICT")])
    beta = _first_id(ctx, [("organization", _org(ctx, "beta"))])
    inside = _first_id(ctx, [("partof:below", district), ("type", "CSPS")])
    # callers as the pipeline admits them: the access_scope hook applied once, before the timed calls
    everything, account = TRUSTED, caller_of(ctx, _principal(account="default"))
    subtree = caller_of(ctx, _principal(account="default", org_unit_roots=[district]))

    def read(caller: Caller, rid: str) -> Callable[[], Any]:
        def call() -> Any:
            try:
                return reads.read(ctx, caller, "Location", rid)
            except FhirError as exc:
                return exc.status
        return call

    def page(caller: Caller) -> Callable[[], Any]:
        return lambda: searches.search_type(ctx, caller, BASE, "Location", [("_count", "100")])

    return {
        "read: sees everything (baseline)": read(everything, facility),
        "read: account-scoped": read(account, facility),
        "read: subtree-scoped": read(subtree, inside),
        "read 404: unknown id, account-scoped": read(account, "987654321"),
        "read 404: other account's id, account-scoped": read(account, beta),
        "read 404: unknown id, subtree-scoped": read(subtree, "987654321"),
        "read 404: outside the subtree, subtree-scoped": read(subtree, facility if facility != inside else beta),
        "page of 100: sees everything (baseline)": page(everything),
        "page of 100: account-scoped": page(account),
        "page of 100: subtree-scoped": page(subtree),
    }


def _org(ctx: ServerContext, account: str) -> str:
    with ctx.db.connect() as conn:
        return str(conn.exec_driver_sql(f"SELECT id FROM data_source WHERE account = '{account}'").scalar())


def _measure(calls: dict[str, Callable[[], Any]], samples: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()  # warm: caches, plans
    for _ in range(samples):
        for name, call in calls.items():
            started = time.perf_counter_ns()
            call()
            times[name].append((time.perf_counter_ns() - started) / 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def _tokens(settings: Any, samples: int) -> dict[str, float]:
    auth = Authenticator(settings)
    fresh = [f"Bearer {mint_token(settings, subject=f's{i}', extra={'account': 'default'})}" for i in range(samples)]
    started = time.perf_counter_ns()
    for header in fresh:
        auth.authenticate(header)
    miss = (time.perf_counter_ns() - started) / 1000 / samples
    started = time.perf_counter_ns()
    for header in fresh:
        auth.authenticate(header)
    hit = (time.perf_counter_ns() - started) / 1000 / samples
    return {"token: first verification (HS256)": miss, "token: cached check": hit}


def _database(backend: str, tmp: Path) -> tuple[str, Callable[[], None]]:
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'access.db'}", lambda: None
    name = f"orgunit_bench_access_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}", drop


def run(backend: str, size: int, samples: int, tmp: Path) -> dict[str, float]:
    url, drop = _database(backend, tmp)
    try:
        settings = parse_settings({"server": {"data_dir": str(tmp / "var")}, "database": {"url": url},
                                   "auth": {"secret": SECRET}})
        writer = create_db_engine(settings, writing=True)
        load_extensions(settings).schema.upgrade(writer)
        generate_demo(writer, size=size)
        load_file(writer, "dhis2", DHIS2, account="beta")
        analyze(writer)  # as `demo` and `load` do
        writer.dispose()
        ctx = create_context(settings)
        refresh(ctx.db, ctx.registry)
        try:
            return {**_measure(_calls(ctx), samples), **_tokens(settings, samples)}
        finally:
            ctx.db.dispose()
    finally:
        drop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    lines = [f"# Access control cost ({args.size} units + DHIS2 sample in a second account; median of "
             f"{args.samples} in-process calls)", "",
             "| backend | call | median us | ratio to baseline |", "|---|---|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            results = run(backend, args.size, args.samples, Path(tmp) / backend)
            base_read = results["read: sees everything (baseline)"]
            base_page = results["page of 100: sees everything (baseline)"]
            for name, value in results.items():
                base = base_page if name.startswith("page") else base_read if name.startswith("read") else None
                ratio = f"{value / base:.2f}" if base else ""
                lines.append(f"| {backend} | {name} | {value:,.1f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results" / "access-latest.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
