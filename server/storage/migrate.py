"""Schema migrations: one alembic chain per contributor (the engine's own, then each plugin's), each with its
own version table, run in that order on SQLite and PostgreSQL; and the check that `serve` makes."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, MetaData

from server.errors import ConfigError
from server.storage.tables import metadata as engine_metadata


@dataclass(frozen=True)
class Migrations:
    """A plugin's chain of alembic revisions: `directory/versions/*.py`, over the tables of `metadata`,
    recorded in `version_table` (default `alembic_version_<name>`)."""

    name: str
    directory: Path
    metadata: MetaData
    version_table: str | None = None

    @property
    def table(self) -> str:
        return self.version_table or f"alembic_version_{self.name}"

    def config(self) -> Config:
        config = Config()
        config.set_main_option("script_location", str(self.directory))
        return config

    def script(self) -> ScriptDirectory:
        """The chain's revisions, read from its directory once per chain object (they are the package's code, read
        like its modules: a command asks for its heads and known revisions several times)."""
        return self._script

    @cached_property
    def _script(self) -> ScriptDirectory:
        return ScriptDirectory.from_config(self.config())

    def head(self) -> str | None:
        heads = self.script().get_heads()
        if len(heads) > 1:
            raise ConfigError(f"migrations {self.name}: several heads ({', '.join(heads)}); merge them")
        return heads[0] if heads else None

    def current(self, conn: Connection) -> str | None:
        return MigrationContext.configure(conn, opts={"version_table": self.table}).get_current_revision()

    def knows(self, revision: str | None) -> bool:
        """Whether `revision` is one of this chain's (None, never migrated, is the start of every chain)."""
        return revision is None or revision in {script.revision for script in self.script().walk_revisions()}

    def run(self, conn: Connection, destination: str, *, downgrade: bool = False) -> None:
        config, script = self.config(), self.script()

        def steps(rev: Any, _context: Any) -> Any:
            return script._downgrade_revs(destination, rev) if downgrade else script._upgrade_revs(destination, rev)

        env = EnvironmentContext(config, script, fn=steps, destination_rev=destination)
        env.configure(connection=conn, target_metadata=self.metadata, version_table=self.table,
                      render_as_batch=True, compare_type=True)
        with env.begin_transaction():
            env.run_migrations()


ENGINE_MIGRATIONS = Migrations("engine", Path(__file__).parent / "migrations", engine_metadata)


NEWER_SCHEMA = ("this server cannot migrate it (a release newer than this one migrated the database?): no command of "
                "this release reads or writes it; run the release that migrated it, or restore a copy of the database "
                "of this release")


@dataclass(frozen=True)
class ChainState:
    """One chain in one database: the revision its version table records, the head this server has, and the
    plugins that contribute it (none: the engine's own)."""

    name: str
    plugins: tuple[str, ...]
    revision: str | None
    head: str | None
    known: bool  # the revision is one of this server's chain (a newer release may have migrated past it)

    @property
    def current(self) -> bool:
        return self.revision == self.head

    @property
    def behind(self) -> bool:
        """Not at its head but on the way to it: `migrate` brings it there (a chain never run included)."""
        return not self.current and self.known

    @property
    def owner(self) -> str:
        if not self.plugins:
            return f"chain {self.name} (the engine's own)"
        return f"chain {self.name} (plugin{'s' if len(self.plugins) > 1 else ''} {', '.join(self.plugins)})"

    def describe(self) -> str:
        """`chain orgunits (plugins orgunits, location) is behind: at 0009, head 0010`."""
        if self.current:
            return f"{self.owner} at {self.revision or '(none)'}, its head"
        if self.revision is None:
            return (f"{self.owner} was never migrated in this database (a plugin newly enabled?): at (none), "
                    f"head {self.head}")
        if self.known:
            return f"{self.owner} is behind: at {self.revision}, head {self.head}"
        return (f"{self.owner} is at {self.revision}, a revision this server does not know (migrated by a newer "
                f"release?): head {self.head or '(none)'}")


@dataclass(frozen=True)
class Schema:
    """Every chain the enabled plugins contribute, the engine's first."""

    chains: tuple[Migrations, ...] = (ENGINE_MIGRATIONS,)
    # (chain, the plugins contributing it) for the operators' messages; a chain left out is the engine's own
    contributors: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, contributed: Iterable[tuple[str, Migrations]]) -> Schema:
        """The schema of the (plugin, chain) pairs the enabled plugins declared."""
        chains: dict[str, Migrations] = {ENGINE_MIGRATIONS.name: ENGINE_MIGRATIONS}
        tables = {ENGINE_MIGRATIONS.table: ENGINE_MIGRATIONS.name}
        plugins: dict[str, list[str]] = {}
        for plugin, chain in contributed:
            known = chains.get(chain.name)
            if known is not None:
                if known.directory.resolve() != chain.directory.resolve():
                    raise ConfigError(f"two plugins contribute different migration chains named {chain.name!r}")
                if plugin not in plugins.setdefault(chain.name, []):
                    plugins[chain.name].append(plugin)
                continue  # several providers of one package name their package's chain
            if chain.table in tables:
                raise ConfigError(f"migrations {chain.name}: version table {chain.table} is {tables[chain.table]}'s")
            chains[chain.name], tables[chain.table] = chain, chain.name
            plugins.setdefault(chain.name, []).append(plugin)
        return cls(tuple(chains.values()), tuple((name, tuple(names)) for name, names in plugins.items()))

    def plugins_of(self, name: str) -> tuple[str, ...]:
        """The plugins contributing chain `name` (none for the engine's own)."""
        return dict(self.contributors).get(name, ())

    def chain(self, name: str) -> Migrations:
        for chain in self.chains:
            if chain.name == name:
                return chain
        raise ConfigError(f"no migration chain named {name!r}; known: {', '.join(c.name for c in self.chains)}")

    def heads(self) -> dict[str, str | None]:
        return {chain.name: chain.head() for chain in self.chains}

    def current(self, conn: Connection) -> dict[str, str | None]:
        return {chain.name: chain.current(conn) for chain in self.chains}

    def states(self, revisions: Mapping[str, str | None]) -> tuple[ChainState, ...]:
        """Each chain as a database recorded it (`revisions`, from `current`), against this server's heads."""
        return tuple(ChainState(chain.name, self.plugins_of(chain.name), revisions.get(chain.name), chain.head(),
                                chain.knows(revisions.get(chain.name))) for chain in self.chains)

    def upgrade(self, engine: Engine, targets: Mapping[str, str] | None = None) -> None:
        """Each chain to its head (or to the revision `targets` names for it), each in its own transaction; a chain
        at a revision this server does not know (a newer release migrated it) is refused before any is run."""
        with engine.connect() as conn:
            states = self.states(self.current(conn))
        unknown = [state for state in states if not state.known]
        if unknown:
            raise ConfigError(f"{'; '.join(state.describe() for state in unknown)}: {NEWER_SCHEMA}")
        for chain, state in zip(self.chains, states):
            target = (targets or {}).get(chain.name)
            if target is None and state.current and state.revision is not None:
                continue  # at its head already: nothing to run (a chain without revisions still gets its table)
            with engine.begin() as conn:
                chain.run(conn, target or "heads")

    def is_current(self, engine: Engine) -> bool:
        with engine.connect() as conn:
            return self.current(conn) == self.heads()


def describe(revisions: Mapping[str, str | None]) -> str:
    """`engine e001, orgunits 0007`; a chain never run shows `(none)`."""
    return ", ".join(f"{name} {rev or '(none)'}" for name, rev in revisions.items())
