"""The benchmark's datasets, built once with `orgunit-fhir demo` and kept (SQLite files in bench/data/, PostgreSQL
databases orgunit_bench_<size>), and the random targets of each workload, drawn from the data itself."""
from __future__ import annotations

import os
import random
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import create_engine, text

from bench.harness import DATA, ROOT

PG_ADMIN = os.environ.get("ORGUNIT_FHIR_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
CLI = ROOT / ".venv" / "bin" / "orgunit-fhir"


@dataclass(frozen=True)
class Dataset:
    size: int
    backend: str  # sqlite | postgresql
    ceiling: bool = True  # drive the ceiling too (ratios); else ours only (growth)
    fhirsnake: bool = False  # drive fhirsnake on reads and _id searches

    @property
    def name(self) -> str:
        return f"{self.backend} {self.size:,}"

    @property
    def url(self) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{DATA / f'sqlite-{self.size}.db'}"
        return PG_ADMIN.rsplit("/", 1)[0] + f"/orgunit_bench_{self.size}"

    @property
    def engine_url(self) -> str:
        return self.url.replace("postgresql://", "postgresql+psycopg://", 1)


def bench_settings(directory: Path) -> Path:
    """The settings every benchmark server and command shares, with the token secret made on first use (a token
    is minted before any server has started on a fresh machine)."""
    directory.mkdir(parents=True, exist_ok=True)
    settings = directory / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {directory / 'var'}\n")
    secret = directory / "var" / "jwt-secret"
    if not secret.exists():
        secret.parent.mkdir(parents=True, exist_ok=True)
        secret.write_text(secrets.token_urlsafe(48), encoding="utf-8")
        secret.chmod(0o600)
    return settings


def cli(*args: str, settings: Path, database: str) -> str:
    done = subprocess.run([str(CLI), *args, "--settings", str(settings), "--database", database],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"orgunit-fhir {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _units(dataset: Dataset) -> int:
    engine = create_engine(dataset.engine_url)
    try:
        with engine.connect() as conn:
            exists = conn.execute(text(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'org_unit'"
                if dataset.backend == "postgresql" else
                "SELECT count(*) FROM sqlite_master WHERE name = 'org_unit'")).scalar()
            return int(conn.execute(text("SELECT count(*) FROM org_unit")).scalar() or 0) if exists else 0
    finally:
        engine.dispose()


def ensure_dataset(dataset: Dataset, settings: Path) -> None:
    """Built once with `demo` (a later run finds it complete and keeps it), at the newest schema, its bodies
    rendered for this code, with fresh planner statistics."""
    if dataset.backend == "postgresql":
        import psycopg

        name = dataset.url.rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
    else:
        DATA.mkdir(parents=True, exist_ok=True)
    built = _units(dataset) != dataset.size
    if built:
        started = time.perf_counter()
        print(f"building {dataset.name} with demo (once; kept for later runs)...", file=sys.stderr, flush=True)
        cli("demo", "--size", str(dataset.size), settings=settings, database=dataset.url)
        print(f"  built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    cli("migrate", settings=settings, database=dataset.url)
    cli("render", settings=settings, database=dataset.url)  # nothing to do unless the code or settings changed
    if dataset.backend == "postgresql":
        import psycopg

        with psycopg.connect(dataset.url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE" if built else "ANALYZE")


TARGETS = 2000  # random targets per workload (the server sees a different one at nearly every request)


def targets(dataset: Dataset, rng: random.Random) -> dict[str, list[str]]:
    """Each workload's targets (paths under /fhir), drawn from the data: random ids, random _after positions,
    real name prefixes (the first three letters of names, each distinct prefix alike), real identifiers, random
    parents (units that have children) for $children and partof:below."""
    engine = create_engine(dataset.engine_url)
    try:
        with engine.connect() as conn:
            top = int(conn.execute(text("SELECT max(id) FROM org_unit")).scalar_one())
            ids = [rng.randint(1, top) for _ in range(TARGETS)]
            prefixes = sorted({p for (p,) in conn.execute(text(
                "SELECT DISTINCT substr(norm, 1, 3) FROM org_unit_name")) if p and len(p) == 3})
            picked = ",".join(str(i) for i in rng.sample(range(1, top + 1), min(TARGETS, top)))
            refs = [r for (r,) in conn.execute(text(f"SELECT source_ref FROM org_unit WHERE id IN ({picked})")) if r]
            parents = [p for (p,) in conn.execute(text(
                "SELECT DISTINCT parent_id FROM org_unit WHERE parent_id IS NOT NULL"))]
    finally:
        engine.dispose()
    rng.shuffle(refs)
    parents = rng.sample(parents, min(TARGETS, len(parents)))
    return {
        "read": [f"/fhir/Location/{i}" for i in ids],
        "id-search": [f"/fhir/Location?_id={i}" for i in ids],
        "page-after": [f"/fhir/Location?status=active&_count=100&_after={rng.randint(1, top)}"
                       for _ in range(TARGETS)],
        "name-prefix": [f"/fhir/Location?name={quote(rng.choice(prefixes))}&_count=20" for _ in range(TARGETS)],
        "identifier": [f"/fhir/Location?identifier={quote(r)}" for r in refs],
        "children": [f"/fhir/Location/{p}/$children" for p in parents],
        "below-page1": [f"/fhir/Location?partof:below={p}" for p in parents],
        "include-page": [f"/fhir/Location?status=active&_count=100&_after={rng.randint(1, top)}"
                         "&_include=Location:organization" for _ in range(TARGETS)],
        "metadata": ["/fhir/metadata"],
    }


# what fhirsnake serves of each workload: reads and _id searches, at its own paths
FHIRSNAKE_WORKLOADS = {"read": "/fhir", "id-search": "/fhir"}
