"""The command line: token, demo, load, serve's start-up checks and HTTP protocol; errors as one line, help for
every option, logs in the server's format, the Makefile, the settings listed, the licence."""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import jwt
import pytest
from sqlalchemy import func, select

from server.access.mint import secret_for
from server.cli.main import build_parser
from server.extensions import load_extensions
from server.settings import (AuthSettings, BulkSettings, DatabaseSettings, FhirSettings, ServerSettings, load_settings,
                             parse_settings)
from server.storage.db import create_db_engine
from plugins.orgunits.tables import org_unit
from tests.support.contexts import IASO_CSV
from tests.support.live import cli, live_server
from tests.support.commands import run_cli

ROOT = Path(__file__).resolve().parents[2]
DHIS2_SAMPLE = ROOT / "tests" / "fixtures" / "dhis2_sierra_leone_sample.json"


def count_units(settings_path: Path, database: str) -> int:
    engine = create_db_engine(load_settings(settings_path, database))
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(org_unit)).scalar_one()
    finally:
        engine.dispose()


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n")
    return path


def test_token_is_signed_with_the_generated_secret(settings_path: Path, database_url: str, tmp_path: Path) -> None:
    secret_for(load_settings(settings_path), create=True)  # as serve makes it on its first start
    token = run_cli("token", "--sub", "alice", "--permission", "a", "--permission", "b", "--ttl", "60",
                    settings=settings_path, database=database_url).strip()
    secret = (tmp_path / "var" / "jwt-secret").read_text().strip()
    claims = jwt.decode(token, secret, algorithms=["HS256"])
    assert claims["sub"] == "alice" and claims["permissions"] == ["a", "b"] and claims["exp"] - claims["iat"] == 60


def test_demo_then_load(settings_path: Path, database_url: str) -> None:
    run_cli("demo", "--size", "300", settings=settings_path, database=database_url)
    assert count_units(settings_path, database_url) == 300
    run_cli("load", "iaso-csv", str(IASO_CSV), settings=settings_path, database=database_url)
    assert count_units(settings_path, database_url) == 436
    run_cli("load", "iaso-csv", str(IASO_CSV), settings=settings_path, database=database_url)
    assert count_units(settings_path, database_url) == 436


def test_load_refuses_a_bad_file_with_its_line_number(settings_path: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    lines = IASO_CSV.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace(lines[3].split(",")[0], "not-an-id", 1)
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = cli("load", "iaso-csv", str(bad), "--settings", str(settings_path))
    assert done.returncode == 1
    assert "line 4" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("settings_text, words", [
    pytest.param("server:\n  port: eighty\n", "server.port", id="bad-type"),
    pytest.param("sever:\n  port: 1\n", "unknown settings section", id="typo-section"),
    pytest.param("plugins:\n  location:\n    config:\n      status_map: {NEW: open}\n", "plugin location",
                 id="bad-plugin"),
    pytest.param("plugins:\n  organisation: {enabled: true}\n", "not installed", id="unknown-plugin"),
    pytest.param("auth:\n  algorithms: [none]\n", "auth.algorithms", id="alg-none"),
])
def test_serve_refuses_bad_settings_with_a_clear_message(tmp_path: Path, settings_text: str, words: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(settings_text)
    done = cli("serve", "--demo", "--settings", str(path), "--port", "1", cwd=tmp_path)  # refused before the demo
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "var" / "orgunits.db").exists()
    assert "configuration error" in done.stderr and words in done.stderr and "Traceback" not in done.stderr


# --- issue 15: errors an operator can act on, help, logs, the small things -------------------------------------------

@pytest.mark.parametrize("url, words", [
    pytest.param("foo", "database.url 'foo': not a database URL; use sqlite:///", id="not-a-url"),
    pytest.param("mysql://me:secret@db/x", "database.url 'mysql://me:***@db/x': mysql is not a database this server "
                 "uses", id="mysql"),
])
@pytest.mark.parametrize("command, status", [
    pytest.param(["check-config"], 1, id="check-config"),
    pytest.param(["serve", "--port", "1"], 2, id="serve"),
    pytest.param(["load", "iaso-csv", str(IASO_CSV)], 2, id="load"),
    pytest.param(["migrate"], 2, id="migrate"),
])
def test_a_database_url_it_cannot_use_is_one_line(tmp_path: Path, url: str, words: str, command: list[str],
                                                   status: int) -> None:
    done = cli(*command, "--database", url, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == status and words in output and "secret" not in output and "Traceback" not in output
    if command == ["check-config"]:
        assert f"FAIL  {words}" in done.stdout
    else:
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_missing_file_is_one_line(settings_path: Path, tmp_path: Path) -> None:
    done = cli("load", "iaso-csv", str(tmp_path / "nowhere.csv"), "--settings", str(settings_path))
    assert done.returncode == 1 and "cannot read the file" in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_raw_utf8_request_target_is_served_by_serve(tmp_path: Path) -> None:
    """curl sends `?name:contains=é` as raw bytes: `serve` reads them as UTF-8, and what its HTTP parser cannot read
    is answered with an OperationOutcome, never uvicorn's plain text."""
    with live_server(tmp_path, f"sqlite:///{tmp_path / 'demo.db'}") as server:
        host, port = server.base.split("//")[1].split("/")[0].split(":")

        def raw(target: bytes) -> tuple[int, dict[str, str], bytes]:
            with socket.create_connection((host, int(port)), timeout=10) as conn:
                conn.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                             b"Authorization: Bearer " + server.token.encode() + b"\r\n\r\n")
                answer = b"".join(iter(lambda: conn.recv(65536), b""))
            head, _, body = answer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.lower().split(": ", 1) for line in lines[1:])
            return int(lines[0].split()[1]), headers, body

        status, headers, body = raw("/fhir/Location?name:contains=é&_count=0".encode())
        encoded = raw(b"/fhir/Location?name:contains=%C3%A9&_count=0")
        assert status == 200 and json.loads(body)["total"] == json.loads(encoded[2])["total"] > 0
        status, headers, body = raw("/fhir/Location/é".encode())
        assert status == 404 and json.loads(body)["resourceType"] == "OperationOutcome"
        status, headers, body = raw(b"/fhir/Location?a=b c")  # a space: no request line at all
        assert status == 400 and headers["content-type"] == "application/fhir+json"
        assert json.loads(body)["issue"][0]["code"] == "invalid"


def _actions(parser: argparse.ArgumentParser, prog: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{prog} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield prog, action


def test_every_option_of_every_command_has_help() -> None:
    parser, _ = build_parser(load_extensions(parse_settings({})))
    missing = [f"{prog} {'/'.join(action.option_strings) or action.dest}" for prog, action in
               _actions(parser, "orgunit-fhir") if not action.help]
    assert missing == []
    helped = {prog for prog, _ in _actions(parser, "orgunit-fhir")}
    assert {"orgunit-fhir load mapped", "orgunit-fhir accounts remove", "orgunit-fhir versions set-default"} <= helped


@pytest.mark.parametrize("args, words", [
    pytest.param(["versions"], "missing ACTION: one of list, set-default", id="versions"),
    pytest.param(["load"], "missing FORMAT: one of iaso-csv, iaso-gpkg, dhis2, fhir-bundle, mapped", id="load"),
    pytest.param(["data-sources"], "missing ACTION: one of list, rename, remove", id="data-sources"),
])
def test_a_command_without_its_subcommand_lists_them(tmp_path: Path, args: list[str], words: str) -> None:
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 2 and words in done.stderr and "_command" not in done.stderr


@pytest.mark.parametrize("log_format, is_json", [pytest.param("json", True, id="json"),
                                                 pytest.param("text", False, id="text")])
def test_commands_log_in_the_servers_format(tmp_path: Path, log_format: str, is_json: bool) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n  log_format: {log_format}\n")
    done = cli("load", "dhis2", str(DHIS2_SAMPLE), "--settings", str(settings))
    assert done.returncode == 0
    lines = done.stderr.strip().splitlines()
    if is_json:
        logged = [json.loads(line) for line in lines]
        report = next(line for line in logged if line["message"].startswith("load dhis2:"))
        assert (report["logger"], report["inserted"], report["data_source"]) == ("orgunit_fhir.cli", 32, "DHIS2")
    else:
        assert all(not line.startswith("{") for line in lines) and any(" INFO orgunit_fhir.cli " in line
                                                                       for line in lines)


def test_make_test_passes_its_arguments() -> None:
    # as a user runs it, not as a sub-make of the `make test` running this suite (MAKEFLAGS would pass JOBS on)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "JOBS", "ARGS")}
    done = subprocess.run(["make", "-n", "test", "ARGS=-x tests/ops"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env=env)
    assert done.returncode == 0 and "pytest -q -n 3 --dist loadfile --no-loadscope-reorder -x tests/ops" in done.stdout
    for jobs in ("0", "4"):
        workers = subprocess.run(["make", "-n", "test", f"JOBS={jobs}", "ARGS=-x tests/ops"], capture_output=True,
                                 text=True, cwd=ROOT, timeout=60, env=env)
        assert workers.returncode == 0 and f"pytest -q -n {jobs} --dist loadfile --no-loadscope-reorder -x tests/ops" in workers.stdout


def test_every_setting_is_listed_in_settings_yaml_and_readme() -> None:
    example = (ROOT / "settings.yaml").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sections = {"server": ServerSettings, "database": DatabaseSettings, "auth": AuthSettings, "fhir": FhirSettings,
                "bulk": BulkSettings}
    unlisted = [f"{section}.{f.name}" for section, cls in sections.items() for f in fields(cls)
                if not re.search(rf"^{section}:(?:\n(?: .*)?)*?\n  #? ?{f.name}:", example, re.MULTILINE)
                or f"{section}.{f.name}" not in readme.replace(f"`{section}.", f"{section}.")
                and f"`{f.name}`" not in readme]
    assert unlisted == []


def test_the_licence_pyproject_names_is_shipped() -> None:
    assert 'license = "MIT"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
