"""A real `orgunit-fhir serve` process on a free port, for tests that need a live server."""
from __future__ import annotations

import hashlib
import itertools
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.commands import run_cli

CLI = [sys.executable, "-m", "server.cli"]


# Each test process picks ports from its own block, below the kernel's ephemeral range (32768-60999 by default, where
# bind(0) and outgoing connections take theirs): the workers of one pytest-xdist run take consecutive blocks from one
# drawn for the run (PYTEST_XDIST_TESTRUNUID), so two of its workers never pick the same port and two runs on one
# machine seldom share a block; a run without workers draws by its process id. A server started on a port is then
# checked to be the one that answers (`_own`): a port taken by another run's server in the meantime fails the start
# instead of serving another's answers.
PORTS_FROM, PORTS_PER_PROCESS, BLOCKS = 20_000, 200, 60
_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
_run = int(hashlib.sha256(os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid())).encode()).hexdigest(), 16)
_block = PORTS_FROM + (_run + (int(_worker) if _worker.isdigit() else 0)) % BLOCKS * PORTS_PER_PROCESS
_next = itertools.count()


def free_port() -> int:
    """A port nothing listens on now, from this process's block, each one in turn (a port just released is not
    chosen again until the block comes round)."""
    for _ in range(PORTS_PER_PROCESS):
        port = _block + next(_next) % PORTS_PER_PROCESS
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # listened on, or still closing
            return port
    raise RuntimeError(f"no free port in {_block}-{_block + PORTS_PER_PROCESS - 1}")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The command line as a user runs it: its exit code and outputs."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=_env(), cwd=cwd)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORGUNIT_FHIR_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


@dataclass(frozen=True)
class LiveServer:
    base: str
    token: str
    log: Path
    pid: int = 0  # the serving process (one worker: uvicorn serves in it)

    def rss_mb(self, peak: bool = False) -> float:
        """The server's resident memory now (or its peak so far), in MB."""
        field = "VmHWM:" if peak else "VmRSS:"
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
        raise AssertionError(f"no {field} for process {self.pid}")


def own(proc: subprocess.Popen[bytes], log: Path, port: int, within: float = 30) -> None:
    """The server that answered on `port` is `proc`: it runs and its banner names the port (`serve` prints it once
    the port is its own: a port another process holds is refused before)."""
    banner = f"FHIR base: http://127.0.0.1:{port}/"
    deadline = time.time() + within
    while banner not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.time() > deadline:
            raise AssertionError(f"another process answered on port {port}:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    if proc.poll() is not None:
        raise AssertionError(f"the server on port {port} stopped:\n{log.read_text(errors='replace')}")


@contextmanager
def live_server(tmp: Path, database: str, settings_text: str = "") -> Iterator[LiveServer]:
    """`serve` on `database`; a SQLite one is created with the demo when it does not exist (`serve --demo`)."""
    settings = tmp / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp / 'var'}\n{settings_text}", encoding="utf-8")
    port = free_port()
    log = tmp / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*CLI, "serve", "--settings", str(settings), "--database", database,
                                 "--host", "127.0.0.1", "--port", str(port),
                                 *(["--demo"] if database.startswith("sqlite") else [])],
                                stdout=out, stderr=subprocess.STDOUT, env=_env())
    base = f"http://127.0.0.1:{port}/fhir"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/metadata", timeout=2)
            except urllib.error.HTTPError:
                break  # 401: it is up
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"server did not start:\n{log.read_text()}") from None
                time.sleep(0.2)
        own(proc, log, port)
        token = run_cli("token", settings=settings, database=database).strip().splitlines()[-1]
        yield LiveServer(base, token, log, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
