"""The workforce load's facility look-ups (issue 41 item 2), on SQLite and PostgreSQL: resolving the facility codes of
a workers file over the demo pyramid, three ways in the same run, and the proof package's `load workers-json` end to
end.

    .venv/bin/python bench/lookups.py [--size 20000] [--roles 3000] [--backend sqlite --backend postgresql]

- raw SQL: `SELECT source_ref, id FROM org_unit WHERE source_ref IN (...)`, the query a package ran on the org-unit
  plugin's tables before the look-up API (the baseline: what it replaced);
- one look-up per code: `call.lookup.identified("Location", code)` for each distinct code;
- the batch: `call.lookup.identified_all("Location", codes)`.

Random codes among the demo's units (seeded), each role 1 or 2 facilities. Builds its databases once (bench/data/
lookups-<size>.db, PostgreSQL orgunit_lookups_<size>) with `orgunit-fhir demo`; prints each timing, its ratio to the
raw SQL, and the load's seconds; results go to stdout and bench/results/lookups-latest.md."""
from __future__ import annotations

import argparse
import argparse as _argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SITE = ROOT / "tests" / "proof" / "site"
sys.path.insert(0, str(SITE))

from sqlalchemy import bindparam, select  # noqa: E402

from bench.datasets import PG_ADMIN  # noqa: E402
from bench.harness import DATA  # noqa: E402
from plugins.orgunits.tables import org_unit  # noqa: E402
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


def run(backend: str, size: int, roles: int, seed: int) -> dict[str, float]:
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
        call = load_call(settings, engine, "", _argparse.Namespace(), Progress("bench"))
        call.lookup.ids("Location", {"_id": "1"})  # the context made before timing
        timings: dict[str, float] = {}
        started = time.perf_counter()
        with engine.connect() as conn:
            query = select(org_unit.c.source_ref, org_unit.c.id).where(
                org_unit.c.source_ref.in_(bindparam("codes", expanding=True)))
            raw = dict(conn.execute(query, {"codes": codes}).all())
        timings["raw SQL"] = time.perf_counter() - started
        started = time.perf_counter()
        each = {c: call.lookup.identified("Location", c) for c in codes}
        timings["one look-up per code"] = time.perf_counter() - started
        started = time.perf_counter()
        batch = call.lookup.identified_all("Location", codes)
        timings["identified_all"] = time.perf_counter() - started
        assert each == batch == {c: str(raw[c]) for c in codes}, "the three ways disagree"
        path = var / "workers.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        for name in ("load workers-json (first)", "load workers-json (again, unchanged)"):
            started = time.perf_counter()
            subprocess.run([*CLI, "load", "workers-json", str(path), "--settings", str(settings_path)], check=True,
                           env=_env(), capture_output=True)
            timings[name] = time.perf_counter() - started
        timings["codes"] = len(codes)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20000)
    parser.add_argument("--roles", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"))
    args = parser.parse_args()
    lines = [f"# Facility look-ups of a workers load: {args.roles:,} roles over the {args.size:,}-unit demo", "",
             "| backend | what | seconds | ratio to raw SQL |", "|---|---|---|---|"]
    for backend in args.backend or ("sqlite", "postgresql"):
        timings = run(backend, args.size, args.roles, args.seed)
        codes = int(timings.pop("codes"))
        for what, seconds in timings.items():
            ratio = f"{seconds / timings['raw SQL']:.0f}x" if not what.startswith("load") else ""
            lines.append(f"| {backend} | {what}{f' ({codes:,} codes)' if what != 'raw SQL' and not what.startswith('load') else ''} "
                         f"| {seconds:.3f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "bench" / "results" / "lookups-latest.md"
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
