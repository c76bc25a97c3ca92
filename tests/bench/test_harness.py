"""The benchmark's harness: wrk's summary read back (non-2xx answers and socket errors included), every request's
token kept (wrk.format given no header table), the ceiling answering every target with bytes of its own kind."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from bench.baseline import build
from bench.harness import LUA, Cell, parse_wrk
from bench.report import targets

WRK = """Running 3s test @ http://127.0.0.1:41234
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.57ms  410.27us   9.01ms   91.72%
    Req/Sec     6.26k   305.46     6.61k    83.33%
  Latency Distribution
     50%    2.49ms
     75%    2.61ms
     90%    2.85ms
     99%    4.20ms
  18685 requests in 3.00s, 27.35MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:   6224.62
Transfer/sec:      9.11MB
"""


def test_wrk_summary_is_read_back_with_its_failures() -> None:
    m = parse_wrk(WRK)
    assert (m.rps, m.p50_ms, m.p99_ms, m.requests, m.non_2xx, m.errors) == (6224.62, 2.49, 4.2, 18685, 7, 3)
    clean = parse_wrk(WRK.replace("  Socket errors: connect 0, read 2, write 0, timeout 1\n", "")
                      .replace("  Non-2xx or 3xx responses: 7\n", ""))
    assert (clean.non_2xx, clean.errors) == (0, 0)


def test_every_request_keeps_its_token() -> None:
    """wrk.format given a header table replaces the -H headers (and ours): the script gives it none."""
    assert 'wrk.headers["Authorization"]' in LUA
    assert 'wrk.format("GET", paths[math.random(#paths)])' in LUA


def test_the_ceiling_answers_every_target_with_bytes_of_its_kind(tmp_path: Path) -> None:
    recordings = tmp_path / "recorded.json"
    recordings.write_text(json.dumps({
        "samples": {"read": [{"status": 200, "content_type": "application/fhir+json", "body": '{"id":"1"}'},
                             {"status": 200, "content_type": "application/fhir+json", "body": '{"id":"2"}'}]},
        "answers": {"/fhir/Location/7": ["read", 1], "/fhir/Location?_id=7&x=%C3%A9": ["read", 0]}}))
    with TestClient(build(str(recordings))) as client:
        assert client.get("/fhir/Location/7").json() == {"id": "2"}
        assert client.get("/fhir/Location?_id=7&x=%C3%A9").json() == {"id": "1"}
        assert client.get("/fhir/Location/8").status_code == 404


@pytest.mark.parametrize("non_2xx, errors, met", [
    pytest.param(0, 0, True, id="clean"), pytest.param(3, 0, False, id="non-2xx"),
    pytest.param(0, 1, False, id="socket-errors"),
])
def test_a_cell_with_failures_fails_the_run(non_2xx: int, errors: int, met: bool) -> None:
    cells = [Cell("sqlite 100,000", "read", "ours", 16, 100.0, 1.0, 2.0, 1000, non_2xx, errors)]
    assert targets(cells, {}, "sqlite 100,000", None, None)[-1][2] is met
