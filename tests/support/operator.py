"""The command line as an operator runs it (in process, on the test's database), and a consumer's view of the server
it feeds: the `operator` fixture of the tests that play an operator's commands (issues 23 and 36)."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.app import create_app
from server.cli.main import main
from server.settings import load_settings

FIXTURES = Path(__file__).parents[1] / "fixtures"
MAPPED = FIXTURES / "mapped"
LAKELAND_CSV = MAPPED / "lakeland_facilities.csv"
LAKELAND = MAPPED / "lakeland_facilities.mapping.yaml"
LAKELAND_UNITS = 34  # the country, 3 counties, 7 sub-counties, 23 facilities
DHIS2_SAMPLE = FIXTURES / "dhis2_sierra_leone_sample.json"
KENYA = FIXTURES / "kenya_mfl_sample"  # three counties of the Kenya MFL (tests/fixtures/README.md)
KENYA_UNITS = 178  # the root, 3 counties, 15 constituencies, 75 wards, 84 facilities


def kenya_copy(where: Path, edit: Callable[[list[dict[str, Any]]], Any] | None = None,
               mapping: Callable[[str], str] | None = None) -> tuple[Path, Path]:
    """The Kenya sample copied into `where` (facilities file, mapping): `edit` changes the facility records in place,
    `mapping` the mapping's text."""
    where.mkdir(parents=True, exist_ok=True)
    for source in KENYA.iterdir():
        shutil.copy(source, where / source.name)
    facilities = where / "0011_facilities.json"
    if edit is not None:
        document = json.loads(facilities.read_text(encoding="utf-8"))
        edit(document[0]["records"])
        facilities.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    if mapping is not None:
        path = where / "kenya.mapping.yaml"
        path.write_text(mapping(path.read_text(encoding="utf-8")), encoding="utf-8")
    return facilities, where / "kenya.mapping.yaml"



@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\nauth:\n  secret: {'s' * 40}\n"
                    "bulk:\n  enabled: true\n", encoding="utf-8")
    return path


class Operator:
    """The command line as the operator runs it (in process), and a consumer's view of the server."""

    def __init__(self, settings_path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.settings_path, self.url, self.capsys = settings_path, url, capsys

    def run(self, *argv: str) -> tuple[int, str]:
        """Exit status and the messages of the command's log lines (JSON on stderr)."""
        status, _, said = self.printed(*argv)
        return status, said

    def printed(self, *argv: str) -> tuple[int, str, str]:
        """Exit status, what the command printed (stdout) and the messages of its log lines."""
        self.capsys.readouterr()
        status = main([*argv, "--settings", str(self.settings_path), "--database", self.url])
        out, said = self.capsys.readouterr()
        return status, out, "\n".join(json.loads(line)["message"] for line in said.splitlines()
                                       if line.startswith("{"))

    def ok(self, *argv: str) -> str:
        status, said = self.run(*argv)
        assert status == 0, said
        return said

    def load_lakeland(self, *options: str, csv: Path = LAKELAND_CSV, mapping: Path = LAKELAND) -> str:
        return self.ok("load", "mapped", str(csv), "--mapping", str(mapping), *options)

    def load_kenya(self, *options: str, facilities: Path | None = None, mapping: Path | None = None) -> tuple[int, str]:
        """`load mapped` of the Kenya sample (or a copy of it): exit status and messages."""
        return self.run("load", "mapped", str(facilities or KENYA / "0011_facilities.json"), "--mapping",
                        str(mapping or KENYA / "kenya.mapping.yaml"), *options)

    def accounts(self) -> dict[str, list[str]]:
        """`accounts list` as a table: account -> data sources, units, served."""
        self.capsys.readouterr()
        assert main(["accounts", "list", "--settings", str(self.settings_path), "--database", self.url]) == 0
        return {row.split()[0]: row.split()[1:] for row in self.capsys.readouterr().out.splitlines()[1:]}

    @contextmanager
    def consumer(self, **token: Any) -> Iterator[TestClient]:
        settings = load_settings(self.settings_path, self.url)
        app = create_app(settings)
        try:
            with TestClient(app, base_url="http://testserver") as client:
                client.headers["Authorization"] = f"Bearer {mint_token(settings, **token)}"
                yield client
        finally:
            app.state.ctx.db.dispose()


@pytest.fixture
def operator(settings_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]) -> Iterator[Operator]:
    yield Operator(settings_path, database_url, capsys)
    shutil.rmtree(settings_path.parent / "var", ignore_errors=True)  # what the commands left in server.data_dir
