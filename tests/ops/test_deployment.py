"""The deployment of docs/deployment.md, for real: nginx (TLS, gzip, forwarded headers) in front of
`orgunit-fhir serve --workers 2` on PostgreSQL; public links, request ids, metrics of the whole run, and a
SIGTERM that loses none of the requests in flight."""
from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from tests.support import pg
from tests.support.deploy import PUBLIC_HOST, Served, get_status, logged, nginx, serve
from tests.support.commands import run_cli
from tests.support.proxy import Forwarder
from tests.support.waiting import eventually

pytestmark = pytest.mark.postgres
PUBLIC_BASE = f"https://{PUBLIC_HOST}/fhir"
UNITS = 400
GRACE_S = 20
SETTINGS = f"""  trust_forwarded: true
  shutdown_grace_seconds: {GRACE_S}
  request_timeout_seconds: 120
database:
  pool_size: 4
  statement_timeout_ms: 120000
  connect_timeout_seconds: 120
auth:
  secret: deployment-test-secret-of-32-bytes!!
"""


@dataclass(frozen=True)
class Deployment:
    server: Served
    public: httpx.Client   # through nginx, as the public reaches it
    slow: Forwarder    # the server's link to PostgreSQL
    tmp: Path


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    with pg.scratch_database() as url:
        (tmp_path / "load.yaml").write_text("")
        run_cli("demo", "--size", str(UNITS), settings=tmp_path / "load.yaml", database=url)
        parsed = make_url(url)
        link = Forwarder((parsed.host or "127.0.0.1", parsed.port or 5432))
        through = parsed.set(host="127.0.0.1", port=link.port).render_as_string(hide_password=False)
        try:
            with serve(tmp_path, through, SETTINGS, workers=2) as server, nginx(tmp_path, server.port) as port:
                token = run_cli("token", settings=tmp_path / "settings.yaml", database=through).strip().splitlines()[-1]
                with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=False, timeout=60,
                                  headers={"Host": PUBLIC_HOST, "Authorization": f"Bearer {token}"}) as public:
                    yield Deployment(server, public, link, tmp_path)
        finally:
            link.close()


def scrape(server: Served) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{server.origin}/metrics", timeout=30).raise_for_status().text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def requests_total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], **labels: str) -> float:
    return sum(v for (name, lab), v in samples.items() if name == "orgunit_fhir_http_requests_total"
               and labels.items() <= dict(lab).items())


def accessed(log: str) -> dict[str, dict[str, Any]]:
    """The server's access lines (JSON) by request id."""
    lines = (json.loads(line) for line in log.splitlines() if line.startswith("{"))
    return {line["request_id"]: line for line in lines if line["logger"] == "orgunit_fhir.access"}


def test_links_gzip_request_ids_and_metrics_through_nginx(deployment: Deployment) -> None:
    public = deployment.public
    page = public.get("/fhir/Location", params={"_count": "50"}, headers={"Accept-Encoding": "gzip"})
    assert page.status_code == 200, page.text
    bundle = page.json()
    assert {link["relation"] for link in bundle["link"]} >= {"self", "next"}
    assert all(link["url"].startswith(f"{PUBLIC_BASE}/Location?") for link in bundle["link"])
    assert len(bundle["entry"]) == 50
    assert all(e["fullUrl"] == f"{PUBLIC_BASE}/Location/{e['resource']['id']}" for e in bundle["entry"])

    # gzip by nginx: fewer bytes on the wire than the JSON they decode to
    assert page.headers["content-encoding"] == "gzip" and "Accept-Encoding" in page.headers.get("vary", "")
    assert page.num_bytes_downloaded < len(page.content) / 3
    raw = public.get("/fhir/Location", params={"_count": "50"}, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in raw.headers and raw.json()["total"] == bundle["total"] == UNITS
    follow = public.get(bundle["link"][1]["url"].removeprefix(f"https://{PUBLIC_HOST}"))
    assert follow.status_code == 200 and follow.json()["entry"][0]["fullUrl"].startswith(PUBLIC_BASE)

    # request ids: the caller's, else the one nginx made; both in the server's JSON access log
    first_id = bundle["entry"][0]["resource"]["id"]
    read = public.get(f"/fhir/Location/{first_id}", headers={"X-Request-ID": "deploy-test:42"})
    assert read.status_code == 200 and read.headers["x-request-id"] == "deploy-test:42"
    made = public.get(f"/fhir/Location/{first_id}").headers["x-request-id"]
    assert len(made) == 32 and made in logged(deployment.tmp / "nginx-access.log", lambda text: made in text)
    access = accessed(logged(deployment.server.log, lambda text: {"deploy-test:42", made} <= accessed(text).keys()))
    assert access["deploy-test:42"]["status"] == 200 and access["deploy-test:42"]["forwarded_for"] == "127.0.0.1"
    assert access[made]["path"] == f"/fhir/Location/{first_id}"

    # probes pass through; /metrics does not (nginx denies it), the workers answer it on their own port
    assert public.get("/healthz").json() == {"status": "ok"}
    assert public.get("/readyz").json()["status"] == "ready"
    assert public.get("/metrics").status_code == 403
    samples = scrape(deployment.server)
    assert requests_total(samples, interaction="search-type", resource_type="Location", status="200") == 3
    assert requests_total(samples, interaction="read", resource_type="Location", status="200") == 2
    assert requests_total(samples, interaction="healthz", status="200") == 1
    assert requests_total(samples, interaction="readyz", status="200") >= 2  # the start-up wait polled it too
    assert samples[("orgunit_fhir_db_pool_size", ())] == 2 * 4  # two live workers, each with its pool


def test_sigterm_drains_the_requests_in_flight(deployment: Deployment) -> None:
    """The requests are held in flight by the server's link to PostgreSQL, paused (nothing passes) until after
    SIGTERM: none can end before it, however slow the machine. (A delay per packet raced the poll: /metrics reads
    the data gauges from the database, up to its 3 s probe timeout over a slow link, and the requests could all
    end between two scrapes. The statement, request and connect timeouts are raised so that the pause outlasts no
    budget: a request that opens a connection meanwhile waits for it.)"""
    server, public = deployment.server, deployment.public
    assert public.get("/fhir/Location", params={"_count": "1"}).status_code == 200  # pools warm
    results: list[tuple[int, int, float]] = []
    lock = threading.Lock()

    def fetch(offset: int) -> None:
        response = public.get("/fhir/Location", params={"_count": "100", "_skip": str(offset), "_total": "accurate"})
        body: dict[str, Any] = response.json() if response.status_code == 200 else {}
        with lock:
            results.append((response.status_code, len(body.get("entry", [])), time.monotonic()))

    def in_flight() -> float:
        return scrape(server)[("orgunit_fhir_http_requests_in_flight", ())]

    idle = in_flight()  # the scrape's own request, if it counts itself
    deployment.slow.pause()
    threads = [threading.Thread(target=fetch, args=(offset,)) for offset in (0, 100, 200, 300, 0, 100)]
    for thread in threads:
        thread.start()
    try:
        eventually(lambda: True if in_flight() - idle >= len(threads) else None,  # all accepted by the workers
                   lambda: f"{in_flight() - idle:g} of {len(threads)} requests reached the workers; answered: "
                           f"{results}", 90)  # (one that was not: 502)
        assert results == [], "a request ended with the link to PostgreSQL paused"
        terminated = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        eventually(lambda: True if get_status(server.origin + "/healthz") is None else None,
                   lambda: "the workers still accept connections after SIGTERM", GRACE_S)
    finally:
        deployment.slow.resume()
    for thread in threads:
        thread.join(timeout=GRACE_S + 30)
    exit_code = server.proc.wait(timeout=GRACE_S + 30)
    stopped = time.monotonic()

    assert [status for status, _, _ in results] == [200] * len(threads), server.log.read_text()[-3000:]
    assert all(entries == 100 for _, entries, _ in results)
    assert all(done > terminated for _, _, done in results), "a request ended before SIGTERM: it was not in flight"
    assert exit_code == 0 and stopped - terminated < GRACE_S
    log = server.log.read_text()
    assert log.count("Application shutdown complete") == 2  # both workers closed their pools
    assert public.get("/healthz").status_code == 502  # stopped accepting: nginx has nowhere to send it
