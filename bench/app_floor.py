"""What our app costs alone, without the network: every workload's random targets (bench.datasets.targets) sent
straight to the ASGI app in process (no uvicorn, no socket, no wrk), one at a time on uvloop (as `serve` runs),
JWT on, the audit line written (to a buffer); beside it the ceiling's app (bench/baseline.py, replaying bytes) the same way. The CPU time
per request of each, median of 5 rounds; and ours on targets it was never sent (what its caches kept by values
serve not). What the ceiling costs on the wire beyond its app is the HTTP server's
share (uvicorn, httptools, the socket), which ours pays too: a server adding only its app to the ceiling's would
reach `ceiling on the wire / (ceiling on the wire - ceiling app + our app)`, the last columns (at c=1 and c=16,
taking the ceiling's wire cost per response from bench/results/latest.json).

    .venv/bin/python bench/app_floor.py [--only sqlite:100000] [--requests 2000]
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any
from urllib.parse import urlsplit

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import servers  # noqa: E402
from bench.baseline import build  # noqa: E402
from bench.datasets import Dataset, bench_settings, cli, ensure_dataset, targets  # noqa: E402
from bench.harness import BENCH, DATA  # noqa: E402

DATASETS = [Dataset(100_000, "sqlite"), Dataset(1_000_000, "postgresql")]


def _scope(target: str, token: str) -> dict[str, Any]:
    parts = urlsplit(target)
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
            "path": parts.path, "raw_path": parts.path.encode(), "query_string": parts.query.encode(),
            "root_path": "", "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000),
            "headers": [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {token}".encode()),
                        (b"user-agent", b"wrk")]}


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _per_request(app: Any, paths: list[str], token: str, rounds: int = 5) -> float:
    """Median CPU microseconds per request over `rounds` passes of `paths`; every answer must be 2xx."""
    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    for path in paths[:200]:  # warm-up
        await app(_scope(path, token), _receive, send)
    measured = []
    for _ in range(rounds):
        started = time.process_time()
        for path in paths:
            await app(_scope(path, token), _receive, send)
        measured.append((time.process_time() - started) / len(paths) * 1e6)
    bad = [s for s in statuses if not 200 <= s < 300]
    if bad:
        raise SystemExit(f"non-2xx answers in process: {bad[:5]}")
    return median(measured)


async def _first_sight(app: Any, paths: list[str], token: str, requests: int) -> float | None:
    """CPU microseconds per request of targets the app has never been sent (each distinct target once, after 200
    others warmed it): what a search costs when nothing the server keeps by its values (its statements, its
    count) serves it, as for most requests of clients whose values rarely repeat. None: no more than 200
    distinct targets (a workload of one URL)."""
    distinct = list(dict.fromkeys(paths))
    if len(distinct) < 2:
        return None
    random.Random(2).shuffle(distinct)
    warm, fresh = distinct[:200], distinct[200:200 + requests]
    if not fresh:
        return None

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and not 200 <= message["status"] < 300:
            raise SystemExit(f"non-2xx answer in process: {message['status']}")

    for path in warm:
        await app(_scope(path, token), _receive, send)
    started = time.process_time()
    for path in fresh:
        await app(_scope(path, token), _receive, send)
    return (time.process_time() - started) / len(fresh) * 1e6


async def _lifespan(app: Any) -> tuple[asyncio.Task[None], asyncio.Queue[dict[str, Any]]]:
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get,
                                   outbox.put))
    started = await outbox.get()
    assert started["type"] == "lifespan.startup.complete", started
    return task, inbox


async def measure(dataset: Dataset, settings: Path, requests: int) -> dict[str, dict[str, float]]:
    os.environ.update({"ORGUNIT_FHIR_SETTINGS": str(settings), "ORGUNIT_FHIR_DATABASE_URL": dataset.url,
                       "ORGUNIT_FHIR_ACCESS_LOG": "0"})
    from server.app import create_app
    from server.settings import load_settings
    from server.telemetry.records import Recorder

    token = cli("token", settings=settings, database=dataset.url).strip().splitlines()[-1]
    workloads = targets(dataset, random.Random(dataset.size))
    recordings = DATA / "run" / f"app-floor-{dataset.backend}-{dataset.size}.json"
    with servers.ours(dataset, settings) as (port, _):  # the ceiling replays what ours answered
        servers.record(port, token, workloads, recordings)
    out: dict[str, dict[str, float]] = {}
    for name, paths in workloads.items():  # each workload on a new app: what another one kept serves it not
        ours = create_app(load_settings())
        ours.state.recorder.stream = io.StringIO()  # the audit lines written, not printed
        assert isinstance(ours.state.recorder, Recorder)
        task, inbox = await _lifespan(ours)
        try:
            first = await _first_sight(ours, paths, token, requests)
            sample = [random.Random(1).choice(paths) for _ in range(requests)] if len(paths) > 1 else paths * requests
            out[name] = {"ours_us": round(await _per_request(ours, sample, token), 1),
                         "ceiling_us": round(await _per_request(build(str(recordings)), sample, token), 1),
                         **({"first_us": round(first, 1)} if first is not None else {})}
            shown = f"{first:8.1f} us" if first is not None else "       -   "
            print(f"  {dataset.name:20} {name:12} ours {out[name]['ours_us']:8.1f} us  first sight {shown}  "
                  f"ceiling app {out[name]['ceiling_us']:6.1f} us",
                  file=sys.stderr, flush=True)
        finally:
            await inbox.put({"type": "lifespan.shutdown"})
            await task
    return out


def _wire_us(dataset: str, workload: str, concurrency: int) -> float | None:
    """The ceiling's whole response at this concurrency in the latest full run (us per response), if there is
    one."""
    latest = BENCH / "results" / "latest.json"
    if not latest.exists():
        return None
    for cell in json.loads(latest.read_text())["cells"]:
        if (cell["dataset"], cell["workload"], cell["server"], cell["concurrency"]) == \
                (dataset, workload, "ceiling", concurrency) and cell["rps"]:
            return 1e6 / float(cell["rps"])
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="one dataset, e.g. sqlite:100000")
    parser.add_argument("--requests", type=int, default=2000, help="requests per round (default 2000)")
    args = parser.parse_args()
    datasets = DATASETS
    if args.only:
        backend, size = args.only.split(":")
        datasets = [Dataset(int(size), backend)]
    settings = bench_settings(DATA / "run")
    lines = ["# Our app alone, in process (no network)", "",
             "CPU us per request (median of 5 rounds of random targets, 2,000 per workload: most were sent before "
             "and meet what the server keeps by their values), ours and the ceiling's app; ours again on targets it "
             "was never sent (each distinct target once, on a new app warmed by 200 others: no statement or count "
             "kept for their values serves them); the ceiling's whole response on the wire (us per response at c=1 "
             "and c=16, bench/results/latest.json); the ratio a "
             "server adding only its app to the ceiling's would reach at each (the targets are at c=16).", "",
             "| dataset | workload | ours app us | ours, targets never sent before, us | ceiling app us | "
             "ceiling wire us c=1 / c=16 | reachable c=1 | reachable c=16 |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for dataset in datasets:
        ensure_dataset(dataset, settings)
        for name, m in uvloop.run(measure(dataset, settings, args.requests)).items():  # the loop `serve` runs
            wires = [_wire_us(dataset.name, name, c) for c in (1, 16)]
            reach = [f"{w / (w - m['ceiling_us'] + m['ours_us']):.2f}" if w else "-" for w in wires]
            shown = " / ".join("-" if w is None else f"{w:,.0f}" for w in wires)
            first = f"{m['first_us']:,.1f}" if "first_us" in m else "-"
            lines.append(f"| {dataset.name} | {name} | {m['ours_us']:,.1f} | {first} | {m['ceiling_us']:,.1f} | "
                         f"{shown} | {reach[0]} | {reach[1]} |")
    report = "\n".join(lines) + "\n"
    (BENCH / "results" / "app-floor-latest.md").write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
