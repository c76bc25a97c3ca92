"""A quick comparison while working on the request path: ours and the ceiling on a few workloads of one dataset,
c=16 (and c=1 with --c1), without the walk, the floor or fhirsnake. Not the benchmark of record (bench/run.py)."""
from __future__ import annotations

import argparse
import random
import sys

from bench import servers
from bench.datasets import Dataset, bench_settings, cli, ensure_dataset, targets
from bench.harness import DATA, drive, ensure_wrk


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="sqlite:100000")
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--workloads", default="read,id-search,page-after,name-prefix,metadata")
    parser.add_argument("--no-ceiling", action="store_true")
    parser.add_argument("--c1", action="store_true")
    args = parser.parse_args()
    backend, size = args.only.split(":")
    dataset = Dataset(int(size), backend)
    settings = bench_settings(DATA / "run")
    ensure_dataset(dataset, settings)
    wrk = ensure_wrk()
    token = cli("token", settings=settings, database=dataset.url).strip().splitlines()[-1]
    workloads = targets(dataset, random.Random(dataset.size))
    chosen = {k: v for k, v in workloads.items() if k in args.workloads.split(",")}
    recordings = DATA / "run" / f"quick-{backend}-{size}.json"
    levels = (1, 16) if args.c1 else (16,)
    with servers.ours(dataset, settings) as (port, _):
        servers.record(port, token, chosen, recordings)
        for name, paths in chosen.items():
            drive(wrk, port, paths, token, 16, 1)
            for c in levels:
                m = drive(wrk, port, paths, token, c, args.seconds)
                print(f"ours     {name:12} c={c:<2} {m.rps:8,.0f} req/s p99 {m.p99_ms:6.2f} non2xx {m.non_2xx}",
                      flush=True)
    if not args.no_ceiling:
        with servers.ceiling(recordings) as top:
            for name, paths in chosen.items():
                drive(wrk, top, paths, token, 16, 1)
                for c in levels:
                    m = drive(wrk, top, paths, token, c, args.seconds)
                    print(f"ceiling  {name:12} c={c:<2} {m.rps:8,.0f} req/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
