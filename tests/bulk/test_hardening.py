"""Bulk Data under pressure, on both backends: the running-job limit under simultaneous kick-offs from several
workers, a failed or interrupted job's files removed at once, readiness and check-config when the directory cannot
be written, and `Range` on the files as RFC 9110 says (every error an OperationOutcome)."""
from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.bulk import files as bulk_files
from server.bulk import runner as bulk_runner
from server.bulk.files import directory
from server.cli.main import main
from server.engine.context import ServerContext
from server.settings import BulkSettings
from tests.support.bulk import ASYNC, NDJSON, held, service, kick_off, manifest
from tests.support.contexts import bearer, pyramid_context
from tests.support.fixtures import context_fixture
from tests.support.scoping import load_alpha, load_beta

WORKERS, PER_WORKER, MAX_RUNNING = 4, 3, 2


def exporting(url: str, var: Path) -> ServerContext:
    """The two-account universe, exported in files of 4 resources, MAX_RUNNING jobs at most (all of one account
    may take them: the per-account share is tests/bulk/test_abuse_bulk.py's)."""
    context = pyramid_context(url, var, load_alpha, load_beta)
    bulk = BulkSettings(file_resources=4, max_running=MAX_RUNNING, max_running_per_account=MAX_RUNNING)  # one account
    return replace(context, settings=replace(context.settings, bulk=bulk))


ctx = context_fixture(exporting)
CLIENT = {"subject": "bulk-client", "account": "alpha"}  # the claims of the tokens these tests send


def with_bulk(ctx: ServerContext, **bulk: Any) -> ServerContext:
    return replace(ctx, settings=replace(ctx.settings, bulk=replace(ctx.settings.bulk, **bulk)))


def outcome(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/fhir+json")
    body = answer.json()
    assert body["resourceType"] == "OperationOutcome" and body["issue"][0]["code"] == code
    return body  # type: ignore[no-any-return]


def test_the_running_limit_holds_under_simultaneous_kick_offs(ctx: ServerContext,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """12 kick-offs at once from 12 subjects through 4 workers (apps): exactly max_running are accepted."""
    release = threading.Event()
    monkeypatch.setattr(bulk_runner, "resources", held(release))
    apps = [create_app(ctx.settings, context=ctx) for _ in range(WORKERS)]
    start = threading.Barrier(WORKERS * PER_WORKER)
    statuses: list[int] = []

    def kick(client: TestClient, subject: str) -> None:
        start.wait(10)
        statuses.append(client.get("/fhir/$export", headers={**ASYNC, **bearer(ctx.settings, subject=subject, account="alpha")}).status_code)

    clients = [TestClient(app) for app in apps]
    try:
        for client in clients:
            client.__enter__()
        threads = [threading.Thread(target=kick, args=(clients[i % WORKERS], f"subject-{i}"))
                   for i in range(WORKERS * PER_WORKER)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(statuses) == [202] * MAX_RUNNING + [429] * (WORKERS * PER_WORKER - MAX_RUNNING)
    finally:
        release.set()
        for app, client in zip(apps, clients):
            service(ctx).join()
            client.__exit__(None, None, None)


def _job_dir(ctx: ServerContext, status: str) -> Path:
    return directory(ctx.settings) / status.rsplit("/", 1)[1]


def test_a_job_failing_on_a_full_disk_removes_its_files_at_once(ctx: ServerContext,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    written = bulk_files.NdjsonFiles.write

    def fill_then_fail(self: bulk_files.NdjsonFiles, lines: Any) -> None:
        written(self, lines)  # a partial file on disk, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bulk_files.NdjsonFiles, "write", fill_then_fail)
    app = create_app(ctx.settings, context=ctx)
    with TestClient(app) as client:
        status = kick_off(client, headers=bearer(ctx.settings, **CLIENT))
        service(ctx).join()
        assert not _job_dir(ctx, status).exists()
        failed = client.get(status, headers=bearer(ctx.settings, **CLIENT))
    assert failed.status_code == 500 and "OSError" in failed.text
    monkeypatch.setattr(bulk_files.NdjsonFiles, "write", written)
    with TestClient(create_app(ctx.settings, context=ctx)) as client:  # the next one is not failed by the first
        assert manifest(client, kick_off(client, headers=bearer(ctx.settings, **CLIENT)), bearer(ctx.settings, **CLIENT))["output"]


def test_a_job_interrupted_by_the_server_stopping_removes_its_files(ctx: ServerContext,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()
    resources = bulk_runner.resources

    def slow(*args: Any) -> Iterator[Any]:
        for batch in resources(*args):
            yield batch
            started.set()
            release.wait(10)

    monkeypatch.setattr(bulk_runner, "resources", slow)
    app = create_app(ctx.settings, context=ctx)
    with TestClient(app) as client:  # leaving it runs the lifespan's shutdown, as SIGTERM does
        status = kick_off(client, headers=bearer(ctx.settings, **CLIENT))
        assert started.wait(10)
        job = _job_dir(ctx, status)
        assert any(job.iterdir())  # a partial file
        threading.Timer(0.5, release.set).start()
    assert not job.exists()


@pytest.mark.parametrize("where", [
    pytest.param(lambda tmp: tmp / "a-file" / "bulk", id="under-a-file"),
    pytest.param(lambda tmp: tmp / "a-file", id="is-a-file"),
])
def test_readyz_and_check_config_fail_when_the_directory_cannot_be_written(
        ctx: ServerContext, tmp_path: Path, where: Any, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    unusable = with_bulk(ctx, directory=str(where(tmp_path)))
    with TestClient(create_app(unusable.settings, context=unusable)) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["bulk"] == "the export directory cannot be written"
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\nbulk:\n  directory: {where(tmp_path)}\n")
    assert main(["check-config", "--settings", str(settings), "--database", ctx.settings.database_url]) == 1
    assert f"FAIL  bulk.directory {where(tmp_path)}" in capsys.readouterr().out
    disabled = with_bulk(unusable, enabled=False)
    with TestClient(create_app(disabled.settings, context=disabled)) as client:
        assert client.get("/readyz").status_code == 200  # no export, no directory needed


@pytest.fixture(scope="module")
def one_file(ctx: ServerContext) -> Iterator[tuple[TestClient, str, bytes]]:
    """A TestClient, the URL of a finished job's first file and its bytes."""
    with TestClient(create_app(ctx.settings, context=ctx)) as client:
        url = manifest(client, kick_off(client, headers=bearer(ctx.settings, **CLIENT)), bearer(ctx.settings, **CLIENT))["output"][0]["url"]
        whole = client.get(url, headers={**NDJSON, **bearer(ctx.settings, **CLIENT)})
        assert whole.status_code == 200
        yield client, url, whole.content


@pytest.mark.parametrize("range_header, status, part", [
    pytest.param("bytes=0-9", 206, lambda b: b[:10], id="first-ten"),
    pytest.param("bytes=5-", 206, lambda b: b[5:], id="from-five"),
    pytest.param("bytes=-7", 206, lambda b: b[-7:], id="last-seven"),
    pytest.param("bytes=3-99999999", 206, lambda b: b[3:], id="end-past-the-file"),
    pytest.param("items=0-5", 200, lambda b: b, id="unknown-unit-ignored"),
    pytest.param("0-5", 200, lambda b: b, id="no-unit-ignored"),
])
def test_range_serves_what_rfc_9110_says(one_file: tuple[TestClient, str, bytes], ctx: ServerContext,
                                         range_header: str, status: int, part: Any) -> None:
    client, url, whole = one_file
    answer = client.get(url, headers={**NDJSON, **bearer(ctx.settings, **CLIENT), "Range": range_header})
    assert answer.status_code == status and answer.content == part(whole)
    if status == 206:
        assert answer.headers["content-range"].endswith(f"/{len(whole)}")


@pytest.mark.parametrize("range_header, status, code", [
    pytest.param("bytes=5-1", 400, "invalid", id="last-before-first"),
    pytest.param("bytes=a-b", 400, "invalid", id="not-numbers"),
    pytest.param("bytes=-", 400, "invalid", id="no-position"),
    pytest.param("bytes=99999999-", 416, "value", id="past-the-end"),
    pytest.param("bytes=-0", 416, "value", id="empty-suffix"),
    pytest.param("bytes=" + ",".join(["0-1"] * 17), 416, "value", id="too-many-ranges"),
])
def test_a_range_that_cannot_be_served_is_an_operation_outcome(one_file: tuple[TestClient, str, bytes],
                                                               ctx: ServerContext, range_header: str, status: int,
                                                               code: str) -> None:
    client, url, whole = one_file
    answer = client.get(url, headers={**NDJSON, **bearer(ctx.settings, **CLIENT), "Range": range_header})
    outcome(answer, status, code)
    if status == 416:
        assert answer.headers["content-range"] == f"bytes */{len(whole)}"
