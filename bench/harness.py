"""What every cell of the benchmark shares: processes pinned to cores, HTTP gets, wrk driving a list of random
targets, and wrk's summary read back (rate, latency, non-2xx answers, socket errors)."""
from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
DATA = BENCH / "data"
SERVER_CORE, CLIENT_CORE = "0", "1"  # the server on one core, wrk on the other


@dataclass(frozen=True)
class Measured:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    errors: int  # socket errors: connect, read, write, timeout


@dataclass(frozen=True)
class Cell:
    dataset: str
    workload: str
    server: str  # ours, ceiling, fhirsnake, ours-2-workers
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    errors: int


def pinned(core: str | None) -> list[str]:
    """The command prefix that keeps a process on one core (nothing when taskset is missing or core is None)."""
    return ["taskset", "-c", core] if core is not None and shutil.which("taskset") else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(port: int, proc: subprocess.Popen[bytes], seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the server on :{port} exited ({proc.returncode})")
            time.sleep(0.1)
    raise SystemExit(f"the server on :{port} did not start within {seconds:.0f} s")


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of a process and its children (VmHWM: the peak)."""
    total = 0
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    for p in [pid, *map(int, children)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(f"{field}:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total / 1024


def get(port: int, path: str, token: str | None) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, response.getheader("content-type") or "", body


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    print("installing wrk (Debian package)...", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    return shutil.which("wrk") or "wrk"


# Every request a target drawn at random from the list. The token goes into wrk.headers, which wrk.format uses
# with the -H headers when it is given no header table: a table given to wrk.format replaces them all.
LUA = """
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do paths[#paths + 1] = line end
local token = os.getenv("BENCH_TOKEN")
if token ~= nil and token ~= "" then wrk.headers["Authorization"] = "Bearer " .. token end

function setup(thread)
  thread:set("seed", math.random(1, 2147483647))
end

function init(args)
  math.randomseed((tonumber(os.getenv("BENCH_SEED")) or 1) + (seed or 0))
end

function request()
  return wrk.format("GET", paths[math.random(#paths)])
end
"""


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def parse_wrk(output: str) -> Measured:
    """wrk --latency's summary: requests/s, p50, p99, requests, non-2xx (wrk counts 3xx with them) and errors."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return Measured(rps, p50, p99, requests, int(non_2xx.group(1)) if non_2xx else 0,
                    sum(map(int, errors.groups())) if errors else 0)


def drive(wrk: str, port: int, paths: list[str], token: str | None, concurrency: int, seconds: float,
          seed: int = 1) -> Measured:
    """wrk on the client core, `concurrency` connections for `seconds`, each request a random one of `paths`."""
    DATA.mkdir(parents=True, exist_ok=True)
    paths_file, script = DATA / "paths.txt", DATA / "paths.lua"
    paths_file.write_text("\n".join(paths) + "\n")
    script.write_text(LUA)
    env = {**os.environ, "BENCH_PATHS": str(paths_file), "BENCH_TOKEN": token or "", "BENCH_SEED": str(seed)}
    done = subprocess.run([*pinned(CLIENT_CORE), wrk, "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--latency",
                           "--timeout", "30s", "-s", str(script), f"http://127.0.0.1:{port}"],
                          capture_output=True, text=True, env=env)
    if done.returncode or "Requests/sec" not in done.stdout:
        raise SystemExit(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return parse_wrk(done.stdout)
