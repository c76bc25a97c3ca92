"""The servers a cell drives: ours (`orgunit-fhir serve`, JWT on, uvloop + httptools, no access log), the ceiling
(bench/baseline.py: a bare Starlette app answering every target with recorded bytes of the same kind) and fhirsnake
1.1.0 from PyPI (a FastAPI app answering reads from a dict, in its own venv: never a dependency of ours)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from bench.datasets import Dataset
from bench.harness import BENCH, DATA, SERVER_CORE, free_port, get, pinned, stop, wait_for

PYTHON = sys.executable
FHIRSNAKE = "fhirsnake==1.1.0"
FHIRSNAKE_VENV = BENCH / ".fhirsnake-venv"
SAMPLES = 64  # responses recorded per workload, which the ceiling replays


@contextmanager
def ours(dataset: Dataset, settings: Path, workers: int = 1) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    command = [str(BENCH.parent / ".venv" / "bin" / "orgunit-fhir"), "serve", "--settings", str(settings),
               "--database", dataset.url, "--port", str(port), "--no-demo", "--no-access-log",
               "--workers", str(workers)]
    proc = subprocess.Popen([*pinned(SERVER_CORE if workers == 1 else None), *command],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port, proc)
        yield port, proc
    finally:
        stop(proc)


def record(port: int, token: str, workloads: dict[str, list[str]], recordings: Path) -> None:
    """SAMPLES answers of each workload, and which of them the ceiling gives for each target (by a hash of the
    target: the same target, the same bytes). Every answer must be a 200."""
    samples: dict[str, list[dict[str, str | int]]] = {}
    for name, paths in workloads.items():
        samples[name] = []
        for path in paths[:SAMPLES]:
            status, ctype, body = get(port, path, token)
            if status != 200:
                raise SystemExit(f"{path}: status {status}: {body[:400]!r}")
            samples[name].append({"status": status, "content_type": ctype, "body": body.decode("utf-8")})
    answers = {path: [name, int(hashlib.sha1(path.encode()).hexdigest(), 16) % len(samples[name])]
               for name, paths in workloads.items() for path in paths}
    recordings.write_text(json.dumps({"samples": samples, "answers": answers}))


@contextmanager
def ceiling(recordings: Path) -> Iterator[int]:
    port = free_port()
    proc = subprocess.Popen([*pinned(SERVER_CORE), PYTHON, str(BENCH / "baseline.py"), str(recordings), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port, proc)
        yield port
    finally:
        stop(proc)


def ensure_fhirsnake() -> Path:
    """fhirsnake in a venv of its own (with uvloop and httptools, as ours runs), made once."""
    python = FHIRSNAKE_VENV / "bin" / "python"
    if not (FHIRSNAKE_VENV / ".installed").exists():
        print(f"installing {FHIRSNAKE} in {FHIRSNAKE_VENV} (once)...", file=sys.stderr, flush=True)
        subprocess.run([PYTHON, "-m", "venv", str(FHIRSNAKE_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", FHIRSNAKE, "uvloop", "httptools"], check=True)
        (FHIRSNAKE_VENV / ".installed").touch()
    return python


def export_locations(dataset: Dataset, port: int, token: str) -> Path:
    """Every Location of the dataset as a file, where fhirsnake reads them (once per dataset)."""
    root = DATA / f"fhirsnake-{dataset.backend}-{dataset.size}"
    done = root / ".exported"
    if done.exists():
        return root
    folder = root / "resources" / "Location"
    folder.mkdir(parents=True, exist_ok=True)
    path: str | None = "/fhir/Location?_count=100&_total=none"
    while path:
        status, _, body = get(port, path, token)
        if status != 200:
            raise SystemExit(f"exporting Locations for fhirsnake: {path}: {status}")
        bundle = json.loads(body)
        for entry in bundle.get("entry", []):
            resource = entry["resource"]
            (folder / f"{resource['id']}.json").write_text(json.dumps(resource))
        nxt = next((link["url"] for link in bundle["link"] if link["relation"] == "next"), None)
        path = urlsplit(nxt).path + "?" + urlsplit(nxt).query if nxt else None
    done.touch()
    return root


@contextmanager
def fhirsnake(root: Path) -> Iterator[int]:
    python = ensure_fhirsnake()
    package = next((FHIRSNAKE_VENV / "lib").glob("python*/site-packages/fhirsnake"))
    port = free_port()
    proc = subprocess.Popen([*pinned(SERVER_CORE), str(python), "-m", "uvicorn", "main:app", "--port", str(port),
                             "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "error"],
                            cwd=root, env={"PYTHONPATH": str(package), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port, proc, seconds=600)  # it reads every file before it listens
        while get(port, "/Location?_id=1", None)[0] != 200:  # its startup hook has loaded them all
            time.sleep(0.5)
        yield port
    finally:
        stop(proc)
