"""A schema behind, chain by chain (issue 29 item 6b): `check-config` names each chain that is not at its head
(which plugin's, at which revision, which head, what to run) and exits 1 on both backends; `serve` migrates the
embedded database it owns (saying so per chain) and refuses a PostgreSQL one. A plugin newly enabled in
settings.yaml, whose chain never ran, is behind too."""
from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from server.cli.main import main
from server.cli.serve import _migrate_embedded
from server.declare.declared import declared
from server.errors import ConfigError
from server.extensions import load_extensions
from server.ops.checks import check_serving_databases
from server.plugins import get_plugin_manager
from server.settings import parse_settings
from server.storage.db import normalize_url
from server.storage.migrate import Migrations, Schema
from tests.support import pg
from tests.support.contexts import make_settings

SCHEMA = load_extensions(parse_settings({})).schema  # what the default settings.yaml enables
WITHOUT_BULK = {"plugins": {"bulk": False}}  # the settings the database was migrated under, before bulk was enabled


def _head(chain: str) -> str:
    head = SCHEMA.chain(chain).head()
    assert head is not None
    return head


def _owner(chain: str) -> str:
    """`chain orgunits (plugins orgunits, location, ...)`: the plugins that declare the chain, in their order."""
    settings = parse_settings({})
    plugins = [plugin for plugin, declared_chain in declared(get_plugin_manager(settings), "register_migrations",
                                                             settings, Migrations) if declared_chain.name == chain]
    return f"chain {chain} (plugin{'s' if len(plugins) > 1 else ''} {', '.join(plugins)})"


@dataclass(frozen=True)
class Case:
    targets: Mapping[str, str] = field(default_factory=dict)  # chains stopped before their head
    migrated_under: Mapping[str, object] = field(default_factory=dict)  # the settings of the migration
    recorded: Mapping[str, str] = field(default_factory=dict)  # a revision written into a version table afterwards
    stale: tuple[str, ...] = ()  # what check-config must say of each chain not at its head
    fixable: bool = True  # serve (embedded) migrates it; else it is refused


CASES = [
    pytest.param(Case(targets={"engine": "e001"},
                      stale=(f"chain engine (the engine's own) is behind: at e001, head {_head('engine')}",)),
                 id="engine-chain-behind"),
    pytest.param(Case(targets={"orgunits": "0009"},
                      stale=(f"{_owner('orgunits')} is behind: at 0009, head {_head('orgunits')}",)),
                 id="plugin-chain-behind"),
    pytest.param(Case(migrated_under=WITHOUT_BULK,
                      stale=((f"{_owner('bulk')} was never migrated in this database (a plugin newly enabled?): "
                              f"at (none), head {_head('bulk')}"),)),
                 id="plugin-newly-enabled-never-migrated"),
    pytest.param(Case(targets={"engine": "e001", "orgunits": "0008"},
                      stale=(f"chain engine (the engine's own) is behind: at e001, head {_head('engine')}",
                             f"{_owner('orgunits')} is behind: at 0008, head {_head('orgunits')}")),
                 id="two-chains-behind-one-line-each"),
    pytest.param(Case(recorded={"alembic_version": "0099"},
                      stale=((f"{_owner('orgunits')} is at 0099, a revision this server does not know (migrated "
                              f"by a newer release?): head {_head('orgunits')}"),), fixable=False),
                 id="plugin-chain-past-this-release"),
    pytest.param(Case(), id="all-current"),
]
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
REMEDY = {"sqlite": "`orgunit-fhir serve` migrates this embedded database when it starts",
          "postgresql": "run `orgunit-fhir migrate --database <url>`"}
UNFIXABLE = "this server cannot migrate it"


@pytest.fixture
def database(backend: str, case: Case, tmp_path: Path, sqlite_template: Path) -> Iterator[str]:
    """A database of `backend` migrated as `case` says."""
    fresh = not case.targets and not case.migrated_under
    if backend == "sqlite":
        if fresh:
            shutil.copyfile(sqlite_template, tmp_path / "db.sqlite")
        url = f"sqlite:///{tmp_path / 'db.sqlite'}"
        _prepare(url, case, fresh)
        yield url
    else:
        with pg.scratch_database(migrated=fresh) as url:
            _prepare(url, case, fresh)
            yield url


def _prepare(url: str, case: Case, fresh: bool) -> None:
    engine = create_engine(normalize_url(url))
    try:
        if not fresh:
            schema: Schema = load_extensions(parse_settings(dict(case.migrated_under))).schema
            schema.upgrade(engine, case.targets)
        with engine.begin() as conn:
            for table, revision in case.recorded.items():
                conn.execute(text(f"UPDATE {table} SET version_num = :revision"), {"revision": revision})
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_check_config_names_each_chain_not_at_its_head(backend: str, case: Case, database: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n", encoding="utf-8")  # every default plugin enabled
    code = main(["check-config", "--settings", str(path), "--database", database])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line[6:].startswith("database primary (")]
    if not case.stale:
        assert code == 0, out
        assert lines == [(f"ok    database primary ({_shown(database)}): reachable, schema current (each chain at "
                          f"its head): {', '.join(f'{name} {_head(name)}' for name in SCHEMA.heads())}")], out
        return
    assert code == 1, out  # never a plain "ok": the operator is told, and a script stops
    assert len(lines) == len(case.stale), out  # one line per chain not at its head, the others not repeated
    remedy = REMEDY[backend] if case.fixable else UNFIXABLE
    for line, said in zip(lines, case.stale):
        assert line.startswith(f"FAIL  database primary ({_shown(database)}): {said}: {remedy}"), out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_start_up_migrates_the_embedded_database_loudly_and_refuses_postgresql(
        backend: str, case: Case, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings(database, tmp_path)
    extensions = load_extensions(settings)
    if not case.stale:
        assert [c.current for c in check_serving_databases(settings, extensions.schema)] == [True]
        return
    if backend == "postgresql" or not case.fixable:
        with pytest.raises(ConfigError) as refused:
            if backend == "postgresql":
                check_serving_databases(settings, extensions.schema)
            else:
                _migrate_embedded(settings, extensions)
        assert all(said in str(refused.value) for said in case.stale), refused.value
        return
    with caplog.at_level(logging.WARNING, logger="orgunit_fhir.cli"):
        _migrate_embedded(settings, extensions)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == len(case.stale) and all(said in line for line, said in zip(warned, case.stale)), warned
    assert all(line.startswith("serve: migrating the embedded database ") for line in warned), warned
    assert [c.current for c in check_serving_databases(settings, extensions.schema)] == [True]


def _shown(url: str) -> str:
    """The URL as the checks print it (the driver named, no password)."""
    return make_url(normalize_url(url)).render_as_string(hide_password=True)
