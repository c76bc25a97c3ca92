"""Issue 23: nothing is created or served by accident (items 1, 7 and 10): a typo'd database path, a command run
from another folder, a busy port; and the README's recipes that must work as written."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from server.cli.main import main
from server.storage.db import normalize_url
from tests.support import pg
from tests.support.contexts import IASO_CSV
from tests.support.live import live_server
from tests.support.commands import cli, run_cli

ROOT = Path(__file__).resolve().parents[2]
LAKELAND_CSV = ROOT / "tests" / "fixtures" / "mapped" / "lakeland_facilities.csv"
LAKELAND = ROOT / "tests" / "fixtures" / "mapped" / "lakeland_facilities.mapping.yaml"


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# --- 1 and 7: a command that does not create refuses a database that does not exist ---------------------------------

@pytest.mark.parametrize("command, status", [
    pytest.param(["serve"], 2, id="serve"),
    pytest.param(["render"], 2, id="render"),
    pytest.param(["accounts", "list"], 2, id="accounts-list"),
    pytest.param(["data-sources", "list"], 2, id="data-sources-list"),
    pytest.param(["versions", "list"], 2, id="versions-list"),
    pytest.param(["data-sources", "remove", "X", "--force", "--purge"], 2, id="data-sources-remove"),
    pytest.param(["check-config"], 1, id="check-config"),
])
def test_a_typod_path_is_refused_and_nothing_is_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], command: list[str],
                                                        status: int) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "srv" / "kenya").mkdir(parents=True)
    typo = tmp_path / "srv" / "kenya" / "kenyaa.db"
    assert main([*command, "--database", f"sqlite:///{typo}", "--port", "1"] if command == ["serve"] else
                [*command, "--database", f"sqlite:///{typo}"]) == status
    said = capsys.readouterr()
    assert f"the database {typo} does not exist (a typo in the path?); create it with `orgunit-fhir migrate`" in (
        said.out + said.err)
    assert "FHIR base" not in said.err and "Traceback" not in said.err
    assert _files(tmp_path) == {"srv", "srv/kenya"}  # no database, no folder, no secret


@pytest.mark.parametrize("command", [
    pytest.param(["accounts", "list"], id="accounts-list"),
    pytest.param(["token"], id="token"),
    pytest.param(["check-config"], id="check-config"),
    pytest.param(["load", "mapped", str(LAKELAND_CSV), "--mapping", str(LAKELAND), "--dry-run"], id="load-dry-run"),
])
def test_a_typod_folder_is_never_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    main([*command, "--database", f"sqlite:///{tmp_path / 'typo-dir' / 'x.db'}"])
    assert _files(tmp_path) == set()


def test_a_three_slash_url_names_the_relative_path_it_would_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["accounts", "list", "--database", "sqlite:///srv/kenya.db"]) == 2
    said = capsys.readouterr().err
    assert f"the database {tmp_path / 'srv' / 'kenya.db'} (sqlite:/// with three slashes is relative" in said
    assert f"sqlite:////{str(tmp_path).lstrip('/')}/srv/kenya.db, is absolute" in said
    assert _files(tmp_path) == set()


def test_a_dry_run_on_a_database_that_does_not_exist_checks_the_file_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["load", "mapped", str(LAKELAND_CSV), "--mapping", str(LAKELAND), "--dry-run",
                 "--database", f"sqlite:///{tmp_path / 'new.db'}"]) == 0
    said = capsys.readouterr().err
    assert "load mapped (dry run: nothing written): Location: 34 inserted" in said and "creates none" in said
    assert _files(tmp_path) == set()


def test_a_failed_first_load_leaves_no_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "mapped", str(tmp_path / "nowhere.csv"), "--mapping", str(LAKELAND),
                 "--database", f"sqlite:///{tmp_path / 'new.db'}"]) == 1
    assert "cannot read the file" in capsys.readouterr().err and _files(tmp_path) == set()


def test_serve_refuses_a_database_without_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()  # what an earlier typo left behind
    assert main(["serve", "--database", f"sqlite:///{empty}", "--port", "1"]) == 2
    said = capsys.readouterr().err
    assert "holds no schema of this server" in said and "FHIR base" not in said


@pytest.mark.postgres
def test_check_config_fails_on_a_database_without_schema(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--database", pg_url]) == 1
    assert "FAIL  database primary" in capsys.readouterr().out


def test_serve_demo_creates_the_demo_and_says_so(tmp_path: Path) -> None:
    database = tmp_path / "demo.db"
    with live_server(tmp_path, f"sqlite:///{database}") as server:  # serve --demo
        assert f"serve --demo: creating {database} with the synthetic demo (not your data)" in server.log.read_text()


def test_make_serve_installs_the_server_only() -> None:
    planned = subprocess.run(["make", "-n", "-B", "serve"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "pip install --quiet -e ." in planned and "orgunit-fhir serve --demo" in planned
    assert "[test]" not in planned and "requirements.txt" not in planned
    tests = subprocess.run(["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "-e '.[test]'" in tests


# --- 10. a busy port, a token minted in another folder -------------------------------------------------------------

def test_serve_on_a_busy_port_is_one_line_before_anything_is_printed(migrated_url: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--database", migrated_url, "--port", str(port)]) == 2
    said = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in said
    assert "FHIR base" not in said and len(said.strip().splitlines()) == 1


def test_token_in_another_folder_refuses_instead_of_making_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["token"]) == 2
    said = capsys.readouterr()
    assert f"no HMAC secret at {tmp_path / 'var' / 'jwt-secret'}" in said.err and said.out == ""
    assert _files(tmp_path) == set()


@pytest.mark.parametrize("roots, account, named_nothing", [
    pytest.param(["99999"], None, ["99999"], id="a-typo-of-an-id"),
    pytest.param(["abc"], None, ["abc"], id="not-a-reference"),
    pytest.param(["Organization/1"], None, ["Organization/1"], id="a-type-without-a-subtree"),
    pytest.param(["urn:x|nothing"], None, ["urn:x|nothing"], id="an-identifier-of-nothing"),
    pytest.param(["Location/2"], None, [], id="a-unit"),
    pytest.param(["2"], None, [], id="a-bare-id"),
    pytest.param(["2", "777"], None, ["777"], id="one-of-two"),
    pytest.param(["Location/2"], "elsewhere", ["Location/2"], id="a-unit-of-another-account"),
])
def test_a_token_whose_root_names_nothing_is_said(tmp_path: Path, database_url: str,
                                                  capsys: pytest.CaptureFixture[str], roots: list[str],
                                                  account: str | None, named_nothing: list[str]) -> None:
    """As `--account nobody` is: the token is minted (the server fails closed: it sees nothing there), with a note
    naming each root under which it sees nothing (found by a walk: `--org-unit-root 99999` was silent)."""
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\nauth:\n  secret: {'s' * 40}\n")
    common = ["--settings", str(settings), "--database", database_url]
    assert main(["demo", "--size", "40", *common]) == 0
    capsys.readouterr()
    asked = [arg for root in roots for arg in ("--org-unit-root", root)]
    assert main(["token", *asked, *(["--account", account] if account else []), *common]) == 0
    said = capsys.readouterr()
    assert said.out.count(".") == 2  # the token is printed
    if named_nothing:
        assert f"its root(s) {', '.join(named_nothing)} " in said.err
    else:
        assert "its root(s)" not in said.err


@pytest.mark.parametrize("database, roots", [
    pytest.param("postgresql+psycopg://u:p@127.0.0.1:1/x", [], id="unreachable"),
    pytest.param("postgresql+psycopg://u:p@127.0.0.1:1/x", ["2"], id="unreachable-with-a-root"),
    pytest.param("empty-file", ["2"], id="no-schema-with-a-root"),
])
def test_a_token_needs_the_secret_only(tmp_path: Path, capsys: pytest.CaptureFixture[str], database: str,
                                       roots: list[str]) -> None:
    """Minting needs the secret, not the database: one it cannot read says nothing of the roots and accounts, and
    the token is printed with exit 0 (found by review: the roots' check failed the command)."""
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\nauth:\n  secret: {'s' * 40}\n")
    if database == "empty-file":
        (tmp_path / "empty.db").touch()
        database = f"sqlite:///{tmp_path / 'empty.db'}"
    asked = [arg for root in roots for arg in ("--org-unit-root", root)]
    assert main(["token", *asked, "--settings", str(settings), "--database", database]) == 0
    assert capsys.readouterr().out.count(".") == 2


@pytest.mark.parametrize("claim, reason", [
    pytest.param("sub=5", "Subject must be a string", id="a-number-for-sub"),
    pytest.param("exp=\"tomorrow\"", "exp", id="a-word-for-exp"),
])
def test_a_token_the_server_refuses_is_said(tmp_path: Path, migrated_url: str, capsys: pytest.CaptureFixture[str],
                                            claim: str, reason: str) -> None:
    """A --claim the server cannot accept: the token is printed, with its refusal and the reason (found by a walk:
    `--claim sub=5` was silent and the server answered 401 "token refused" only)."""
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\nauth:\n  secret: {'s' * 40}\n")
    assert main(["token", "--claim", claim, "--settings", str(settings), "--database", migrated_url]) == 0
    said = capsys.readouterr().err
    assert "this server refuses this token (401" in said and reason in said


@pytest.mark.parametrize("command", [
    pytest.param(["demo", "--size", "20"], id="demo"),
    pytest.param(["load", "iaso-csv", str(IASO_CSV)], id="load"),
])
def test_the_created_database_is_logged_by_its_path_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """The log line's `path` field is the file, absolute; the sentence on three slashes is in its message only (found
    by a walk: a log pipeline reading `path` got the sentence)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "settings.yaml").write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n")
    main([*command, "--settings", "settings.yaml", "--database", "sqlite:///r.db"])
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    created = [line for line in logged if line.get("command") == "create"]
    assert [line["path"] for line in created] == [str(tmp_path / "r.db")]
    assert "three slashes" in created[0]["message"]


# --- 10. README's PostgreSQL roles, as written ----------------------------------------------------------------------

def _readme_sql() -> list[str]:
    """The SQL blocks of README's PostgreSQL section, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### PostgreSQL"):text.index("## Operations")]
    return re.findall(r"```sql\n(.*?)```", section, flags=re.S)


@pytest.mark.postgres
def test_readme_role_sql_works_as_written(pg_url: str, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    database = make_url(pg_url).database
    names = {"orgunit_writer": f"w_{suffix}", "orgunit_reader": f"r_{suffix}",
             "DATABASE orgunits": f'DATABASE "{database}"'}

    def as_here(sql: str) -> str:
        for old, new in names.items():
            sql = sql.replace(old, new)
        return sql.replace("PASSWORD '...'", "")

    before, after = _readme_sql()
    as_role = lambda role: make_url(pg_url).set(username=role).render_as_string(hide_password=False)  # noqa: E731
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(as_here(before))
        (tmp_path / "settings.yaml").write_text("")
        run_cli("migrate", settings=tmp_path / "settings.yaml", database=as_role(f"w_{suffix}"))
        run_cli("demo", "--size", "20", settings=tmp_path / "settings.yaml", database=as_role(f"w_{suffix}"))
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(as_here(after))
        with psycopg.connect(as_role(f"r_{suffix}")) as conn:
            assert conn.execute("SELECT count(*) FROM org_unit").fetchone() == (20,)
            assert conn.execute("SELECT has_table_privilege('bulk_export_job', 'INSERT')").fetchone() == (True,)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("DELETE FROM org_unit")
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "w_{suffix}"')  # one at a time: both at once trips over the default ACL
            conn.execute(f'DROP OWNED BY "r_{suffix}"')
            conn.execute(f'DROP ROLE IF EXISTS "w_{suffix}"')
            conn.execute(f'DROP ROLE IF EXISTS "r_{suffix}"')


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database without any table."""
    with pg.scratch_database() as url:
        yield url


# --- a command run before `migrate`: told so, not "unreachable" nor "check the role's privileges" ------------------

BEFORE_MIGRATE = [
    pytest.param(["accounts", "list"], id="accounts-list"),
    pytest.param(["data-sources", "list"], id="data-sources-list"),
    pytest.param(["versions", "list"], id="versions-list"),
    pytest.param(["render"], id="render"),
]


@pytest.mark.parametrize("command", BEFORE_MIGRATE)
def test_a_command_before_migrate_says_the_schema_is_missing(database_url: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             command: list[str]) -> None:
    if database_url.startswith("sqlite"):
        Path(make_url(database_url).database or "").touch()  # a file with no tables (what a typo'd path leaves)
    assert main([*command, "--database", database_url]) == 1
    said = capsys.readouterr().err
    assert "holds no schema of this server" in said and "orgunit-fhir migrate" in said, said
    assert "cannot be opened or reached" not in said and "privileges" not in said, said


def _recorded_at(database_url: str, revision: str) -> None:
    """A migrated database whose org-unit chain records `revision` (behind this release, or past what it knows)."""
    assert main(["migrate", "--database", database_url]) == 0
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    finally:
        engine.dispose()


def test_render_refuses_a_schema_behind_this_release(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """render writes the tables this release knows: behind, it would fail half way (`migrate` first)."""
    _recorded_at(database_url, "0018")
    capsys.readouterr()
    assert main(["render", "--database", database_url]) == 2
    said = capsys.readouterr().err
    assert "render refused" in said and "is behind: at 0018, head" in said and "orgunit-fhir migrate" in said, said


@pytest.mark.parametrize("command", [
    pytest.param(["migrate"], id="migrate"),
    pytest.param(["load", "iaso-csv", str(IASO_CSV)], id="load"),
    pytest.param(["demo", "--size", "10"], id="demo"),
    pytest.param(["render"], id="render"),
    pytest.param(["accounts", "list"], id="accounts-list"),
    pytest.param(["versions", "list"], id="versions-list"),
    pytest.param(["data-sources", "rename", "Demo", "Other"], id="data-sources-rename"),
    pytest.param(["token"], id="token"),
])
def test_a_newer_releases_schema_is_refused_by_every_command(database_url: str, capsys: pytest.CaptureFixture[str],
                                                              command: list[str]) -> None:
    """A database a newer release migrated: every command of this one refuses it, naming the chain and what to do
    (before: `migrate`, `load` and `demo` failed in alembic as "unexpected CommandError ... a bug"; the others ran
    against tables they do not know), and nothing is written."""
    _recorded_at(database_url, "0099")
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.connect() as conn:
            before = conn.execute(text("SELECT count(*) FROM org_unit")).scalar_one()
        capsys.readouterr()
        assert main([*command, "--database", database_url]) == 2
        said = capsys.readouterr().err
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0099"
            assert conn.execute(text("SELECT count(*) FROM org_unit")).scalar_one() == before
    finally:
        engine.dispose()
    assert "at 0099, a revision this server does not know (migrated by a newer release?)" in said, said
    assert "run the release that migrated it" in said and "a bug" not in said, said


@pytest.fixture
def hanging_up() -> Iterator[tuple[int, list[socket.socket]]]:
    """A port whose every connection is closed at once, and the connections it took."""
    taken: list[socket.socket] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)

        def take() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                taken.append(conn)
                conn.close()

        threading.Thread(target=take, daemon=True).start()
        yield listener.getsockname()[1], taken


def test_a_database_that_cannot_be_reached_is_looked_at_once_before_the_command(
        hanging_up: tuple[int, list[socket.socket]]) -> None:
    """The look before the command (is it a newer release's schema?) and the command's own connection: the failure
    is explained without a third (a silent database makes the operator wait out the connection bound each time)."""
    port, taken = hanging_up
    done = cli("accounts", "list", "--database", f"postgresql://postgres@127.0.0.1:{port}/x")
    assert done.returncode == 1 and "cannot be opened or reached" in done.stderr, done.stderr
    assert len(taken) == 2
