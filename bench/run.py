"""Benchmark orgunit-fhir against the physical ceiling (a bare Starlette app replaying our own bytes).

    .venv/bin/python bench/run.py                 # the full run: 10k, 100k (SQLite and PostgreSQL), 1M (PostgreSQL)
    .venv/bin/python bench/run.py --quick         # 10k on SQLite, 3 s per cell: a smoke test of the harness

For every dataset it starts our server (JWT on, one worker, uvloop + httptools, no access log), records
each workload's responses, starts the baseline replaying exactly those bytes with the same flags, then
drives both with wrk at concurrency 1 and 16, interleaving A/B cells. Datasets are built with
`orgunit-fhir demo` once and kept (bench/data/ for SQLite, databases orgunit_bench_<n> on PostgreSQL).
Results: a table on stdout, bench/results/<stamp>.json and .md (and latest.*).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PYTHON = sys.executable
PG_ADMIN = os.environ.get("ORGUNIT_FHIR_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass(frozen=True)
class Dataset:
    size: int
    backend: str
    baseline: bool = True  # drive the baseline too (ratios); else ours only (growth, backends)

    @property
    def url(self) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{BENCH / 'data' / f'sqlite-{self.size}.db'}"
        return PG_ADMIN.rsplit("/", 1)[0] + f"/orgunit_bench_{self.size}"


@dataclass
class Cell:
    workload: str
    size: int
    backend: str
    server: str
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, settings: Path, database: str) -> str:
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "orgunit-fhir"), *args, "--settings", str(settings),
                           "--database", database], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"orgunit-fhir {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    print("installing wrk (Debian package)...", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    return shutil.which("wrk") or "wrk"


def ensure_dataset(dataset: Dataset, settings: Path) -> None:
    """Build it once with `demo`; a later run finds it complete and reuses it."""
    from sqlalchemy import create_engine, func, select, text

    if dataset.backend == "postgresql":
        import psycopg

        name = dataset.url.rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
        engine_url = dataset.url.replace("postgresql://", "postgresql+psycopg://")
    else:
        (BENCH / "data").mkdir(parents=True, exist_ok=True)
        engine_url = dataset.url
    engine = create_engine(engine_url)
    try:
        with engine.connect() as conn:
            exists = conn.execute(text("SELECT count(*) FROM information_schema.tables WHERE table_name = 'org_unit'")
                                  if dataset.backend == "postgresql" else
                                  text("SELECT count(*) FROM sqlite_master WHERE name = 'org_unit'")).scalar()
            have = conn.execute(select(func.count()).select_from(text("org_unit"))).scalar() if exists else 0
    finally:
        engine.dispose()
    built = have != dataset.size
    if built:
        started = time.perf_counter()
        print(f"building {dataset.backend} {dataset.size:,} with demo...", file=sys.stderr, flush=True)
        cli("demo", "--size", str(dataset.size), settings=settings, database=dataset.url)
        print(f"  built in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    cli("migrate", settings=settings, database=dataset.url)
    cli("render", settings=settings, database=dataset.url)  # nothing to do unless the code or settings changed
    if dataset.backend == "postgresql":
        import psycopg

        with psycopg.connect(dataset.url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE" if built else "ANALYZE")


def wait_for(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"server on :{port} exited")
            time.sleep(0.1)
    raise SystemExit(f"server on :{port} did not start")


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of the server and its children (VmHWM: the peak)."""
    total = 0
    for p in [pid, *map(int, subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split())]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(f"{field}:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total / 1024


def get(port: int, path: str, token: str) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, response.getheader("content-type") or "", body


def first_id(port: int, token: str, query: str) -> str:
    _, _, body = get(port, f"/fhir/Location?{query}&_count=1&_elements=id", token)
    return json.loads(body)["entry"][0]["resource"]["id"]


def next_link(port: int, token: str, path: str) -> str:
    _, _, body = get(port, path, token)
    url = next(l["url"] for l in json.loads(body)["link"] if l["relation"] == "next")
    return urlsplit(url).path + "?" + urlsplit(url).query


def workloads(port: int, token: str, size: int, rng: random.Random) -> dict[str, list[str]]:
    """Each workload: the request paths wrk cycles through (several for the random reads)."""
    region = first_id(port, token, "type=REGION")
    district = first_id(port, token, "type=DISTRICT")
    _, _, body = get(port, "/fhir/Location?status=active&_count=0", token)
    active = json.loads(body)["total"]
    _, _, body = get(port, "/fhir/Location?_sort=-_lastUpdated&_count=1&_elements=id", token)
    newest = json.loads(body)["entry"][0]["resource"]["meta"]["lastUpdated"]
    reads = [f"/fhir/Location/{rng.randint(1, size)}" for _ in range(200)]
    names = [f"/fhir/Location?name={p}&_count=100" for p in ("ko", "se", "ba", "di", "ka", "to", "ma", "sa")]
    identifier_ids = [str(rng.randint(1, size)) for _ in range(20)]
    identifiers = []
    for rid in identifier_ids:
        _, _, body = get(port, f"/fhir/Location/{rid}", token)
        ref = next((i["value"] for i in json.loads(body).get("identifier", []) if i.get("use") == "official"), None)
        if ref:
            identifiers.append(f"/fhir/Location?identifier={ref}")
    # the last full page, as a client paging with `next` reaches it (a keyset link: no offset to walk)
    deep = next_link(port, token, f"/fhir/Location?status=active&_count=100&_skip={max(0, active - 200)}")
    return {
        "read": reads,
        "name-prefix": names,
        "identifier": identifiers,
        "status-page1": ["/fhir/Location?status=active&_count=100"],
        "status-deep": [deep],
        "children": [f"/fhir/Location/{district}/$children"],
        "below-page1": [f"/fhir/Location?partof:below={region}&_count=100"],
        "history-since": [f"/fhir/Location/_history?_since={newest}"],
        "metadata": ["/fhir/metadata"],
    }


def record(port: int, token: str, paths: dict[str, list[str]]) -> dict[str, Any]:
    out = {}
    for group in paths.values():
        for path in group:
            status, ctype, body = get(port, path, token)
            if status != 200:
                raise SystemExit(f"{path}: status {status}: {body[:300]!r}")
            out[path] = {"status": status, "content_type": ctype, "body": body.decode("utf-8")}
    return out


LUA = """
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do paths[#paths + 1] = line end
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i], {["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")})
end
"""


def parse_wrk(output: str) -> tuple[float, float, float]:
    def ms(text: str) -> float:
        value, unit = re.match(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p50 = ms(re.search(r"\s50%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    p99 = ms(re.search(r"\s99%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    return rps, p50, p99


def drive(wrk: str, port: int, paths: list[str], token: str, concurrency: int, seconds: int) -> tuple[float, float, float]:
    paths_file = BENCH / "data" / "paths.txt"
    paths_file.write_text("\n".join(paths) + "\n")
    script = BENCH / "data" / "paths.lua"
    script.write_text(LUA)
    env = {**os.environ, "BENCH_PATHS": str(paths_file), "BENCH_TOKEN": token}
    done = subprocess.run([wrk, "-t1", f"-c{concurrency}", f"-d{seconds}s", "--latency", "-s", str(script),
                           f"http://127.0.0.1:{port}"], capture_output=True, text=True, env=env)
    return parse_wrk(done.stdout)


def full_walk(port: int, token: str, budget_s: float) -> tuple[float, int, bool]:
    """Follow `next` with _count=100 from the first page: resources/s, resources seen, whether it finished."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    path: str | None = "/fhir/Location?_count=100"
    seen, started = 0, time.perf_counter()
    while path and time.perf_counter() - started < budget_s:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        bundle = json.loads(conn.getresponse().read())
        seen += len(bundle.get("entry", []))
        nxt = next((l["url"] for l in bundle["link"] if l["relation"] == "next"), None)
        path = urlsplit(nxt).path + "?" + urlsplit(nxt).query if nxt else None
    elapsed = time.perf_counter() - started
    conn.close()
    return seen / elapsed, seen, path is None


def run_dataset(dataset: Dataset, wrk: str, seconds: int, walk_budget: float, tmp: Path) -> tuple[list[Cell], dict[str, Any]]:
    settings = tmp / "settings.yaml"
    ours_port, base_port = free_port(), free_port()
    ours = subprocess.Popen([str(ROOT / ".venv" / "bin" / "orgunit-fhir"), "serve", "--settings", str(settings),
                             "--database", dataset.url, "--port", str(ours_port), "--no-demo", "--no-access-log"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    baseline = None
    try:
        wait_for(ours_port, ours)
        token = cli("token", settings=settings, database=dataset.url).strip().splitlines()[-1]
        paths = workloads(ours_port, token, dataset.size, random.Random(dataset.size))
        recordings = tmp / f"recorded-{dataset.backend}-{dataset.size}.json"
        recordings.write_text(json.dumps(record(ours_port, token, paths)))
        if dataset.baseline:
            baseline = subprocess.Popen([PYTHON, str(BENCH / "baseline.py"), str(recordings), str(base_port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(base_port, baseline)
        cells: list[Cell] = []
        servers = [("ours", ours_port), ("baseline", base_port)] if dataset.baseline else [("ours", ours_port)]
        for name, group in paths.items():
            for concurrency in (1, 16):
                for server, port in servers:  # interleaved A/B
                    rps, p50, p99 = drive(wrk, port, group, token, concurrency, seconds)
                    cells.append(Cell(name, dataset.size, dataset.backend, server, concurrency, rps, p50, p99))
                    print(f"  {dataset.backend:10} {dataset.size:>9,} {name:14} c={concurrency:<2} {server:8} "
                          f"{rps:9.0f} req/s  p50 {p50:7.2f} ms  p99 {p99:7.2f} ms", file=sys.stderr, flush=True)
        walk_rate, walked, finished = full_walk(ours_port, token, walk_budget)
        extra = {"rss_mb": round(rss_mb(ours.pid), 1), "peak_rss_mb": round(rss_mb(ours.pid, "VmHWM"), 1),
                 "walk_resources_per_s": round(walk_rate),
                 "walked": walked, "walk_finished": finished}
        print(f"  full walk: {walk_rate:,.0f} resources/s ({walked:,} seen, finished={finished}); "
              f"server RSS {extra['rss_mb']} MB", file=sys.stderr)
        return cells, extra
    finally:
        for proc in (ours, baseline):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)


def database_floor(dataset: Dataset, settings: Path, samples: int = 2000) -> dict[str, float]:
    """What the database alone costs per request, measured in this process with the server's own statements
    (median microseconds): one round trip (SELECT 1), the read of a random id, a page of 100 stored bodies."""
    from statistics import median

    from sqlalchemy import text

    from server.context import create_context
    from server.search.request import parse_search
    from server.search.sql import body_page_query
    from server.settings import load_settings

    ctx = create_context(load_settings(settings, dataset.url))
    provider = ctx.registry.get("Location")
    page = body_page_query(provider, parse_search(provider, [("status", "active"), ("_count", "100")],  # type: ignore[arg-type]
                                                  default_count=20, max_count=100), {}, extra_row=1)
    rng = random.Random(7)
    runs = {"round_trip_us": lambda c: c.execute(text("SELECT 1")).all(),
            "read_us": lambda c: ctx.reads["Location"].run(c, id=rng.randint(1, dataset.size)).all(),
            "page_us": lambda c: c.execute(page).all()}
    out: dict[str, float] = {}
    try:
        with ctx.db.connect() as conn:
            for name, run in runs.items():
                times = []
                for i in range(samples if name != "page_us" else samples // 4):
                    started = time.perf_counter()
                    run(conn)
                    times.append(time.perf_counter() - started)
                out[name] = round(median(times[len(times) // 10:]) * 1e6)
    finally:
        ctx.db.dispose()
    return out


def table(cells: list[Cell], extras: dict[str, dict[str, Any]]) -> str:
    base = {(c.workload, c.size, c.backend, c.concurrency): c for c in cells if c.server == "baseline"}
    lines = ["| workload | size | backend | c | ours req/s | p50 ms | p99 ms | baseline req/s | ratio |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for c in cells:
        if c.server != "ours":
            continue
        b = base.get((c.workload, c.size, c.backend, c.concurrency))
        ratio = f"{c.rps / b.rps:.2f}" if b else "-"
        lines.append(f"| {c.workload} | {c.size:,} | {c.backend} | {c.concurrency} | {c.rps:,.0f} | {c.p50_ms:.2f} | "
                     f"{c.p99_ms:.2f} | {f'{b.rps:,.0f}' if b else '-'} | {ratio} |")
    lines += ["", "| dataset | server RSS MB (peak) | full walk resources/s | walked | finished |",
              "|---|---:|---:|---:|---|"]
    lines += [f"| {k} | {v['rss_mb']} ({v['peak_rss_mb']}) | {v['walk_resources_per_s']:,} | {v['walked']:,} | "
              f"{v['walk_finished']} |" for k, v in extras.items()]
    lines += ["", "The database alone, per request (median, measured in-process with the server's own statements):", "",
              "| dataset | round trip (SELECT 1) us | read of a random id us | page of 100 stored bodies us |",
              "|---|---:|---:|---:|"]
    lines += [f"| {k} | {v['database_floor']['round_trip_us']} | {v['database_floor']['read_us']} | "
              f"{v['database_floor']['page_us']} |" for k, v in extras.items() if "database_floor" in v]
    return "\n".join(lines)


PAGES = ("name-prefix", "status-page1", "status-deep", "children", "below-page1", "history-since")


def targets(cells: list[Cell], extras: dict[str, dict[str, Any]], big: Dataset, small: Dataset) -> list[tuple[str, str, bool]]:
    """The issue's targets, each checked on this run: (target, measured, met)."""
    def cell(workload: str, dataset: Dataset, concurrency: int, server: str = "ours") -> Cell | None:
        return next((c for c in cells if (c.workload, c.size, c.backend, c.concurrency, c.server) ==
                     (workload, dataset.size, dataset.backend, concurrency, server)), None)

    def ratio(workload: str, concurrency: int) -> float | None:
        ours, base = cell(workload, big, concurrency), cell(workload, big, concurrency, "baseline")
        return ours.rps / base.rps if ours and base else None

    out: list[tuple[str, str, bool]] = []
    floor = (extras.get(f"{big.backend} {big.size:,}") or {}).get("database_floor", {})

    def bound(workload: str, key: str) -> str:
        """At c=1: the ratio a server would reach that added nothing to the baseline but this one statement."""
        base = cell(workload, big, 1, "baseline")
        if not base or key not in floor:
            return ""
        return f" (ceiling with one database statement: {1 / (1 + base.rps * floor[key] / 1e6):.2f})"

    for concurrency in (1, 16):
        r = ratio("read", concurrency)
        if r is not None:
            out.append((f"read by id at {big.size:,}, c={concurrency}: >= 0.5 of baseline",
                        f"{r:.2f}" + (bound("read", "read_us") if concurrency == 1 else ""), r >= 0.5))
    for workload in PAGES:
        for concurrency in (1, 16):
            r = ratio(workload, concurrency)
            if r is not None:
                out.append((f"{workload} (page of 100) at {big.size:,}, c={concurrency}: >= 0.35 of baseline",
                            f"{r:.2f}" + (bound(workload, "page_us") if concurrency == 1 and workload.startswith("status")
                                          else ""), r >= 0.35))
    workloads = sorted({c.workload for c in cells}) if small != big else []
    for workload in workloads:
        for concurrency in (1, 16):
            a, b = cell(workload, small, concurrency), cell(workload, big, concurrency)
            if a and b:
                growth = b.p99_ms / a.p99_ms
                out.append((f"{workload} c={concurrency}: p99 at {big.size:,} <= 2x p99 at {small.size:,}",
                            f"{b.p99_ms:.2f} / {a.p99_ms:.2f} ms = {growth:.2f}x", growth <= 2.0))
    for concurrency in (1, 16):
        first, deep = cell("status-page1", big, concurrency), cell("status-deep", big, concurrency)
        if first and deep:
            cost = first.rps / deep.rps
            out.append((f"deep page costs <= 1.5x page 1 at {big.size:,}, c={concurrency}",
                        f"{cost:.2f}x", cost <= 1.5))
    extra = extras.get(f"{big.backend} {big.size:,}")
    if extra:
        out.append((f"full walk of {big.size:,}: >= 10,000 resources/s", f"{extra['walk_resources_per_s']:,}/s "
                    f"({extra['walked']:,} walked)", extra["walk_resources_per_s"] >= 10_000 and extra["walk_finished"]))
        out.append((f"server RSS serving {big.size:,}: <= 250 MB", f"{extra['peak_rss_mb']} MB peak",
                    extra["peak_rss_mb"] <= 250))
    return out


FULL = [Dataset(10_000, "sqlite", baseline=False), Dataset(100_000, "sqlite", baseline=False),
        Dataset(10_000, "postgresql", baseline=False), Dataset(1_000_000, "postgresql")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10k on SQLite only, 3 s per cell")
    parser.add_argument("--only", help="one dataset, e.g. postgresql:1000000 (with its baseline)")
    parser.add_argument("--seconds", type=int, default=10, help="seconds per wrk cell (default 10)")
    parser.add_argument("--walk-seconds", type=float, default=300, help="time budget of the full walk")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.quick:
        datasets, seconds = [Dataset(10_000, "sqlite")], 3
    elif args.only:
        backend, size = args.only.split(":")
        datasets, seconds = [Dataset(int(size), backend)], args.seconds
    else:
        datasets, seconds = FULL, args.seconds
    wrk = ensure_wrk()
    tmp = BENCH / "data" / "run"
    tmp.mkdir(parents=True, exist_ok=True)
    settings = tmp / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp / 'var'}\n")
    for dataset in datasets:  # all built first: building is not measured, and runs nothing else
        ensure_dataset(dataset, settings)
    cells: list[Cell] = []
    extras: dict[str, dict[str, Any]] = {}
    for dataset in datasets:
        got, extra = run_dataset(dataset, wrk, seconds, args.walk_seconds, tmp)
        extra["database_floor"] = database_floor(dataset, settings)
        cells += got
        extras[f"{dataset.backend} {dataset.size:,}"] = extra
    markdown = table(cells, extras)
    checks = targets(cells, extras, datasets[-1], next((d for d in datasets if d.backend == datasets[-1].backend
                                                        and d.size < datasets[-1].size), datasets[-1]))
    markdown += "\n\n| target | measured | met |\n|---|---|---|\n" + "\n".join(
        f"| {name} | {measured} | {'yes' if met else '**no**'} |" for name, measured, met in checks)
    elapsed = time.perf_counter() - started
    markdown += f"\n\nWhole run: {elapsed / 60:.1f} min, {seconds} s per cell, one worker, wrk -t1 on loopback."
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
