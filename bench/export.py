"""Bulk Data `$export` end to end: kick-off to the last file downloaded, and the server's memory meanwhile.

    .venv/bin/python bench/export.py [--size 1000000] [--runs 3] [--downloads 4]
    make bench-export

Uses the PostgreSQL dataset bench/run.py builds and keeps (orgunit_bench_<size>: about 12 minutes the first time for
1M), starts `orgunit-fhir serve` on it as bench/run.py does (one worker on one core, JWT on, no access log), then
per run: a system-level kick-off, polls every 0.1 s (a client honouring Retry-After: 1 adds up to a second), downloads every
file of the manifest with `--downloads` parallel streams, counting lines, and checks that the lines add up to the
search totals. It samples the server's RSS every 20 ms (/proc) and prints, per run, the resources per second from
kick-off to the last byte and the peak RSS; results go to stdout and bench/results/export-latest.md.
"""
from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.datasets import Dataset, cli, ensure_dataset  # noqa: E402
from bench.harness import rss_mb  # noqa: E402
from bench.servers import ours  # noqa: E402


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.02)


def request(port: int, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("GET", path, headers=headers)
    answer = conn.getresponse()
    body = answer.read()
    conn.close()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}, body


def download(port: int, path: str, headers: dict[str, str]) -> tuple[int, int]:
    """(lines, bytes) of one file, streamed in 1 MiB reads."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("GET", path, headers={**headers, "Accept": "application/fhir+ndjson"})
    answer = conn.getresponse()
    assert answer.status == 200, answer.status
    lines = size = 0
    while chunk := answer.read(1 << 20):
        lines += chunk.count(b"\n")
        size += len(chunk)
    conn.close()
    return lines, size


def one_run(port: int, token: str, downloads: int) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    status, headers, body = request(port, "/fhir/$export", {**auth, "Prefer": "respond-async",
                                                            "Accept": "application/fhir+json"})
    assert status == 202, body
    poll = urllib.parse.urlsplit(headers["content-location"]).path
    while True:
        status, headers, body = request(port, poll, auth)
        if status == 200:
            break
        assert status == 202, body
        time.sleep(0.1)
    done_at = time.perf_counter()
    manifest = json.loads(body)
    with ThreadPoolExecutor(downloads) as pool:
        got = list(pool.map(lambda o: download(port, urllib.parse.urlsplit(o["url"]).path, auth), manifest["output"]))
    ended = time.perf_counter()
    lines = sum(g[0] for g in got)
    assert lines == sum(o["count"] for o in manifest["output"])
    return {"resources": lines, "bytes": sum(g[1] for g in got), "files": len(got), "seconds": ended - started,
            "export_seconds": done_at - started,
            "by_type": {t: sum(o["count"] for o in manifest["output"] if o["type"] == t)
                        for t in {o["type"] for o in manifest["output"]}}}


def totals(port: int, token: str, types: list[str]) -> dict[str, int]:
    out = {}
    for rtype in types:
        status, _, body = request(port, f"/fhir/{rtype}?_count=0", {"Authorization": f"Bearer {token}"})
        out[rtype] = json.loads(body)["total"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--downloads", type=int, default=4)
    parser.add_argument("--file-resources", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        settings = Path(tmp) / "settings.yaml"
        settings.write_text(f"server:\n  data_dir: {tmp}/var\n  audit_log: false\n"
                            f"bulk:\n  directory: {tmp}/bulk\n  file_resources: {args.file_resources}\n"
                            "  settle_seconds: 0\n", encoding="utf-8")
        dataset = Dataset(args.size, "postgresql")  # the one bench/run.py builds and keeps
        url = dataset.url
        ensure_dataset(dataset, settings)
        with ours(dataset, settings) as (port, server):
            token = cli("token", settings=settings, database=url).strip().splitlines()[-1]
            idle = rss_mb(server.pid)
            runs = []
            for i in range(args.runs):
                sampler = Sampler(server.pid)
                sampler.start()
                run = one_run(port, token, args.downloads)
                sampler.stop.set()
                sampler.join()
                run["peak_rss_mb"] = sampler.peak
                runs.append(run)
                print(f"run {i + 1}: {run['resources']:,} resources ({run['bytes'] / 1e6:,.0f} MB, {run['files']} "
                      f"files) in {run['seconds']:.2f} s = {run['resources'] / run['seconds']:,.0f} resources/s end "
                      f"to end (manifest after {run['export_seconds']:.2f} s); server peak RSS "
                      f"{run['peak_rss_mb']:.0f} MB", flush=True)
            expected = totals(port, token, sorted(runs[0]["by_type"]))
            assert runs[0]["by_type"] == expected, (runs[0]["by_type"], expected)
    best = max(r["resources"] / r["seconds"] for r in runs)
    report = (f"# $export benchmark\n\n{args.size:,} units on PostgreSQL ({url.rsplit('/', 1)[1]}), one worker, "
              f"{args.downloads} parallel downloads, {args.file_resources:,} resources per file.\n\n"
              "| run | resources | MB | seconds | resources/s | manifest after (s) | server peak RSS (MB) |\n"
              "|---|---|---|---|---|---|---|\n" +
              "".join(f"| {i + 1} | {r['resources']:,} | {r['bytes'] / 1e6:,.0f} | {r['seconds']:.2f} | "
                      f"{r['resources'] / r['seconds']:,.0f} | {r['export_seconds']:.2f} | {r['peak_rss_mb']:.0f} |\n"
                      for i, r in enumerate(runs)) +
              f"\nBest: {best:,.0f} resources/s end to end; server RSS idle {idle:.0f} MB. Line counts equal "
              f"the search totals ({expected}).\n")
    out = ROOT / "bench" / "results" / "export-latest.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
