"""A plugin's command that reads no database runs where none exists yet when it says so (`Command(...,
needs_database=False)`; trial of issue 41, finding 7: such a command was refused "the database ... does not exist;
create it with `orgunit-fhir migrate`"); by default a plugin command is refused there, as the engine's are, and
neither creates a database."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import server.cli.main as cli
from server import Command, hookimpl
from server.extensions import Extensions
from server.plugins import get_plugin_manager
from server.settings import Settings


def _template(args: argparse.Namespace, settings: Settings) -> int:
    print(f'{{"organizations": []}}  # {args.name}')
    return 0


class Tools:
    @hookimpl
    def register_commands(self, settings: Settings) -> list[Command]:
        configure = lambda parser: parser.add_argument("--name", default="owners")  # noqa: E731
        return [Command("owners-template", "print an empty owners file", configure, _template, needs_database=False),
                Command("owners-count", "count the owners", configure, _template),
                Command("owners-check", "check the owners", configure, _template, needs_database=True)]


@pytest.fixture
def with_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "load_extensions",
                        lambda settings: Extensions.collect(get_plugin_manager(settings, [("tools", Tools())]), settings))
    return tmp_path


@pytest.mark.parametrize("command, status, said", [
    pytest.param(["owners-template", "--name", "kenya"], 0, '{"organizations": []}  # kenya', id="needs-no-database"),
    pytest.param(["owners-count"], 2, "does not exist (a typo in the path?); create it with `orgunit-fhir migrate`",
                 id="default-needs-one"),
    pytest.param(["owners-check"], 2, "does not exist", id="declared-needing-one"),
])
def test_a_plugin_command_needs_a_database_unless_it_says_not(with_tools: Path, capsys: pytest.CaptureFixture[str],
                                                              command: list[str], status: int, said: str) -> None:
    missing = with_tools / "var" / "orgunits.db"
    assert cli.main([*command, "--database", f"sqlite:///{missing}"]) == status
    out = capsys.readouterr()
    assert said in out.out + out.err
    assert not missing.exists() and not missing.parent.exists()  # no database made, either way


def test_the_default_is_unchanged() -> None:
    assert Command("x", "h", lambda parser: None, lambda args, settings: 0).needs_database is True
