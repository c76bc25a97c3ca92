"""The sync torture: two operators reload edited files into two data sources (renames, moves, deletions with
--delete-missing, additions) while an mCSD Update Client follows the documented sync point over HTTP, against a
live `orgunit-fhir serve`, on each backend; after every round the client's copy is compared with the registry.

    .venv/bin/python bench/sync.py [--rounds 3] [--seconds 30] [--facilities 2000,1200] [--backends sqlite,postgresql]

The operators write in this process through the load path (`import_units`, as `orgunit-fhir load` does); each load
pauses mid-way (`--pause`) so loads overlap the client's walks. The client walks
`_history?_since=<sync point>&_count=10` to its end, following next links, and takes the first page's
`meta.lastUpdated` as its next `_since` (README: Sync). Printed per round: loads, versions written, walks, pages,
entries, entries served twice within a walk, entries a walk's total announced but no page served, and the divergence
(units missing, stale, extra) after the round, which must all be zero; results also go to bench/results/sync-latest.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench.datasets import PG_ADMIN  # noqa: E402
from bench.harness import BENCH, free_port, get, stop, wait_for  # noqa: E402
from server.access.mint import mint_token  # noqa: E402
from server.settings import load_settings  # noqa: E402
from server.storage.db import create_db_engine  # noqa: E402
from tests.support.sync import Mirror, Operator, divergence, play_round, registry  # noqa: E402


def _database(backend: str, tmp: Path) -> tuple[str, str | None]:
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'sync.db'}", None
    name = f"orgunit_sync_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}", name


def _drop(name: str | None) -> None:
    if name is not None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def run(backend: str, rounds: int, seconds: float, facilities: list[int], pause: float) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as where:
        tmp = Path(where)
        url, pg_name = _database(backend, tmp)
        settings_file = tmp / "settings.yaml"
        settings_file.write_text(f"server:\n  data_dir: {tmp / 'var'}\nauth:\n  secret: {uuid.uuid4().hex * 2}\n"
                                 f"database:\n  url: {url}\n", encoding="utf-8")
        settings = load_settings(settings_file)
        command = str(BENCH.parent / ".venv" / "bin" / "orgunit-fhir")
        subprocess.run([command, "migrate", "--settings", str(settings_file)], check=True, capture_output=True)
        port = free_port()
        proc = subprocess.Popen([command, "serve", "--settings",
                                 str(settings_file), "--port", str(port), "--no-demo", "--no-access-log"],
                                stdout=subprocess.DEVNULL, stderr=(tmp / "serve.log").open("wb"))
        engine = None
        try:
            try:
                wait_for(port, proc)
            except SystemExit:
                print((tmp / "serve.log").read_text(errors="replace")[-2000:], file=sys.stderr)
                raise
            token = mint_token(settings, account="sync")
            engine = create_db_engine(settings, writing=True)
            origin = f"http://127.0.0.1:{port}"

            def fetch(path: str) -> dict[str, Any]:
                status, _, body = get(port, path.removeprefix(origin), token)
                if status != 200:
                    raise SystemExit(f"GET {path}: {status} {body[:300]!r}")
                return json.loads(body)  # type: ignore[no-any-return]

            operators = [Operator(engine, f"source{i}", facilities=n, seed=i, pause_s=pause)
                         for i, n in enumerate(facilities)]
            mirror = Mirror(fetch, count=10)
            figures = []
            for number in range(1, rounds + 1):
                before = (sum(o.loads for o in operators), sum(o.versions for o in operators), mirror.walks,
                          mirror.pages, mirror.entries, mirror.duplicated, mirror.skipped)
                play_round(operators, mirror, seconds, lambda: time.sleep(1.1))  # the server looks once a second
                after = (sum(o.loads for o in operators), sum(o.versions for o in operators), mirror.walks,
                         mirror.pages, mirror.entries, mirror.duplicated, mirror.skipped)
                row = dict(zip(("loads", "versions", "walks", "pages", "entries", "duplicated", "skipped"),
                               (b - a for a, b in zip(before, after))))
                row.update(round=number, backend=backend, units=len(registry(engine)),
                           divergence=divergence(mirror, registry(engine)) or "none")
                print(json.dumps(row), flush=True)
                figures.append(row)
            return figures
        finally:
            stop(proc)
            if engine is not None:
                engine.dispose()
            _drop(pg_name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--facilities", default="2000,1200", help="facilities of each data source (two operators)")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds each load holds mid-way")
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    rows = [row for backend in args.backends.split(",") for row in
            run(backend, args.rounds, args.seconds, [int(n) for n in args.facilities.split(",")], args.pause)]
    keys = ("backend", "round", "loads", "versions", "walks", "pages", "entries", "duplicated", "skipped", "units",
            "divergence")
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
    (BENCH / "results").mkdir(exist_ok=True)
    (BENCH / "results" / "sync-latest.md").write_text(
        f"# bench/sync.py {' '.join(sys.argv[1:])}\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    if any(row["divergence"] != "none" or row["duplicated"] or row["skipped"] for row in rows):
        raise SystemExit("the client's copy diverged")


if __name__ == "__main__":
    main()
