"""The sync torture: operators change the registry while six consumers follow README's Sync loop against a live
`orgunit-fhir serve`, on each backend; after every round each consumer's copy is compared with what its token reads.

    .venv/bin/python bench/sync.py [--rounds 4] [--seconds 8] [--facilities 300,200] [--backends sqlite,postgresql]

Operators (in this process, through what the command line calls: `import_units` as `load --delete-missing
--version N` does, `remove_source` as `data-sources remove --force [--purge]`, `set_default_version` as `versions
set-default`): two data sources of account `sync` reloaded from edited files for `--seconds` each round (renames,
moves between districts: in and out of a subtree; retypes CSPS <-> CMA: in and out of a query; deletions; additions;
each load paused mid-way, `--pause`), and a data source of account `solo`. Beside them, each round, one after the
other: the solo account's last data source removed (odd rounds) or loaded again (even rounds); a reload of `source0`
into a new `--version` with `--delete-missing`, then `source0` pinned to its older version (odd rounds) or unpinned
(`newest`, even rounds, then reloaded into a new version); `source1` removed, and once every client synced that
removal (README: a purge publishes nothing), purged and reloaded (new ids).

Consumers (each with its own token, syncing one after the other while the operators work, then once more after the
server's sync point passed the last write):
- `history`: the account's token, `Location/_history?_since=<sync point>&_count=50` (`--count`);
- `subtree`: a token with `org_unit_roots` = two districts of source0, the same walk;
- `query`: a token whose SMART scope holds a query, `system/Location.rs?type=CMA`, the same walk;
- `solo`: the solo account's token, the same walk;
- `bulk`: the account's token, `$export?_type=Location`, then `_since=<transactionTime>` (kick-off answered 503
  with Retry-After while SQLite's writer holds its lock: asked again after it);
- `bulk-filter`: the same with `_typeFilter=Location?type=CMA`.
The truth of a consumer is `Location?<its query>` walked with its token (its scope applied) once the operators
stopped and the server looked again; a copy must hold exactly those ids at those versionIds. Printed per round and
client: syncs, pages (history pages, Bulk files), entries (history entries; Bulk resources and deletions), entries
served twice within a sync (`duplicated`), entries announced (a walk's total, a file's count) but not served
(`skipped`), ids readable, and the divergence (missing, stale, extra); duplicated, skipped and divergence must be
zero. `superseded` (the query-scoped client only): versions its walk's first page counted that a write after the
walk's sync point superseded (such a token is shown current versions only, its query being proven on the current
row: the successor is in its next walk), not a loss. Results also go to bench/results/sync-latest.md.
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench.datasets import PG_ADMIN  # noqa: E402
from bench.harness import BENCH, free_port, stop, wait_for  # noqa: E402
from server.access.mint import mint_token  # noqa: E402
from server.settings import load_settings  # noqa: E402
from server.storage.db import create_db_engine  # noqa: E402
from tests.support.sync import (Api, Operator, compare, consumers, live, play_round, readable,  # noqa: E402
                                round_events)

FRESH_S = 1.1  # the server looks at what is committed once a second
COUNTERS = ("syncs", "pages", "entries", "duplicated", "skipped", "superseded")


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


def run(backend: str, rounds: int, seconds: float, facilities: list[int], pause: float, count: int,
        rounds_said: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
            engine = create_db_engine(settings, writing=True)
            origin = f"http://127.0.0.1:{port}"
            source0, source1 = (Operator(engine, f"source{i}", facilities=n, seed=i, pause_s=pause)
                                for i, n in enumerate(facilities))
            solo = Operator(engine, "solo", facilities=max(10, facilities[-1] // 2), seed=9, pause_s=pause,
                            account="solo")
            operators = [source0, source1, solo]
            for operator in operators:
                operator.load()

            def api(**token: Any) -> Api:
                return Api(live(origin, mint_token(settings, ttl=24 * 3600, **token)))

            clients = consumers(api, source0, settings.auth.permission, count)
            figures: list[dict[str, Any]] = []
            waited = 0.0
            for number in range(0, rounds + 1):  # round 0: the first syncs, nothing else
                before = {c.name: [getattr(c, k, 0) for k in COUNTERS] for c in clients}
                loads, versions = sum(o.loads for o in operators), sum(o.versions for o in operators)
                said: list[str] = []
                started = time.monotonic()
                if number:
                    play_round(operators, clients, seconds, lambda: time.sleep(FRESH_S),
                               round_events(number, source0, source1, solo, said,
                                                                 lambda: time.sleep(FRESH_S)))
                else:
                    for client in clients:
                        client.sync()
                took = time.monotonic() - started
                waited = sum(c.api.waited for c in clients) - waited
                rounds_said.append({"backend": backend, "round": number, "seconds": round(took, 1),
                                    "loads": sum(o.loads for o in operators) - loads,
                                    "versions": sum(o.versions for o in operators) - versions,
                                    "retry_after_s": waited, "events": said})
                print(json.dumps(rounds_said[-1]), flush=True)
                waited = sum(c.api.waited for c in clients)
                for client in clients:
                    truth = readable(client.api, client.truth)
                    row: dict[str, Any] = {"backend": backend, "round": number, "client": client.name}
                    row.update((k, getattr(client, k, 0) - b) for k, b in zip(COUNTERS, before[client.name]))
                    row.update(readable=len(truth), divergence=compare(client.copy, truth) or "none")
                    print(json.dumps(row), flush=True)
                    figures.append(row)
            return figures
        finally:
            stop(proc)
            if engine is not None:
                engine.dispose()
            _drop(pg_name)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--facilities", default="300,200", help="facilities of each data source of account sync")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds each load holds mid-way")
    parser.add_argument("--count", type=int, default=50, help="_count of the history walks")
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # the server and the database dropped too
    said: list[dict[str, Any]] = []
    rows = [row for backend in args.backends.split(",") for row in
            run(backend, args.rounds, args.seconds, [int(n) for n in args.facilities.split(",")], args.pause, args.count,
                                   said)]
    keys = ("backend", "round", "client", *COUNTERS, "readable", "divergence")
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
    (BENCH / "results").mkdir(exist_ok=True)
    (BENCH / "results" / "sync-latest.md").write_text(
        f"# bench/sync.py {' '.join(sys.argv[1:])}\n\n" + "\n".join(lines) + "\n\nRounds (seconds, loads, versions "
        "written, seconds clients waited on Retry-After, the operators' commands):\n\n" + "\n".join(
            f"- {r['backend']} {r['round']}: {r['seconds']} s, {r['loads']} loads, {r['versions']} versions, "
            f"{r['retry_after_s']:g} s Retry-After; {'; '.join(r['events']) or 'first syncs'}" for r in said) + "\n",
        encoding="utf-8")
    print("\n".join(lines))
    bad: Callable[[dict[str, Any]], bool] = lambda row: bool(  # noqa: E731
        row["divergence"] != "none" or row["duplicated"] or row["skipped"])
    if any(bad(row) for row in rows):
        raise SystemExit("a client's copy diverged")


if __name__ == "__main__":
    main()
