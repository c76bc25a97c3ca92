"""Issue 39's attacks replayed against a live server: does it stay bounded (peak RSS) and do the probes answer
(/healthz p99) while each runs?

    .venv/bin/python bench/abuse.py [--size 10000] [--backend sqlite|postgresql] [--seconds 20] [--only NAME]

Builds (once, kept) the demo dataset bench/run.py would, starts `orgunit-fhir serve` on it as bench/run.py does (one
worker pinned to one core, JWT on, no access log; the default settings but `server.max_connections: 20` as in the
issue and `server.max_url_length: 60000` so the costly searches are read), then runs a baseline (nothing but the
probe) and each attack for `--seconds`, one after another (a server started anew for each), without a token unless the attack needs one. Meanwhile a
probe sends `GET /healthz` on a new connection every 50 ms and the server's RSS is read every 100 ms
(/proc/<pid>/status, with its render process's). Reported per attack: the probes' p50/p99/max, the server's peak RSS, and what the attacker got.
Results: stdout and bench/results/abuse-<backend>-latest.md. Not a unit test: a measurement (targets: RSS under
250 MB, /healthz p99 under 100 ms, for every attack).
"""
from __future__ import annotations

import argparse
import http.client
import random
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.costly import letters, percentile  # noqa: E402
from bench.datasets import Dataset, cli, ensure_dataset  # noqa: E402
from bench.harness import BENCH  # noqa: E402
from bench.servers import ours  # noqa: E402

RSS_LIMIT_MB, P99_LIMIT_MS = 250, 100
PROBE_EVERY_S, RSS_EVERY_S = 0.05, 0.1
CHUNKED_HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"


class Attack:
    """What an attack sent and got (statuses of the requests it read, connections the server closed)."""

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.lock = threading.Lock()

    def count(self, what: str) -> None:
        with self.lock:
            self.statuses[what] += 1


def _connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    return sock


def _pour(port: int, until: float, attack: Attack, first: bytes, more: bytes, rcvbuf: int | None = None,
          pause: float = 0.0) -> None:
    """Send `first`, then `more` again and again (`pause` s apart), never reading; a new connection when the server
    closes one."""
    while time.monotonic() < until:
        try:
            sock = _connect(port, rcvbuf)
        except OSError:
            attack.count("connect failed")
            time.sleep(0.1)
            continue
        try:
            sock.sendall(first)
            while time.monotonic() < until:
                sock.sendall(more)
                time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            attack.count("closed by the server")
        except OSError:  # a send that could not go on for 5 s: the server no longer reads
            attack.count("send blocked 5 s")
        finally:
            sock.close()


def trailers(port: int, token: str, until: float, attack: Attack, ctx: dict[str, list[str]]) -> list[threading.Thread]:
    """Item 1: chunked `GET /healthz`, then trailer lines without end, on 4 connections."""
    line = b"X-Trailer: " + b"t" * 1000 + b"\r\n"
    return [threading.Thread(target=_pour, args=(port, until, attack, CHUNKED_HEALTHZ, line * 64)) for _ in range(4)]


def pipelining(port: int, token: str, until: float, attack: Attack, ctx: dict[str, list[str]]
               ) -> list[threading.Thread]:
    """Item 2: 4 connections pipelining `GET /healthz` (2 MiB at a time), never reading."""
    flood = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n" * ((2 << 20) // 34)
    return [threading.Thread(target=_pour, args=(port, until, attack, b"", flood)) for _ in range(4)]


def slow_readers(port: int, token: str, until: float, attack: Attack, ctx: dict[str, list[str]]
                 ) -> list[threading.Thread]:
    """Item 3: 20 connections (the cap) each pipelining 30 requests for leaflet.js with a 2 KB receive buffer, never
    reading; beside them, a client asking `/fhir/metadata` every 200 ms (its statuses reported: 401 is served)."""
    request = b"GET /static/orgunits/leaflet/leaflet.js HTTP/1.1\r\nHost: a\r\n\r\n"

    def one() -> None:  # and one more request every 500 ms
        _pour(port, until, attack, request * 30, request, rcvbuf=2048, pause=0.5)

    def asking() -> None:
        while time.monotonic() < until:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/fhir/metadata")
                attack.count(f"metadata {conn.getresponse().status}")
                conn.close()
            except OSError:
                attack.count("metadata failed")
            time.sleep(0.2)

    return [threading.Thread(target=one) for _ in range(20)] + [threading.Thread(target=asking)]


def _asking(port: int, token: str, until: float, attack: Attack, paths: list[str], rng: random.Random) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    while time.monotonic() < until:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn.request("GET", rng.choice(paths), headers=headers)
            answer = conn.getresponse()
            answer.read()
            attack.count(str(answer.status))
        except OSError:
            attack.count("failed")
        finally:
            conn.close()


def renders(port: int, token: str, until: float, attack: Attack, ctx: dict[str, list[str]]) -> list[threading.Thread]:
    """Item 4: 2 clients asking the issue's XML renders again and again (with a token)."""
    paths = ["/fhir/Location?_count=100&_format=xml", "/fhir/Location/_history?_count=100&_format=xml",
             "/fhir/Location?_id=1,2,3,4,5,6,7&_revinclude:iterate=Location:partof&_count=100&_format=xml"]
    return [threading.Thread(target=_asking, args=(port, token, until, attack, paths, random.Random(i)))
            for i in range(2)]


def costly(port: int, token: str, until: float, attack: Attack, ctx: dict[str, list[str]]) -> list[threading.Thread]:
    """Items 5 and 6: 4 clients sending 38 x `name:contains=<100 values>&_total=accurate` (with a token)."""
    return [threading.Thread(target=_asking, args=(port, token, until, attack, ctx["costly"], random.Random(i)))
            for i in range(4)]


def header_cap(port: int, token: str, until: float, attack: Attack, ctx: dict[str, list[str]]
               ) -> list[threading.Thread]:
    """Item 7: 4 connections sending a request, then one pipelined behind it with 130 KB of headers, again and
    again; what the second got is counted."""
    fields = b"".join(b"X-F%d: %s\r\n" % (i, b"f" * 1000) for i in range(130))
    request = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\n" + fields + b"\r\n"

    def one() -> None:
        while time.monotonic() < until:
            try:
                sock = _connect(port)
                sock.sendall(request)
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
                second = data.split(b"HTTP/1.1 ")[2][:3].decode() if data.count(b"HTTP/1.1 ") > 1 else "none"
                attack.count(f"second {second}")
                sock.close()
            except OSError:
                attack.count("failed")

    return [threading.Thread(target=one) for _ in range(4)]


def baseline(port: int, token: str, until: float, attack: Attack, ctx: dict[str, list[str]]) -> list[threading.Thread]:
    return []


ATTACKS: dict[str, Callable[..., list[threading.Thread]]] = {
    "baseline": baseline, "1 trailers": trailers, "2 pipelining": pipelining, "3 slow readers": slow_readers,
    "4 XML renders": renders, "5/6 costly searches": costly, "7 header cap": header_cap}


def _rss_of(pid: int | str) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:  # gone meanwhile
        pass
    return 0.0


def rss_mb(pid: int) -> float:
    """The server's RSS with its render process's (server.http.apart), in MB."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return _rss_of(pid) + sum(_rss_of(child) for child in children)


def run(name: str, port: int, pid: int, token: str, seconds: float, ctx: dict[str, list[str]]) -> str:
    until = time.monotonic() + seconds
    attack = Attack()
    threads = ATTACKS[name](port, token, until, attack, ctx)
    for thread in threads:
        thread.daemon = True
        thread.start()
    probes: list[float] = []
    failed = 0
    peak, next_rss = rss_mb(pid), 0.0
    while time.monotonic() < until:
        now = time.monotonic()
        if now >= next_rss:
            peak, next_rss = max(peak, rss_mb(pid)), now + RSS_EVERY_S
        started = time.monotonic()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
        except OSError:
            ok = False
        probes.append((time.monotonic() - started) * 1000)
        failed += not ok
        time.sleep(max(0.0, PROBE_EVERY_S - (time.monotonic() - started)))
    for thread in threads:
        thread.join(30)
    peak = max(peak, rss_mb(pid))
    met = peak < RSS_LIMIT_MB and percentile(probes, 0.99) < P99_LIMIT_MS and not failed
    got = ", ".join(f"{k}: {v}" for k, v in sorted(attack.statuses.items())) or "-"
    return (f"| {name} | {len(probes)} | {percentile(probes, 0.5):.1f} | {percentile(probes, 0.99):.1f} | "
            f"{max(probes, default=0):.0f} | {failed} | {peak:.0f} | {got} | {'met' if met else 'NOT met'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--only", action="append", help="an attack's name (or its number); repeatable")
    args = parser.parse_args()
    rng = random.Random(39)
    names = [n for n in ATTACKS if not args.only or n == "baseline"
             or any(n == o or n.split()[0] == o or o in n.split()[0].split("/") for o in args.only)]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Path(tmp) / "settings.yaml"
        settings.write_text(f"server:\n  data_dir: {tmp}/var\n  audit_log: false\n  max_connections: 20\n"
                            "  max_url_length: 60000\n", encoding="utf-8")
        dataset = Dataset(args.size, args.backend, ceiling=False)
        ensure_dataset(dataset, settings)
        pieces = letters(dataset)
        ctx = {"costly": ["/fhir/Location?" + "&".join(
            "name:contains=" + quote(",".join(rng.choice(pieces) + rng.choice(pieces) for _ in range(100)), safe=",")
            for _ in range(38)) + "&_total=accurate" for _ in range(20)]}
        rows, token = [], ""
        for name in names:  # a server of its own for each: its peak RSS is the attack's
            with ours(dataset, settings) as (port, proc):
                token = token or cli("token", settings=settings, database=dataset.url).strip().splitlines()[-1]
                time.sleep(1)
                rows.append(run(name, port, proc.pid, token, args.seconds, ctx))
            print(rows[-1], flush=True)
    met = all(row.endswith("| met |") for row in rows)
    lines = [f"# Issue 39's attacks, {args.seconds:g} s each: {dataset.name}", "",
             "One worker pinned to one core, started anew for each attack; `server.max_connections: 20`; a probe (`GET /healthz`, a new connection) "
             "every 50 ms; the server's RSS (with its render process, started by the first XML answer) every 100 ms.", "",
             "| attack | probes | p50 ms | p99 ms | max ms | probes failed | peak RSS MB | the attacker got | "
             f"RSS < {RSS_LIMIT_MB} MB, p99 < {P99_LIMIT_MS} ms |", "|---|---|---|---|---|---|---|---|---|", *rows, "",
             f"Every attack within the targets: **{'met' if met else 'NOT met'}**"]
    report = "\n".join(lines) + "\n"
    print(report)
    (BENCH / "results").mkdir(exist_ok=True)
    (BENCH / "results" / f"abuse-{args.backend}-latest.md").write_text(report, encoding="utf-8")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
