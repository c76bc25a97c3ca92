"""What `serve` and `check-config` verify before serving: the operational settings, then each database."""
from __future__ import annotations

import difflib
import os
import re
import resource
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import NullPool

from server.errors import ConfigError, StorageError
from server.http.protocol import open_files_needed
from server.telemetry.logs import LOG_FORMATS
from server.settings import DATABASE_ENV, Settings, named_text
from server.storage.backend import backend_of, is_embedded, is_postgresql, translate_errors, unknown_driver
from server.storage.db import normalize_url
from server.storage.migrate import NEWER_SCHEMA, ChainState, Schema, describe
from server.storage.replicas import PRIMARY, Target, replica_targets

MIN_METRICS_TOKEN = 16


USABLE_URLS = "use sqlite:///path/to/file.db or postgresql://user@host:5432/db"


def database_url_problem(url: str, key: str = "database.url") -> str | None:
    """Why the URL cannot be used (not a URL, a database or driver this server does not use), else None."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return (f"{key} {_masked(url)!r}: not a database URL; {USABLE_URLS} (set {key}, --database or "
                f"$ORGUNIT_FHIR_DATABASE_URL)")
    unknown = unknown_driver(parsed)
    if unknown is not None:
        return (f"{key} {_safe(url)!r}: {unknown} is not a database this server uses; {USABLE_URLS} "
                "(PostgreSQL through psycopg 3)")
    return None


def _folder_problem(path: Path) -> str | None:
    """Why no folder can be at `path` (made when missing): it, or its nearest existing parent, is not a folder."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    return None if existing is None or existing.is_dir() else f"{existing} is not a directory"


def storage_problems(settings: Settings) -> list[str]:
    """Paths a command that reads or writes a database uses and that cannot be, each naming its setting:
    server.data_dir (the embedded database, the HMAC secret, Bulk Data's files) where a file stands; an embedded
    database (database.url, --database or $ORGUNIT_FHIR_DATABASE_URL) that names a folder, or whose folder cannot
    be. Checked before any command opens a database: they were an "unexpected" error, "a bug"."""
    found: list[str] = []
    folder = _folder_problem(settings.data_path)
    if folder is not None:
        found.append(f"server.data_dir {settings.server.data_dir}: {folder} (the embedded database, the HMAC secret "
                     "and Bulk Data's files live in this folder)")
    url = settings.database.url
    if url is None or database_url_problem(url) is not None or not is_embedded(url):
        return found
    database = make_url(url).database
    if not database or database == ":memory:":
        return found
    where = f"database.url (or --database, ${DATABASE_ENV}) {_safe(url)}"
    path = Path(database)
    if path.is_dir():
        found.append(f"{where}: {path} is a directory, not a SQLite database file")
    elif (folder := _folder_problem(path.parent)) is not None:
        found.append(f"{where}: {folder}, where the database's folder should be")
    return found


def file_problems(settings: Settings) -> list[str]:
    """File settings whose file cannot be read as text (a folder, unreadable, not UTF-8: auth.secret_file,
    auth.public_key_file, auth.jwks_file; the HMAC secret server.data_dir/jwt-secret made at the first start), each
    naming its setting, as reading it would."""
    auth = settings.auth
    named = [(f"auth.{key}", getattr(auth, key)) for key in ("secret_file", "public_key_file", "jwks_file")]
    if not auth.secret and not auth.secret_file:
        named.append(("server.data_dir's HMAC secret", str(settings.data_path / "jwt-secret")))
    found: list[str] = []
    for key, value in named:
        if value and Path(value).exists():  # a missing one is its loader's to say (the secret: made at first start)
            try:
                named_text(Path(value), f"{key} {value}:")  # the server's own reading of it, before it serves
            except ConfigError as exc:
                found.append(str(exc))
    return found


def problems(settings: Settings) -> list[str]:
    """Settings that parse but cannot work, each as a message naming the key."""
    server, database = settings.server, settings.database
    found: list[str] = [problem for problem in (database_url_problem(settings.database_url),) if problem]
    found += storage_problems(settings) + file_problems(settings)
    if server.log_format not in LOG_FORMATS:
        found.append(f"server.log_format: expected one of {', '.join(LOG_FORMATS)}, got {server.log_format!r}")
    if server.workers < 1:
        found.append("server.workers: must be at least 1")
    if not 0 < server.port < 65536:
        found.append(f"server.port: {server.port} is not a TCP port")
    if server.metrics_token is not None and len(server.metrics_token) < MIN_METRICS_TOKEN:
        found.append(f"server.metrics_token: use at least {MIN_METRICS_TOKEN} characters (a random string)")
    if database.pool_size < 1:
        found.append("database.pool_size: must be at least 1")
    if database.read_urls and not is_postgresql(settings.database_url):
        found.append("database.read_urls: replicas need a PostgreSQL primary in database.url")
    for i, url in enumerate(database.read_urls, 1):
        if not is_postgresql(url):
            found.append(f"database.read_urls[{i}]: expected postgresql://user@host:port/db, got {_safe(url)!r}")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < open_files_needed(settings):
        found.append(f"server.max_connections: {server.max_connections} connections need about "
                     f"{open_files_needed(settings)} open files but the hard limit (ulimit -Hn) is {hard}: lower "
                     "server.max_connections or raise the limit")
    multiproc = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if multiproc and not (Path(multiproc).is_dir() and os.access(multiproc, os.W_OK)):
        found.append(f"$PROMETHEUS_MULTIPROC_DIR: {multiproc} is not a writable directory")
    return found


def default_account_problem(account: str | None, held: Collection[str], former: Mapping[str, str]) -> str | None:
    """What is wrong with auth.default_account (`account`) given the accounts the database holds (`held`) and the
    names that no longer name one (`former`: Tenancy.former_accounts): a name that is no account would give every
    token without an account claim an empty server (issue 38). None: fine, unset, or a database holding no account
    yet (its first load creates it)."""
    if not account or not held or account in held:
        return None
    if account in former:
        return (f"auth.default_account names account {account!r}, which {former[account]}: tokens without an account "
                "claim would be refused; set it to the account's name now")
    close = difflib.get_close_matches(account, list(held), n=1, cutoff=0.75)
    return (f"auth.default_account names {account!r}, which is no account of this database (accounts: "
            f"{', '.join(sorted(held))}){f'; a typo of {close[0]!r}?' if close else ''}: every token without an "
            "account claim would see an empty server; set it to one of them, or leave it out")


def validate(settings: Settings) -> None:
    found = problems(settings)
    if found:
        raise ConfigError("; ".join(found))


def authorization_server(settings: Settings) -> str:
    """Where partners get tokens (check-config): the configured authorization server, or that there is none."""
    auth = settings.auth
    if not auth.token_endpoint:
        return ("auth: no authorization server configured (auth.token_endpoint unset): no SMART discovery "
                "(/.well-known/smart-configuration answers 404) and clients are told of no token URL")
    scopes = "SMART scopes honoured" if auth.smart_scopes else "SMART scopes not honoured (auth.smart_scopes: false)"
    return f"auth: authorization server token endpoint {auth.token_endpoint}; SMART discovery published; {scopes}"


@dataclass(frozen=True)
class DatabaseCheck:
    name: str                 # primary, replica1, ...
    url: str                  # without its password
    reachable: bool
    revision: Mapping[str, str | None] | None
    head: Mapping[str, str | None]
    error: str | None = None
    chains: tuple[ChainState, ...] = ()  # each chain of the schema as this database recorded it (when reachable)

    @property
    def current(self) -> bool:
        return self.reachable and self.revision == self.head

    @property
    def has_schema(self) -> bool:
        """Reachable and holding some version of this server's schema (an older one is migrated)."""
        return self.reachable and any((self.revision or {}).values())

    @property
    def where(self) -> str:
        return f"database {self.name} ({self.url})"

    @property
    def stale(self) -> tuple[ChainState, ...]:
        """The chains not at their head: behind (a plugin newly enabled: never migrated), or past what this
        server knows."""
        return tuple(chain for chain in self.chains if not chain.current)

    @property
    def migratable(self) -> bool:
        """Every chain not at its head is behind it: `migrate` (and serve, on the embedded database) brings it
        there; a revision this server does not know cannot be migrated."""
        return all(chain.behind for chain in self.stale)

    def describe(self) -> str:
        where = self.where
        if not self.reachable:
            return f"{where}: unreachable: {self.error}"
        if not self.has_schema:
            return (f"{where}: holds no schema of this server (a typo in the URL, or a database never loaded?); "
                    f"{CREATE_IT}")
        if not self.current:
            if not self.stale:  # made without its chains: the whole schema at once
                return (f"{where}: schema at {describe(self.revision or {})} but this server needs "
                        f"{describe(self.head)}: {MIGRATE_IT}")
            return (f"{where}: {'; '.join(chain.describe() for chain in self.stale)}: "
                    f"{MIGRATE_IT if self.migratable else NEWER_SCHEMA}")
        return f"{where}: reachable, schema current (each chain at its head): {describe(self.revision or {})}"

    def lines(self, embedded: bool) -> list[tuple[bool, str]]:
        """check-config's lines for this database, ok or not: one per chain not at its head (which plugin's, at
        which revision, which head, and what to run), else one for the database."""
        if not self.reachable or not self.has_schema or self.current or not self.stale:
            return [(self.current, self.describe())]
        return [(False, (f"{self.where}: {chain.describe()}: "
                         f"{(SERVE_MIGRATES if embedded else MIGRATE_IT) if chain.behind else NEWER_SCHEMA}"))
                for chain in self.stale]


MIGRATE_IT = ("run `orgunit-fhir migrate --database <url>` with a role that may alter the schema (until then serve "
              "refuses this database and /readyz answers 503)")
SERVE_MIGRATES = ("`orgunit-fhir serve` migrates this embedded database when it starts (`load` and `demo` too); "
                  "`orgunit-fhir migrate` does it now")


def serving_targets(settings: Settings) -> tuple[Target, ...]:
    """Every database `serve` may read from: the replicas first, then the primary."""
    return (*replica_targets(settings.database.read_urls, normalize_url),
            Target(PRIMARY, normalize_url(settings.database_url)))


def check_database(target: Target, schema: Schema, timeout_s: int = 5) -> DatabaseCheck:
    head = schema.heads()
    try:
        connect_args = backend_of(target.url).connect_args(timeout_ms=None, connect_timeout_s=timeout_s)
        engine = translate_errors(create_engine(target.url, connect_args=connect_args, poolclass=NullPool))
    except (ArgumentError, ImportError, ValueError) as exc:  # not a URL of ours: problems() names it
        return DatabaseCheck(target.name, _safe(target.url), False, None, head, f"{type(exc).__name__}: {exc}")
    try:
        with engine.connect() as conn:
            revision = schema.current(conn)
    except StorageError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return DatabaseCheck(target.name, _safe(target.url), False, None, head, detail)
    finally:
        engine.dispose()
    return DatabaseCheck(target.name, _safe(target.url), True, revision, head, chains=schema.states(revision))


def check_primary(settings: Settings, schema: Schema) -> DatabaseCheck:
    """The check of the database that commands write (and `serve` migrates, when it is embedded)."""
    return check_database(serving_targets(settings)[-1], schema)


def check_serving_databases(settings: Settings, schema: Schema) -> list[DatabaseCheck]:
    """The checks of `serve` at start-up: it refuses a schema that is behind, and starts as long as one
    database answers (a replica that is down is skipped until it returns)."""
    checks = [check_database(t, schema) for t in serving_targets(settings)]
    behind = [c for c in checks if c.reachable and not c.current]
    if behind:
        raise ConfigError("; ".join(c.describe() for c in behind))
    if not any(c.reachable for c in checks):
        raise ConfigError("; ".join(c.describe() for c in checks))
    return checks


def embedded_database_missing(settings: Settings) -> bool:
    url = make_url(settings.database_url)
    return is_embedded(settings.database_url) and bool(url.database) and not Path(str(url.database)).exists()


CREATE_IT = ("create it with `orgunit-fhir migrate` (an empty database), `orgunit-fhir load ...` (your data) or "
             "`orgunit-fhir demo` (the synthetic demo)")


def embedded_file(settings: Settings) -> str:
    """The SQLite file the URL names, absolute."""
    return str(Path(str(make_url(settings.database_url).database)).resolve())


def embedded_path(settings: Settings) -> str:
    """The SQLite file the URL names, absolute; a relative one (sqlite:///dir/x.db: three slashes) says so."""
    named = Path(str(make_url(settings.database_url).database))
    relative = "" if named.is_absolute() else (f" (sqlite:/// with three slashes is relative to the current folder; "
                                               f"four, sqlite:///{embedded_file(settings)}, is absolute)")
    return f"{embedded_file(settings)}{relative}"


def missing_database(settings: Settings) -> str:
    """Why a command that never creates a database refuses a SQLite file that does not exist (a typo'd path)."""
    return f"the database {embedded_path(settings)} does not exist (a typo in the path?); {CREATE_IT}"


def no_schema(settings: Settings) -> str:
    return (f"the database {_safe(settings.database_url)} holds no schema of this server (a typo in the URL, or a "
            f"database never loaded?); {CREATE_IT}")


def _masked(text: str) -> str:
    """A string that is not a URL, its password (anything between ':' and '@') masked."""
    return re.sub(r"(?<=:)[^:@/]+(?=@)", "***", text)


def _safe(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(not a URL)"
