"""The workforce load's facility look-ups (issue 41 item 2), on SQLite and PostgreSQL: resolving the facility codes of
a workers file over the demo pyramid, three ways in the same run, and the proof package's `load workers-json` against
the same load resolving its codes as it did before the look-up API.

    .venv/bin/python bench/lookups.py [--size 20000] [--roles 3000] [--rounds 3] [--backend sqlite --backend postgresql]

Resolving the 3,998 distinct codes of 3,000 roles (random units of the demo, seeded; each role 1 or 2 facilities):
- raw SQL: `SELECT source_ref, id FROM org_unit WHERE source_ref IN (...)`, the query a package ran on the org-unit
  plugin's tables before the look-up API (the baseline: what it replaced);
- one look-up per code: `call.lookup.identified("Location", code)` for each distinct code (once: it is slow);
- the batch: `call.lookup.identified_all("Location", codes)`, and the statements it sends.

The load, in process (`LoadFormat.load(call)` with a fresh LoadCall: the look-up's server context is made inside the
timing, as a CLI load makes it), each way `--rounds` times, alternating, the median kept:
- "look-up": the package's loader (healthcare_services.workers.load_workers: `identified_all`);
- "before the look-up API": the same loader resolving its codes with the raw SQL above (`load_resolving`, a variant
  that lives here, not in the package);
each first (the workers' tables emptied: 3,000 roles inserted) and again (the same file: unchanged). The ratio of
the two is the issue's "no slower than before". Every timing starts after a full collection of the garbage collector
(the previous timing's garbage would fall on whichever ran next). Then the same two ways end to end, `orgunit-fhir
load workers-json` (a process each: start-up, schema check, planner statistics and pre-rendering included; the
variant is the same command with the format's loader swapped: `bench/lookups_before.py load workers-json ...`).

Builds its databases once (bench/data/lookups-<size>.db, PostgreSQL orgunit_lookups_<size>) with `orgunit-fhir demo`;
results go to stdout and bench/results/lookups-latest.md."""
from __future__ import annotations

import argparse
import argparse as _argparse
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SITE = ROOT / "tests" / "proof" / "site"
sys.path.insert(0, str(SITE))

from sqlalchemy import Engine, bindparam, delete, event, select  # noqa: E402

from bench.datasets import PG_ADMIN  # noqa: E402
from bench.lookups_before import before_lookups, raw_sql  # noqa: E402
from bench.harness import DATA  # noqa: E402
from healthcare_services import tables as workforce  # noqa: E402
from healthcare_services.workers import load_workers  # noqa: E402
from plugins.orgunits.tables import org_unit  # noqa: E402
from server.declare.extensions import LoadCall, LoadReport  # noqa: E402
from server.cli.data import load_call  # noqa: E402
from server.declare.progress import Progress  # noqa: E402
from server.settings import parse_settings  # noqa: E402
from server.storage.db import writing_engine  # noqa: E402

CLI = [sys.executable, "-m", "server.cli"]


def database(backend: str, size: int) -> str:
    if backend == "sqlite":
        DATA.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{DATA / f'lookups-{size}.db'}"
    import psycopg

    name = f"orgunit_lookups_{size}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SITE)])}


def _settings_file(url: str, var: Path) -> Path:
    path = var / "settings.yaml"
    path.write_text(f"server: {{data_dir: {var}}}\ndatabase: {{url: \"{url}\"}}\n"
                    "plugins: {healthcare_services: {enabled: true}}\n", encoding="utf-8")
    return path


LOADERS: dict[str, Callable[[LoadCall], LoadReport]] = {"look-up": load_workers,
                                                         "before the look-up API": before_lookups}


def _emptied(engine: Engine) -> None:
    """The workers' tables emptied: the next load inserts every role (a first load)."""
    with engine.begin() as conn:
        for table in (workforce.role_history_location, workforce.role_location, workforce.role_history,
                      workforce.role, workforce.practitioner_history, workforce.practitioner):
            conn.execute(delete(table))


def _statements(engine: Engine, work: Callable[[], Any]) -> int:
    """The statements `work` sends to `engine`'s database."""
    sent: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        work()
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return len(sent)


def run(backend: str, size: int, roles: int, seed: int, rounds: int) -> tuple[dict[str, float], dict[str, int]]:
    var = DATA / f"lookups-{backend}"
    var.mkdir(parents=True, exist_ok=True)
    url = database(backend, size)
    settings_path = _settings_file(url, var)
    settings = parse_settings({"server": {"data_dir": str(var)}, "database": {"url": url},
                               "plugins": {"healthcare_services": {"enabled": True}}})
    with writing_engine(settings) as engine:
        with engine.connect() as conn:
            try:
                units = conn.execute(select(org_unit.c.source_ref)).scalars().all()
            except Exception:  # noqa: BLE001 - no schema yet
                units = []
        if len(units) != size:
            subprocess.run([*CLI, "demo", "--size", str(size), "--settings", str(settings_path)], check=True,
                           env=_env(), capture_output=True)
            with engine.connect() as conn:
                units = conn.execute(select(org_unit.c.source_ref)).scalars().all()
        draw = random.Random(seed)
        pool = sorted(units)
        data = {"practitioners": [{"id": i, "name": f"Worker {i}"} for i in range(1, roles + 1)],
                "roles": [{"id": i, "practitioner": i, "facilities": draw.sample(pool, draw.choice((1, 2)))}
                          for i in range(1, roles + 1)]}
        codes = sorted({c for r in data["roles"] for c in r["facilities"]})
        path = var / "workers.json"
        path.write_text(json.dumps(data), encoding="utf-8")

        def call(at: str = "") -> LoadCall:
            return load_call(settings, engine, at, _argparse.Namespace(), Progress("bench"))

        lookup = call().lookup
        lookup.ids("Location", {"_id": "1"})  # the context made before timing
        timings: dict[str, list[float]] = {}

        def timed(what: str, work: Callable[[], Any]) -> Any:
            gc.collect()  # each way starts from the same collector state: its own garbage decides its collections
            started = time.perf_counter()
            found = work()
            timings.setdefault(what, []).append(time.perf_counter() - started)
            return found

        each = timed("one look-up per code", lambda: {c: lookup.identified("Location", c) for c in codes})
        for _ in range(rounds):
            made = call()
            raw = timed("raw SQL", lambda: raw_sql(made, codes))
            batch = timed("identified_all", lambda: lookup.identified_all("Location", codes))
            assert each == batch == raw, "the three ways disagree"
        # the batch's own statements: the fewest of two runs (a snapshot of the data expiring meanwhile adds its own)
        counts = {"codes": len(codes), "statements": min(
            _statements(lookup.ctx.db, lambda: lookup.identified_all("Location", codes)) for _ in range(2))}
        for n in range(rounds):
            for name in (LOADERS if n % 2 == 0 else reversed(LOADERS)):
                _emptied(engine)
                first = timed(f"load, {name}: first", lambda name=name: LOADERS[name](call(str(path))))
                again = timed(f"load, {name}: again, unchanged", lambda name=name: LOADERS[name](call(str(path))))
                assert (first.inserted, again.unchanged) == (roles, roles), (first, again)
        for n in range(rounds):
            for name in (LOADERS if n % 2 == 0 else reversed(LOADERS)):
                command = [*CLI, "load", "workers-json", str(path), "--settings", str(settings_path)]
                if name != "look-up":  # the same command, the format's loader swapped for the one before
                    command = [sys.executable, str(Path(__file__).resolve().parent / "lookups_before.py"),
                               *command[3:]]
                _emptied(engine)
                for when in ("first", "again, unchanged"):
                    timed(f"orgunit-fhir load, {name}: {when}", lambda command=command: subprocess.run(
                        command, check=True, env=_env(), capture_output=True))
    return {what: statistics.median(seconds) for what, seconds in timings.items()}, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20000)
    parser.add_argument("--roles", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each timing but the slow ones (median kept)")
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"))
    args = parser.parse_args()
    lines = [f"# Facility look-ups of a workers load: {args.roles:,} roles over the {args.size:,}-unit demo", "",
             f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} cores (shared), "
             f"median of {args.rounds} rounds (one look-up per code: once); "
             "`.venv/bin/python bench/lookups.py`.", "",
             "| backend | what | seconds | ratio |", "|---|---|---|---|"]
    for backend in args.backend or ("sqlite", "postgresql"):
        timings, counts = run(backend, args.size, args.roles, args.seed, args.rounds)
        codes = f"{counts['codes']:,} codes"
        for what, seconds in timings.items():
            if "load, look-up: " in what:
                base = timings[what.replace("load, look-up: ", "load, before the look-up API: ")]
                ratio = f"{seconds / base:.2f}x before the look-up API"
            elif "load, " in what:
                ratio = "1x"
            else:
                ratio = f"{seconds / timings['raw SQL']:.1f}x raw SQL"
            shown = {"raw SQL": f"raw SQL ({codes})", "one look-up per code": f"one look-up per code ({codes})",
                     "identified_all": f"identified_all ({codes}: {counts['statements']} statements)"}.get(what, what)
            lines.append(f"| {backend} | {shown} | {seconds:.3f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "bench" / "results" / "lookups-latest.md"
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
