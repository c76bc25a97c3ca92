"""Costly searches beside reads: does a read keep its latency while 8 costly searches run?

    .venv/bin/python bench/costly.py [--size 30000] [--backend sqlite|postgresql] [--seconds 20]

Builds (once, kept) the demo dataset bench/run.py would, starts `orgunit-fhir serve` on it as bench/run.py does (one
worker pinned to one core, JWT on, no access log, the default settings: 2 costly searches at once, 10 s of waiting
for a turn), then for `--seconds`: 8 clients each sending, again and again, the costly search of issue 25 (31
`name:contains` parameters of 100 one-character values each, drawn from the data's names: about 6.7 KB), and 4 clients sending
reads, cheap searches (a real 3-letter name prefix, `_count=5&_total=none`) and `$children`, every request a random
target drawn from the data. Reported: the readers' p50/p95/max and error count, alone first (a baseline) and beside
the costly searches, and what the costly searches got (200, 503 too-costly). Results: stdout and
bench/results/costly-<backend>-latest.md. Not a unit test: a measurement (the target: the readers' p95 under 0.5 s).
"""
from __future__ import annotations

import argparse
import http.client
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from bench.datasets import Dataset, cli, ensure_dataset, targets  # noqa: E402
from bench.harness import BENCH  # noqa: E402
from bench.servers import ours  # noqa: E402

COSTLY_CLIENTS, READERS = 8, 4
PARAMS, VALUES = 31, 100  # the shape: 3,100 :contains values


def letters(dataset: Dataset) -> list[str]:
    """The letters and digits of real names (one-character :contains values, as the issue's 6.7 KB search)."""
    engine = create_engine(dataset.engine_url)
    try:
        with engine.connect() as conn:
            names = [n for (n,) in conn.execute(text("SELECT norm FROM org_unit_name LIMIT 5000")) if n]
    finally:
        engine.dispose()
    return sorted({c for name in names for c in name if c.isascii() and c.isalnum()})


def costly_path(pieces: list[str], rng: random.Random) -> str:
    query = "&".join(f"name:contains={quote(','.join(rng.choice(pieces) for _ in range(VALUES)), safe=',')}"
                     for _ in range(PARAMS))
    return f"/fhir/Location?{query}&_total=none"


class Client(threading.Thread):
    def __init__(self, port: int, token: str, paths: list[str], until: float, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.port, self.headers, self.paths, self.until, self.rng = port, {"Authorization": f"Bearer {token}"}, \
            paths, until, rng
        self.latencies: list[float] = []
        self.statuses: Counter[int] = Counter()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        while time.monotonic() < self.until:
            started = time.monotonic()
            try:
                conn.request("GET", self.rng.choice(self.paths), headers=self.headers)
                answer = conn.getresponse()
                answer.read()
                status = answer.status
                if answer.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            except OSError:
                status = 0
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            self.latencies.append(time.monotonic() - started)
            self.statuses[status] += 1
        conn.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def phase(port: int, token: str, reads: list[str], costly: list[str], seconds: float, rng: random.Random
          ) -> tuple[list[Client], list[Client]]:
    until = time.monotonic() + seconds
    heavy = [Client(port, token, costly, until, random.Random(rng.random())) for _ in range(COSTLY_CLIENTS if costly
                                                                                        else 0)]
    for client in heavy:
        client.start()
    time.sleep(0.5 if costly else 0)  # the costly ones are in
    readers = [Client(port, token, reads, until, random.Random(rng.random())) for _ in range(READERS)]
    for client in readers:
        client.start()
    for client in readers + heavy:
        client.join()
    return readers, heavy


def summary(name: str, clients: list[Client]) -> str:
    latencies = [x for c in clients for x in c.latencies]
    statuses = sum((c.statuses for c in clients), Counter())
    return (f"| {name} | {len(latencies)} | {percentile(latencies, 0.5) * 1000:.0f} | "
            f"{percentile(latencies, 0.95) * 1000:.0f} | {max(latencies, default=0) * 1000:.0f} | "
            f"{', '.join(f'{s}: {n}' for s, n in sorted(statuses.items()))} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=30_000)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    rng = random.Random(25)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Path(tmp) / "settings.yaml"
        settings.write_text(f"server:\n  data_dir: {tmp}/var\n  audit_log: false\n", encoding="utf-8")
        dataset = Dataset(args.size, args.backend, ceiling=False)
        ensure_dataset(dataset, settings)
        drawn = targets(dataset, rng)
        reads = drawn["read"] + [p.replace("&_count=20", "&_count=5&_total=none") for p in drawn["name-prefix"]] + \
            drawn["children"]
        pieces = letters(dataset)
        costly = [costly_path(pieces, rng) for _ in range(50)]
        with ours(dataset, settings) as (port, _):
            token = cli("token", settings=settings, database=dataset.url).strip().splitlines()[-1]
            alone, _ = phase(port, token, reads, [], args.seconds / 2, rng)
            beside, heavy = phase(port, token, reads, costly, args.seconds, rng)
    beside_all = [x for c in beside for x in c.latencies]
    met = percentile(beside_all, 0.95) < 0.5 and all(set(c.statuses) == {200} for c in alone + beside)
    lines = [f"# Costly searches beside reads: {dataset.name}, {args.seconds:g} s", "",
             f"{READERS} readers (random reads, name-prefix searches with `_total=none`, `$children`); "
             f"{COSTLY_CLIENTS} clients sending the issue-25 costly search ({PARAMS} x {VALUES} `name:contains` "
             f"values, {len(costly[0]):,} bytes) in a loop; default settings (2 costly at once per worker, 10 s wait).",
             "", "| clients | requests | p50 ms | p95 ms | max ms | statuses |", "|---|---|---|---|---|---|",
             summary("readers alone", alone), summary("readers beside 8 costly", beside),
             summary("the costly searches", heavy), "",
             f"Readers' p95 under 0.5 s beside the costly searches, every read 200: **{'met' if met else 'NOT met'}**"]
    report = "\n".join(lines) + "\n"
    print(report)
    (BENCH / "results").mkdir(exist_ok=True)
    (BENCH / "results" / f"costly-{args.backend}-latest.md").write_text(report, encoding="utf-8")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
