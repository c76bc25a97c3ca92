"""settings.yaml + environment -> frozen dataclasses, validated once at start-up."""
from __future__ import annotations

import os
from functools import cached_property
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from server.errors import ConfigError

SETTINGS_ENV = "ORGUNIT_FHIR_SETTINGS"
DATABASE_ENV = "ORGUNIT_FHIR_DATABASE_URL"
ACCESS_LOG_ENV = "ORGUNIT_FHIR_ACCESS_LOG"  # "0": server.access_log off (how `serve --no-access-log` tells its workers)
DEFAULT_SETTINGS_FILE = "settings.yaml"


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    base_url: str | None = None
    trust_forwarded: bool = False
    data_dir: str = "./var"
    cors_origins: tuple[str, ...] = ()
    max_url_length: int = 8192          # longer request targets answer 414
    rate_limit_per_minute: int = 0      # per subject; 0 = off (429 throttled with Retry-After)
    audit_log: bool = True              # one JSON line per request on the orgunit_fhir.audit logger
    access_log: bool = True             # one line per HTTP request on the orgunit_fhir.access logger
    log_format: str = "json"            # json | text
    metrics_token: str | None = None    # bearer token that /metrics requires; unset: /metrics only from loopback
    shutdown_grace_seconds: int = 30    # SIGTERM: how long in-flight requests may take to finish
    explorer_tile_url: str | None = None  # map tiles of the explorer (https://.../{z}/{x}/{y}.png); unset: none
    # limits at the edge (server.http.protocol), per worker
    max_header_bytes: int = 32_768      # the header fields of a request, in all; past it 431, the connection closed
    header_timeout_seconds: int = 10    # a request's line and headers must arrive within this; else 408, closed
    max_connections: int = 1000         # open connections; past it only /healthz and /readyz are served
    write_timeout_seconds: int = 30     # output that has not drained for this long: the connection is closed
    # costly searches (server.search.cost): their own, smaller share of the workers
    costly_search_cost: int = 20        # a search whose estimated cost reaches this is costly
    costly_searches: int = 2            # costly searches running at once (per worker)
    costly_search_wait_seconds: int = 10  # a costly search waits this long for its turn; then 503 with Retry-After
    request_timeout_seconds: int = 15   # a request's database time in all (its statements together); then 503


@dataclass(frozen=True)
class DatabaseSettings:
    url: str | None = None
    pool_size: int = 5
    statement_timeout_ms: int = 10_000
    read_urls: tuple[str, ...] = ()     # read replicas for `serve`; load/migrate always write to `url`
    replica_retry_seconds: int = 10     # a replica that refused a connection is skipped this long
    connect_timeout_seconds: int = 5    # a connection not made within this fails (503); also bounds a silent one


@dataclass(frozen=True)
class AuthSettings:
    algorithms: tuple[str, ...] = ("HS256",)
    secret: str | None = None
    secret_file: str | None = None
    public_key_file: str | None = None
    jwks_file: str | None = None
    jwks_url: str | None = None
    issuer: str | None = None
    audience: str | None = None
    leeway: int = 30
    permission: str = "service_org_units"
    permission_claim: str = "permissions"
    public_metadata: bool = False
    account_claim: str = "account"      # dotted path of the claim naming the caller's account (tenant)
    default_account: str | None = None  # account of a token without that claim; unset: the first loaded (recorded)
    roots_claim: str = "org_unit_roots" # claim listing org unit ids or system|value identifiers (subtree scope)
    max_token_bytes: int = 8192
    jwks_timeout_seconds: int = 5
    jwks_cache_seconds: int = 3600      # keys kept this long; an unknown kid refetches at most once per
    jwks_refetch_seconds: int = 30      # this many seconds
    # SMART scopes (system/Location.rs, system/*.read) narrow a token per resource type and interaction
    smart_scopes: bool = True           # false: scopes are not honoured (the permission alone decides)
    scope_claims: tuple[str, ...] = ("scope", "scp")  # claims holding scopes: space-separated or a list
    other_scopes: tuple[str, ...] = ()  # an identity provider's own scopes, known beside SMART scopes with a query
    # the authorization server's public URLs (SMART discovery, CapabilityStatement oauth-uris); no token_endpoint:
    # no authorization server is configured and /.well-known/smart-configuration answers 404
    token_endpoint: str | None = None
    authorization_endpoint: str | None = None
    revocation_endpoint: str | None = None
    introspection_endpoint: str | None = None
    jwks_uri: str | None = None         # the key set clients are told of; default: jwks_url
    token_endpoint_auth_methods: tuple[str, ...] = ("private_key_jwt",)
    token_endpoint_auth_signing_algs: tuple[str, ...] = ("RS384", "ES384")

    def discovery_urls(self) -> dict[str, str]:
        """The authorization server's URLs that are configured, by their discovery (RFC 8414) names."""
        urls = {"token_endpoint": self.token_endpoint, "authorization_endpoint": self.authorization_endpoint,
                "revocation_endpoint": self.revocation_endpoint, "introspection_endpoint": self.introspection_endpoint,
                "jwks_uri": self.jwks_uri or self.jwks_url}
        return {name: url for name, url in urls.items() if url}


@dataclass(frozen=True)
class FhirSettings:
    extension_namespace: str = "https://orgunit-fhir.example.org"
    default_count: int = 20
    max_count: int = 100
    total_threshold: int = 1_000  # searches count their matches exactly up to this many (else Bundle.total is left out)
    software_name: str = "orgunit-fhir"
    publisher: str | None = None
    # a search (history, operation) naming a parameter the server does not know: `refuse` answers 400 naming it (a
    # client's filter never silently widened to everything), unless the request sends Prefer: handling=lenient;
    # `ignore` answers without it, a warning OperationOutcome entry in the Bundle, unless Prefer: handling=strict
    unknown_parameters: str = "refuse"


FHIR_MOUNT = "/fhir"  # the path the FHIR API is served under ([base] ends with it)


@dataclass(frozen=True)
class FhirApi:
    """The FHIR API as HTTP serves it, in one object: where it is mounted and how its pages are sized (`_count`:
    default and most; larger values are clamped). Settings.api is the configured one."""

    mount: str = FHIR_MOUNT
    default_count: int = 20
    max_count: int = 100

    def path(self, tail: str = "") -> str:
        """A route or link path under the mount: path("/metadata") is /fhir/metadata."""
        return f"{self.mount}{tail}"


@dataclass(frozen=True)
class BulkSettings:
    """Bulk Data `$export` (server.bulk): where its files go and how long they are kept."""
    enabled: bool = True
    directory: str | None = None        # NDJSON files of the jobs; default: data_dir/bulk (shared by every worker)
    file_resources: int = 100_000       # resources per file (a type with more gets several files)
    expire_seconds: int = 3600          # a job and its files are removed this long after it was started
    max_running: int = 2                # jobs running at once (every worker); past it a kick-off answers 429
    max_running_per_account: int = 0    # jobs of one account at once (429); 0: max_running - 1 (at least 1),
                                        # so no account takes every slot
    job_timeout_seconds: int = 600      # a job's database time in all; past it the job fails (its status 500)
    poll_seconds: int = 1               # Retry-After of a status poll while the job runs

    @property
    def account_slots(self) -> int:
        """Jobs of one account that may run at once."""
        if self.max_running_per_account:
            return self.max_running_per_account
        return max(1, self.max_running - 1)


@dataclass(frozen=True)
class PluginConfig:
    enabled: bool = True
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Settings:
    server: ServerSettings = ServerSettings()
    database: DatabaseSettings = DatabaseSettings()
    auth: AuthSettings = AuthSettings()
    fhir: FhirSettings = FhirSettings()
    bulk: BulkSettings = BulkSettings()
    plugins: Mapping[str, PluginConfig] = field(default_factory=lambda: MappingProxyType({}))
    source: str | None = None

    @cached_property
    def api(self) -> FhirApi:
        """The FHIR API's mount and page limits, one object every parser and route takes."""
        return FhirApi(FHIR_MOUNT, self.fhir.default_count, self.fhir.max_count)

    @property
    def data_path(self) -> Path:
        return Path(self.server.data_dir)

    @property
    def database_url(self) -> str:
        if self.database.url:
            return self.database.url
        return f"sqlite:///{self.data_path / 'orgunits.db'}"

    def plugin_config(self, name: str) -> Mapping[str, Any]:
        plugin = self.plugins.get(name)
        return plugin.config if plugin else MappingProxyType({})

    def disabled_plugins(self) -> tuple[str, ...]:
        return tuple(name for name, plugin in self.plugins.items() if not plugin.enabled)

    def with_database(self, url: str | None) -> Settings:
        return self if not url else replace(self, database=replace(self.database, url=url))

    def without_access_log(self) -> Settings:
        return replace(self, server=replace(self.server, access_log=False))


def _section(cls: type, raw: Any, where: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        default = getattr(cls(), key)
        values[key] = _coerce(value, default, f"{where}.{key}")
    return cls(**values)


def _coerce(value: Any, default: Any, where: str) -> Any:
    if value is None:
        return None
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: expected a non-negative integer, got {value!r}")
        return value
    if isinstance(default, tuple):
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
        return tuple(items)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _plugins(raw: Any) -> Mapping[str, PluginConfig]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, dict):
        raise ConfigError("plugins: expected a mapping of plugin name -> {enabled, config}")
    out: dict[str, PluginConfig] = {}
    for name, spec in raw.items():
        if isinstance(spec, bool):
            out[name] = PluginConfig(enabled=spec)
            continue
        spec = spec or {}
        if not isinstance(spec, dict) or set(spec) - {"enabled", "config"}:
            raise ConfigError(f"plugins.{name}: expected keys 'enabled' and 'config', got {spec!r}")
        enabled = spec.get("enabled", True)
        config = spec.get("config") or {}
        if not isinstance(enabled, bool) or not isinstance(config, dict):
            raise ConfigError(f"plugins.{name}: 'enabled' must be true/false and 'config' a mapping")
        out[name] = PluginConfig(enabled=enabled, config=MappingProxyType(dict(config)))
    return MappingProxyType(out)


def parse_settings(raw: Mapping[str, Any] | None, source: str | None = None) -> Settings:
    raw = dict(raw or {})
    sections = {"server": ServerSettings, "database": DatabaseSettings, "auth": AuthSettings, "fhir": FhirSettings,
                "bulk": BulkSettings}
    unknown = sorted(set(raw) - set(sections) - {"plugins"})
    if unknown:
        raise ConfigError(f"unknown settings section(s) {', '.join(unknown)}; known: {', '.join(sorted([*sections, 'plugins']))}")
    settings = Settings(
        **{name: _section(cls, raw.get(name), name) for name, cls in sections.items()},
        plugins=_plugins(raw.get("plugins")),
        source=source,
    )
    if settings.fhir.max_count < 1 or not 0 < settings.fhir.default_count <= settings.fhir.max_count:
        raise ConfigError("fhir: default_count must be between 1 and max_count")
    if settings.fhir.unknown_parameters not in ("refuse", "ignore"):
        raise ConfigError(f"fhir.unknown_parameters must be refuse or ignore, not {settings.fhir.unknown_parameters!r}")
    if settings.fhir.total_threshold < 1:
        raise ConfigError("fhir.total_threshold must be at least 1 (searches count their matches up to it)")
    if settings.fhir.extension_namespace.endswith("/") or "://" not in settings.fhir.extension_namespace:
        raise ConfigError("fhir.extension_namespace must be an absolute URL without a trailing slash")
    if settings.server.base_url and "://" not in settings.server.base_url:
        raise ConfigError("server.base_url must be an absolute URL such as https://registry.example.org/fhir")
    tiles = settings.server.explorer_tile_url
    if tiles is not None and not (tiles.startswith(("https://", "http://")) and "{z}" in tiles):
        raise ConfigError("server.explorer_tile_url must be an http(s) URL template with {z}, {x} and {y}")
    auth = settings.auth
    for name in ("token_endpoint", "authorization_endpoint", "revocation_endpoint", "introspection_endpoint",
                 "jwks_uri"):
        url = getattr(auth, name)
        if url is not None and not url.lower().startswith(("https://", "http://")):
            raise ConfigError(f"auth.{name}: expected an http(s) URL, got {url!r}")
    if not auth.token_endpoint and (auth.authorization_endpoint or auth.revocation_endpoint
                                    or auth.introspection_endpoint):
        raise ConfigError("auth: authorization_endpoint, revocation_endpoint and introspection_endpoint describe an "
                          "authorization server: set its auth.token_endpoint too")
    bulk = settings.bulk
    if min(bulk.file_resources, bulk.max_running, bulk.max_running_per_account + 1, bulk.poll_seconds,
           bulk.job_timeout_seconds) < 1:
        raise ConfigError("bulk: file_resources, max_running, poll_seconds and job_timeout_seconds must be at least 1, "
                          "max_running_per_account at least 0")
    for section, key in (("server", "max_header_bytes"), ("server", "header_timeout_seconds"),
                         ("server", "write_timeout_seconds"), ("server", "request_timeout_seconds"),
                         ("server", "max_connections"), ("server", "costly_search_cost"), ("server", "costly_searches"),
                         ("database", "connect_timeout_seconds")):
        if getattr(getattr(settings, section), key) < 1:
            raise ConfigError(f"{section}.{key}: must be at least 1")
    if not all(auth.scope_claims):
        raise ConfigError("auth.scope_claims: claim names must not be empty")
    return settings


def named_text(path: Path, named: str, kind: str = "a file") -> str:
    """The UTF-8 text of a file a setting names (`named`: how a message names it); ConfigError when it is a
    directory, cannot be read or is not UTF-8 text. A missing file raises FileNotFoundError: the caller says what
    that means."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise ConfigError(f"{named} is a directory, not {kind}") from None
    except OSError as exc:
        raise ConfigError(f"{named} cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{named} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def load_settings(path: str | os.PathLike[str] | None = None, database_url: str | None = None) -> Settings:
    """Read the settings file (argument, $ORGUNIT_FHIR_SETTINGS, ./settings.yaml, else defaults); the database URL
    from the argument, else $ORGUNIT_FHIR_DATABASE_URL, else the file. An empty argument or variable counts as
    unset (`ORGUNIT_FHIR_SETTINGS=` falls back to ./settings.yaml, then the defaults)."""
    given = os.fspath(path) if path is not None else ""
    chosen, origin = ((given, "--settings") if given else
                      (os.environ.get(SETTINGS_ENV, ""), f"${SETTINGS_ENV}") if os.environ.get(SETTINGS_ENV) else
                      (DEFAULT_SETTINGS_FILE, "the current folder") if Path(DEFAULT_SETTINGS_FILE).exists() else
                      ("", ""))
    raw: Any = {}
    if chosen:
        named = f"settings file {chosen} (from {origin})"
        try:
            raw = yaml.safe_load(named_text(Path(chosen), named, "a YAML file")) or {}
        except FileNotFoundError:
            raise ConfigError(f"{named} does not exist") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{named} is not valid YAML: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{named} must hold a mapping")
    settings = parse_settings(raw, chosen or None)
    if os.environ.get(ACCESS_LOG_ENV) == "0":
        settings = settings.without_access_log()
    return settings.with_database(database_url or os.environ.get(DATABASE_ENV) or None)
