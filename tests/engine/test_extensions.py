"""What plugins add besides providers: migration chains, commands, load formats and demo data, collected once
at start-up; clashes stop the start-up naming the plugin."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Connection, Integer, MetaData, String, Table, create_engine, func, insert, select

from server import Command, ConfigError, DemoData, LoadCall, LoadFormat, LoadReport, Migrations, Progress, Settings, hookimpl
from server.cli.data import load_call
from server.cli.main import build_parser
from server.extensions import Extensions
from server.plugins import get_plugin_manager
from server.settings import parse_settings
from server.storage.db import normalize_url

NOTES = MetaData()
notes = Table("acme_note", NOTES, Column("id", Integer, primary_key=True), Column("text", String, nullable=False))
CHAIN = Path(__file__).parent / "acme_migrations"


def _load(call: LoadCall) -> LoadReport:
    lines = [line for line in Path(call.path).read_text(encoding="utf-8").splitlines() if line]
    with call.engine.begin() as conn:
        conn.execute(insert(notes), [{"text": f"{call.args.prefix}{line}"} for line in lines])
    return LoadReport(inserted=len(lines))


def _empty(conn: Connection) -> bool:
    return not conn.execute(select(func.count()).select_from(notes)).scalar_one()


class Acme:
    """A plugin contributing one of each kind."""

    @hookimpl
    def register_migrations(self, settings: Settings) -> list[Migrations]:
        return [Migrations("acme", CHAIN, NOTES)]

    @hookimpl
    def register_commands(self, settings: Settings) -> list[Command]:
        return [Command("notes", "count the notes", lambda parser: parser.add_argument("--loud", action="store_true"),
                        lambda args, settings: 7 if args.loud else 0)]

    @hookimpl
    def register_load_formats(self, settings: Settings) -> list[LoadFormat]:
        return [LoadFormat("notes-txt", "one note a line", _load,
                           lambda parser: parser.add_argument("--prefix", default=""))]

    @hookimpl
    def register_demo_data(self, settings: Settings) -> list[DemoData]:
        return [DemoData("notes", lambda engine, size, seed, progress: size, _empty, default_size=3)]


class Clash:
    @hookimpl
    def register_commands(self, settings: Settings) -> list[Command]:
        return [Command("serve", "mine", lambda parser: None, lambda args, settings: 0)]


class NotACommand:
    @hookimpl
    def register_commands(self, settings: Settings) -> list[Any]:
        return ["versions"]


def _extensions(*extra: tuple[str, object]) -> Extensions:
    settings = parse_settings({})
    return Extensions.collect(get_plugin_manager(settings, extra), settings)


def test_every_kind_is_collected_beside_the_org_unit_plugins() -> None:
    found = _extensions(("acme", Acme()))
    assert [c.name for c in found.schema.chains] == ["engine", "bulk", "orgunits", "acme"]
    assert set(found.commands) == {"versions", "accounts", "data-sources", "check-data", "notes"}
    assert {"iaso-csv", "iaso-gpkg", "dhis2", "fhir-bundle", "mapped", "notes-txt"} <= set(found.load_formats)
    assert [d.name for d in found.demos] == ["org-unit pyramid", "notes"]


def test_commands_and_formats_become_the_command_line(tmp_path: Path) -> None:
    parser, runs = build_parser(_extensions(("acme", Acme())))
    args = parser.parse_args(["notes", "--loud"])
    assert runs["notes"](args, parse_settings({}), _extensions()) == 7
    args = parser.parse_args(["load", "notes-txt", "x.txt", "--prefix", "p-"])
    assert (args.format, args.path, args.prefix) == ("notes-txt", "x.txt", "p-")


def test_a_plugin_chain_migrates_and_its_format_loads(database_url: str, tmp_path: Path) -> None:
    found = _extensions(("acme", Acme()))
    engine = create_engine(normalize_url(database_url))
    try:
        found.schema.upgrade(engine)
        assert found.schema.is_current(engine)
        source = tmp_path / "notes.txt"
        source.write_text("one\ntwo\n", encoding="utf-8")
        args = argparse.Namespace(prefix="n-")
        call = load_call(parse_settings({"database": {"url": database_url}}), engine, str(source), args, Progress("t"))
        assert found.load_formats["notes-txt"].load(call) == LoadReport(inserted=2)
        with engine.connect() as conn:
            assert sorted(conn.execute(select(notes.c.text)).scalars()) == ["n-one", "n-two"]
            assert not found.demos[1].is_empty(conn)
    finally:
        engine.dispose()


@pytest.mark.parametrize("plugin, message", [
    pytest.param(Clash(), "command 'serve' is already defined", id="engine-command"),
    pytest.param(NotACommand(), "register_commands returned 'versions', not a Command", id="not-a-declaration"),
])
def test_clashes_stop_the_start_up(plugin: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _extensions(("bad", plugin))
