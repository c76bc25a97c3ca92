"""`orgunit-fhir check-data` on the 100,000-unit demo, on SQLite and PostgreSQL: how long the data-quality report takes
end to end (the command, as an operator runs it), and what it finds.

    .venv/bin/python bench/check_data.py [--size 100000] [--runs 3] [--backend sqlite --backend postgresql]

Builds its own databases once with `orgunit-fhir demo` (bench/data/check-data-<size>.db, PostgreSQL
orgunit_check_data_<size>: never the other benchmarks' datasets, whose schema another branch may own) and keeps them;
prints per backend the seconds of each run and the report's counts; results go to stdout and
bench/results/check-data-latest.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.datasets import CLI, PG_ADMIN, bench_settings  # noqa: E402
from bench.harness import DATA  # noqa: E402


def database(backend: str, size: int) -> str:
    if backend == "sqlite":
        DATA.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{DATA / f'check-data-{size}.db'}"
    import psycopg

    name = f"orgunit_check_data_{size}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"


def run(*args: str, settings: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args, "--settings", str(settings), "--database", url], capture_output=True,
                          text=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"))
    args = parser.parse_args()
    settings = bench_settings(Path(tempfile.mkdtemp(prefix="check-data-bench-")))
    lines = [f"# check-data on the {args.size:,}-unit demo", "", "| backend | runs (s) | units | errors | warnings |",
             "|---|---|---|---|---|"]
    for backend in args.backend or ["sqlite", "postgresql"]:
        url = database(backend, args.size)
        counted = run("check-data", "--json", settings=settings, url=url)
        if counted.returncode not in (0, 1) or json.loads(counted.stdout or "{}").get("units") != args.size:
            print(f"building {backend} {args.size:,} with demo (once; kept)...", file=sys.stderr, flush=True)
            done = run("demo", "--size", str(args.size), settings=settings, url=url)
            assert done.returncode == 0, done.stderr
        seconds: list[float] = []
        report: dict[str, object] = {}
        for _ in range(args.runs):
            started = time.perf_counter()
            done = run("check-data", "--json", settings=settings, url=url)
            seconds.append(round(time.perf_counter() - started, 1))
            assert done.returncode in (0, 1), done.stderr
            report = json.loads(done.stdout)
        checks = report["checks"]
        assert isinstance(checks, list)
        errors = sum(c["count"] for c in checks if c["severity"] == "error")
        warnings = sum(c["count"] for c in checks if c["severity"] == "warning")
        lines.append(f"| {backend} | {', '.join(map(str, seconds))} | {report['units']:,} | {errors:,} | "
                     f"{warnings:,} |")
        print(lines[-1], flush=True)
    (ROOT / "bench" / "results" / "check-data-latest.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
