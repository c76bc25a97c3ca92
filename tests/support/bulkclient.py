"""A real Bulk Data client for the tests: SMART Health IT's smart-fetch (PyPI, the version pinned in
tests/support/bulkclient/requirements.txt), whose BulkExporter kicks off, polls (honouring Retry-After and
X-Progress), downloads the output, error and deleted files, then DELETEs the job.

`install()` puts it into the git-ignored .cache/bulk-client/ (pip --target, no dependencies: cumulus-fhir-support
and httpx come with the test dependencies) when the requirements changed, so a clean clone needs nothing else.
`run_export()` runs it in a subprocess against a live server (its CLI takes patient types only, so the module's
`__main__` drives its exporter with Location and Organization), with the `_typeFilter` queries given (smart-fetch
quotes a comma within one as %2C and joins them with commas)."""
from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).resolve().parent / "bulkclient" / "requirements.txt"
CACHE = ROOT / ".cache" / "bulk-client"


def install() -> Path:
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    stamp = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    with (CACHE.parent / "bulk-client.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = CACHE / ".orgunit-fhir-stamp"
        if not marker.exists() or marker.read_text() != stamp:
            shutil.rmtree(CACHE, ignore_errors=True)
            done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                                   "--no-deps", "--target", str(CACHE), "-r", str(REQUIREMENTS)],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"installing the bulk client failed:\n{done.stdout}\n{done.stderr}")
            marker.write_text(stamp)
    return CACHE


def run_export(base: str, token: str, folder: Path, types: list[str], since: str | None = None,
               type_filters: Sequence[str] = ()) -> dict[str, list[str]]:
    """Export `types` from `base` into `folder` with smart-fetch (`type_filters`: its `Type?query` filters); each
    type's lines (the files it downloaded)."""
    install()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CACHE), str(ROOT)]), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "tests.support.bulkclient", base, token, str(folder), ",".join(types),
                           since or "", json.dumps(list(type_filters))],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise AssertionError(f"smart-fetch failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    found: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.ndjson")):
        found.setdefault(path.name.split(".")[0], []).extend(path.read_text(encoding="utf-8").splitlines())
    return found


def deleted(folder: Path) -> set[str]:
    """`Type/id` of the deletions smart-fetch downloaded (folder deleted/)."""
    out: set[str] = set()
    for path in sorted((folder / "deleted").glob("*.ndjson")):
        for line in path.read_text(encoding="utf-8").splitlines():
            out |= {e["request"]["url"] for e in json.loads(line)["entry"]}
    return out


async def _main(base: str, token: str, folder: str, types: list[str], since: str | None,
                type_filters: list[str]) -> None:
    import cumulus_fhir_support as cfs
    from smart_fetch import bulk_utils, filtering

    client = cfs.FhirClient(base, types, bearer_token=token)
    async with client:
        filters = filtering.Filters(types, type_filters=type_filters, client=client, since=since,
                                    since_mode=filtering.SinceMode.UPDATED)
        await bulk_utils.perform_bulk(fhir_url=base, bulk_client=client, filters=filters, group="", workdir=folder)


if __name__ == "__main__":
    base_url, bearer, out, wanted, after, queries = sys.argv[1:7]
    asyncio.run(_main(base_url, bearer, out, wanted.split(","), after or None, json.loads(queries)))
