"""A real browser for the tests: Debian's chromium (`make chromium` installs it) driven by playwright-core from npm
(installed at a pinned version into the git-ignored .cache/node by `make chromium`, or by `ensure_playwright`)."""
from __future__ import annotations

import base64
import fcntl
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / ".cache" / "node"
PLAYWRIGHT = "playwright-core@1.65.1"
AXE = "axe-core@4.14.1"  # the accessibility audit injected into every screen (tests/html/audit.mjs)
CHROMIUM = "/usr/bin/chromium"


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (make chromium installs Debian's package)"
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node and npm are missing"
    return None


def require_browser() -> None:
    """A browser test that cannot run fails (`make test` installs what it needs), as the nginx tests do."""
    import pytest

    missing = browser_missing()
    if missing is not None:
        pytest.fail(f"the browser tests cannot run: {missing}")


def ensure_playwright() -> Path:
    """.cache/node with playwright-core and axe-core at the pinned versions (npm install once; one process at a
    time: the test workers share the folder)."""
    NODE_DIR.mkdir(parents=True, exist_ok=True)
    with (NODE_DIR.parent / "node.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for pinned in (PLAYWRIGHT, AXE):
            name, _, wanted = pinned.rpartition("@")
            package = NODE_DIR / "node_modules" / name / "package.json"
            if not package.exists() or json.loads(package.read_text())["version"] != wanted:
                subprocess.run(["npm", "install", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund", "--silent",
                                pinned], check=True, capture_output=True, timeout=600)
    return NODE_DIR / "node_modules"


def run_script(script: Path, env: dict[str, str], timeout: float = 240) -> dict:
    """Run a node script that prints one JSON line of results last; fail with its output otherwise."""
    modules = ensure_playwright()
    done = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=timeout, check=False,
                          env={**env, "NODE_PATH": str(modules), "CHROMIUM": CHROMIUM,
                               "PATH": "/usr/bin:/bin:/usr/local/bin"})
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise AssertionError(f"{script.name} failed ({done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}")
    return dict(json.loads(lines[-1]))


def parts_ran(found: dict[str, Any], *names: str) -> None:
    """The parts of a script (tests/html/common.mjs `parts`) that play an item ran through, else the step each
    stopped at."""
    failed = {name: found["failed"][name] for name in names if name in found["failed"]}
    assert not failed, failed


BOUNDARY = "http://hl7.org/fhir/StructureDefinition/location-boundary-geojson"


def square_boundary(lat: float, lon: float, half: float) -> dict[str, Any]:
    """A Location boundary extension: the square of `half` degrees around (lat, lon), for the explorer's maps."""
    ring = [[lon - half, lat - half], [lon + half, lat - half], [lon + half, lat + half], [lon - half, lat + half],
            [lon - half, lat - half]]
    data = base64.b64encode(json.dumps({"type": "Polygon", "coordinates": [ring]}).encode()).decode()
    return {"url": BOUNDARY, "valueAttachment": {"contentType": "application/geo+json", "data": data}}
