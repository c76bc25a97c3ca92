"""Benchmark orgunit-fhir as its users load it: every request a different target, drawn from the data.

    .venv/bin/python bench/run.py                 # the full run (make bench): SQLite 100k, PostgreSQL 10k and 1M
    .venv/bin/python bench/run.py --quick         # SQLite 10k, 3 s per cell: a smoke test of the harness
    .venv/bin/python bench/run.py --only postgresql:1000000 --seconds 5

For each dataset it starts our server (JWT on, one worker pinned to one core, uvloop + httptools, no access log)
and, where ratios are wanted, the ceiling (bench/baseline.py: a bare Starlette app answering every target with
bytes our server gave for a target of the same kind); on SQLite 100k also fhirsnake 1.1.0 from PyPI (reads and
_id searches on the same Locations). wrk runs on the other core, at concurrency 1 and 16, drawing a random target
for every request (random ids and _after positions, real name prefixes and identifiers, random parents); the
cells of one workload alternate between the servers. Every cell reports its non-2xx answers and socket errors,
and the run fails when any is not 0. Then `--workers 2` on both cores, a full `next` walk, the server's memory and
what one statement costs alone. Results: a table on stdout, bench/results/<stamp>.json and .md, and latest.*.
Datasets are built with `orgunit-fhir demo` once and kept (bench/data/, databases orgunit_bench_<size>).
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report, servers  # noqa: E402
from bench.datasets import FHIRSNAKE_WORKLOADS, Dataset, bench_settings, cli, ensure_dataset, targets  # noqa: E402
from bench.floor import floor  # noqa: E402
from bench.harness import BENCH, DATA, Cell, drive, ensure_wrk, rss_mb  # noqa: E402

FULL = [Dataset(100_000, "sqlite", fhirsnake=True), Dataset(10_000, "postgresql", ceiling=False),
        Dataset(1_000_000, "postgresql")]
QUICK = [Dataset(10_000, "sqlite", fhirsnake=True)]


def full_walk(port: int, token: str, budget_s: float) -> tuple[float, int, bool]:
    """Follow `next` with _count=100 from the first page: resources/s, resources seen, whether it finished."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    path: str | None = "/fhir/Location?_count=100"
    seen, started = 0, time.perf_counter()
    while path and time.perf_counter() - started < budget_s:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        bundle = json.loads(conn.getresponse().read())
        seen += len(bundle.get("entry", []))
        nxt = next((link["url"] for link in bundle["link"] if link["relation"] == "next"), None)
        path = urlsplit(nxt).path + "?" + urlsplit(nxt).query if nxt else None
    elapsed = time.perf_counter() - started
    conn.close()
    return seen / elapsed, seen, path is None


def _cell(wrk: str, dataset: Dataset, workload: str, server: str, port: int, paths: list[str], token: str | None,
          concurrency: int, seconds: float) -> Cell:
    m = drive(wrk, port, paths, token, concurrency, seconds)
    cell = Cell(dataset.name, workload, server, concurrency, m.rps, m.p50_ms, m.p99_ms, m.requests, m.non_2xx,
                m.errors)
    flag = f"  NON-2XX {m.non_2xx} ERRORS {m.errors}" if m.non_2xx or m.errors else ""
    print(f"  {dataset.name:20} {workload:12} c={concurrency:<2} {server:14} {m.rps:9,.0f} req/s  "
          f"p50 {m.p50_ms:7.2f} ms  p99 {m.p99_ms:7.2f} ms{flag}", file=sys.stderr, flush=True)
    return cell


def run_dataset(dataset: Dataset, wrk: str, seconds: float, walk_budget: float, settings: Path,
                workers2: bool) -> tuple[list[Cell], dict[str, Any]]:
    cells: list[Cell] = []
    token = cli("token", settings=settings, database=dataset.url).strip().splitlines()[-1]
    workloads = targets(dataset, random.Random(dataset.size))
    recordings = DATA / "run" / f"recorded-{dataset.backend}-{dataset.size}.json"
    with servers.ours(dataset, settings) as (port, proc):
        servers.record(port, token, workloads, recordings)
        snake_root = servers.export_locations(dataset, port, token) if dataset.fhirsnake else None
        with servers.ceiling(recordings) if dataset.ceiling else nullcontext() as top:
            with servers.fhirsnake(snake_root) if snake_root else nullcontext() as snake:
                for name, paths in workloads.items():
                    drive(wrk, port, paths, token, 16, 1)  # warm-up, not counted
                    for concurrency in (1, 16):
                        cells.append(_cell(wrk, dataset, name, "ours", port, paths, token, concurrency, seconds))
                        if top is not None:
                            cells.append(_cell(wrk, dataset, name, "ceiling", top, paths, token, concurrency,
                                               seconds))
                        if snake is not None and name in FHIRSNAKE_WORKLOADS:
                            cells.append(_cell(wrk, dataset, name, "fhirsnake", snake,
                                               [p.removeprefix(FHIRSNAKE_WORKLOADS[name]) for p in paths], None,
                                               concurrency, seconds))
        rate, walked, finished = full_walk(port, token, walk_budget)
        extra: dict[str, Any] = {"rss_mb": round(rss_mb(proc.pid), 1), "peak_rss_mb": round(rss_mb(proc.pid, "VmHWM"), 1),
                                 "walk_resources_per_s": round(rate), "walked": walked, "walk_finished": finished}
    print(f"  full walk: {rate:,.0f} resources/s ({walked:,} seen, finished={finished}); "
          f"server RSS {extra['rss_mb']} MB (peak {extra['peak_rss_mb']})", file=sys.stderr)
    if workers2:
        with servers.ours(dataset, settings, workers=2) as (port, _):
            for name in ("read", "page-after"):
                drive(wrk, port, workloads[name], token, 16, 1)
                cells.append(_cell(wrk, dataset, name, "ours-2-workers", port, workloads[name], token, 16, seconds))
    return cells, extra


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="SQLite 10k only, 3 s per cell")
    parser.add_argument("--only", help="one dataset, e.g. postgresql:1000000 (with its ceiling)")
    parser.add_argument("--seconds", type=float, default=8, help="seconds per wrk cell (default 8)")
    parser.add_argument("--walk-seconds", type=float, default=120, help="time budget of the full walk")
    parser.add_argument("--no-fhirsnake", action="store_true", help="leave fhirsnake out")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.quick:
        datasets, seconds = QUICK, 3.0
    elif args.only:
        backend, size = args.only.split(":")
        datasets, seconds = [Dataset(int(size), backend, fhirsnake=backend == "sqlite")], args.seconds
    else:
        datasets, seconds = FULL, args.seconds
    if args.no_fhirsnake:
        datasets = [Dataset(d.size, d.backend, d.ceiling, False) for d in datasets]
    wrk = ensure_wrk()
    tmp = DATA / "run"
    tmp.mkdir(parents=True, exist_ok=True)
    settings = bench_settings(tmp)
    for dataset in datasets:  # all built first: building is not measured
        ensure_dataset(dataset, settings)
    cells: list[Cell] = []
    extras: dict[str, dict[str, Any]] = {}
    for dataset in datasets:
        got, extra = run_dataset(dataset, wrk, seconds, args.walk_seconds, settings, workers2=dataset.ceiling)
        extra["floor"] = floor(dataset, settings)
        cells += got
        extras[dataset.name] = extra
    names = [d.name for d in datasets]
    checks = report.targets(cells, extras, next((n for n in names if n.startswith("sqlite") and "10,000" not in n),
                                                names[0] if args.quick else None),
                            next((d.name for d in datasets if d.backend == "postgresql" and d.ceiling), None),
                            next((d.name for d in datasets if d.backend == "postgresql" and not d.ceiling), None))
    elapsed = time.perf_counter() - started
    markdown = "\n\n".join([report.cells_table(cells), report.extras_table(cells, extras), report.targets_table(checks),
                            f"Whole run: {elapsed / 60:.1f} min, {seconds:g} s per cell, one worker on one core "
                            f"(taskset), wrk -t1 on the other, {len(cells)} cells."])
    print(markdown)
    results = BENCH / "results"
    results.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    payload = {"stamp": stamp, "quick": args.quick, "seconds": seconds, "cells": [asdict(c) for c in cells],
               "datasets": extras, "targets": [{"target": n, "measured": m, "met": ok} for n, m, ok in checks],
               "elapsed_s": round(elapsed)}
    for name in (stamp, "latest"):
        (results / f"{name}.json").write_text(json.dumps(payload, indent=2))
        (results / f"{name}.md").write_text(f"# Benchmark {stamp}\n\n{markdown}\n")
    bad = [c for c in cells if c.non_2xx or c.errors]
    if bad:
        print("\nFAILED: cells with non-2xx answers or socket errors:\n" + "\n".join(
            f"  {c.dataset} {c.workload} c={c.concurrency} {c.server}: {c.non_2xx} non-2xx, {c.errors} errors"
            for c in bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
