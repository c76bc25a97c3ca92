"""What a provider declares: a resource type, where its rows live, how a row becomes a resource,
its typed search parameters bound to columns, and its operations. The engine does the rest."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

import orjson
from sqlalchemy import ColumnElement, Connection, FromClause, Select
from sqlalchemy.engine import RowMapping

from server.declare.lookup import Lookup
from server.errors import ConfigError
from server.params.param import SearchParam
from server.params.types.date import DateTarget
from server.params.types.reference import ReferenceTarget as ReferenceTarget  # re-exported
from server.params.types.base import Through
from server.params.types.token import TokenTarget

if TYPE_CHECKING:  # what the engine hands an operation's handler (the engine sits above the declarations)
    from server.engine.caller import Caller
    from server.engine.context import ServerContext

NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
RESOURCE_TYPE_RE = re.compile(r"^[A-Z][A-Za-z]+$")


OperationLevel = Literal["system", "type", "instance"]


@dataclass(frozen=True)
class OperationCall:
    """What an operation's handler is called with. A provider's operation: the instance (at the instance level)
    exists and is visible to the caller, else the caller got 404 or 410 before; the handler keeps to `visible` for
    anything else it reads. A server-wide operation (the `register_operations` hook) has no provider and no
    `visible` (None), at any level: it reads with `connection` each type as `visible_to` says the caller may."""

    provider: ResourceProvider | None  # None: a server-wide operation's call
    id: str | None  # the instance's id; None: a type-level or system-level call
    stored_id: Any  # the same id as the id column holds it (None but at the instance level)
    parameters: tuple[tuple[str, str], ...]  # the query's parameters, but _format and _pretty
    strict: bool  # Prefer: handling=strict: refuse parameters the operation does not know (400)
    opened: Callable[[], Connection]  # the serving connection, opened at its first use (OperationCall.connection)
    visible: ColumnElement[bool] | None  # the caller's scope on the provider's rows; None: every row
    base: str  # the service base URL, for fullUrls and references
    level: OperationLevel = "instance"
    resource_type: str | None = None  # the type of a type- or instance-level call
    segments: Mapping[str, str] = field(default_factory=dict)  # the values of the operation's `path` segments
    headers: Mapping[str, str] = field(default_factory=dict)  # the request's headers (lower-case names)
    url: str = ""  # the request as sent: [base]/... and its query
    caller: Caller | None = None  # who asks, admitted (its principal, account and scope)
    server: ServerContext | None = None  # the server's context (its settings, registry, database)
    permitted: Callable[[str], bool] = lambda resource_type: True  # the token grants the operation's scope on it
    denial: Callable[[str], str | None] = lambda resource_type: None  # why not (the scope it lacks)
    count: int | None = None  # a paged operation's page: _count (clamped to fhir.max_count) and _skip
    skip: int = 0
    # the caller's scope on another type's rows (a condition on its table; None: every row), for what the handler
    # reads beside its own type (an $everything); 404 for a type without rows
    visible_to: Callable[[str], ColumnElement[bool] | None] = lambda resource_type: None
    # finds resources of any type as the caller may see them, through a search (server.declare.lookup): what a
    # handler reads of another provider without knowing its tables
    lookup: Lookup | None = None

    @property
    def connection(self) -> Connection:
        """The serving connection (opened at the first use: a handler that reads nothing through it opens none):
        read with it, never write."""
        return self.opened()


@dataclass(frozen=True)
class Operation:
    """`[type]/[id]/$name`, answered either as a named search (`param`: the reference search parameter the
    instance id is bound to, e.g. children: partof) or by `handler`, called with an OperationCall, whose FHIR
    dict (a Parameters resource, a Bundle...) or plain Answer (server.declare.answer) is the answer. A handler
    may serve the instance level, the type level (`[type]/$name`), and, for an operation of the
    `register_operations` hook (server-wide: every type), the system level (`[base]/$name`) (`levels`).

    `scope`: the SMART letter the caller's token must grant on the type (`s`: search and operations, `r`: read);
    the pipeline checks it at the type and instance level, as it checks reads, and at the system level
    `OperationCall.permitted` answers it per type. `path`: names of path segments after `$name`
    (`[base]/$name/{a}/{b}`, in OperationCall.segments). `media_types`: what besides FHIR JSON and XML an `Accept`
    may ask for (the answer is then the handler's, whatever the format). `paged`: the answer is a searchset Bundle
    paged by `_count`/`_skip` (server.paged_bundle builds it); its `_count` is documented as a search's."""

    name: str
    param: str | None
    documentation: str
    definition: str
    handler: Callable[[OperationCall], Any] | None = None
    levels: frozenset[OperationLevel] = frozenset({"instance"})
    scope: Literal["r", "s"] = "s"
    path: tuple[str, ...] = ()
    media_types: frozenset[str] = frozenset()
    paged: bool = False


def snapshot_of(stored: Any) -> Any:
    """A version's snapshot as `to_resource` takes it: a `JSON` column's value as it comes back, JSON text (a `Text`
    or binary column holding `json.dumps(...)`) decoded. The one place old versions are read for rendering (vread,
    `_history`, Bulk Data, pre-rendering); a stored text that is not JSON is the provider's error, raised naming the
    column's content."""
    if isinstance(stored, bytes | bytearray | memoryview):
        stored = bytes(stored).decode("utf-8")
    if isinstance(stored, str):
        try:
            return orjson.loads(stored)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"a version's snapshot is text that is not JSON ({stored[:40]!r}...): write "
                             "json.dumps(...) of what to_resource reads, or declare the column JSON") from exc
    return stored


@dataclass(frozen=True)
class Versioning:
    """How the provider keeps versions: current-row columns, and a table with one row per version
    holding what `to_resource` takes (as JSON), or a deletion. `history_snapshot` is a `JSON` column (its value comes
    back decoded), or a text or binary one holding JSON text (`json.dumps(...)`), which the engine decodes
    (`snapshot_of`) before `to_resource` or `Prerendered.storable` sees it."""

    version: ColumnElement[Any]
    last_updated: ColumnElement[Any]
    deleted: ColumnElement[Any]
    history: FromClause
    history_id: ColumnElement[Any]
    history_version: ColumnElement[Any]
    history_updated: ColumnElement[Any]
    history_deleted: ColumnElement[Any]
    history_snapshot: ColumnElement[Any]
    # selects (one row, one column) the instant of the newest change ever stamped that the history table no longer
    # holds (a purge erased its versions); the sync point (Bundle.meta.lastUpdated, Bulk Data's transactionTime) never
    # goes below it, so it never goes back. None: versions are never erased
    high_water: Select[Any] | None = None


@dataclass(frozen=True)
class CurrentBodies:
    """A table the engine keeps with each resource's current stored body, one row per id (its primary key, `id`),
    beside the version it is the body of: a page or an include reads it by id, one lookup, where the history is
    read by id and version among every version's snapshot and body. The engine writes it as it stores bodies
    (server.storage.prerender) and empties it when the bodies are made again; a row serves only while its `version`
    is the resource's current version (a newer version is rendered per request until its body is stored)."""

    id: ColumnElement[Any]
    version: ColumnElement[Any]
    body: ColumnElement[Any]


@dataclass(frozen=True)
class Prerendered:
    """Each version rendered once (`to_resource` of its snapshot, as compact JSON) into `body`, a column of the
    versioning's history table, and spliced into responses. `fingerprint` names everything besides the snapshot
    that the rendering depends on (settings, code): the engine re-renders when it changes. `storable(snapshot)`
    says whether a rendering stays right as time passes (a false one is rendered per request)."""

    body: ColumnElement[Any]
    fingerprint: str
    storable: Callable[[Mapping[str, Any]], bool] = lambda snapshot: True
    # when the search columns leave something out (a large element): the rows whose body also serves search pages
    in_search: ColumnElement[bool] | None = None
    # the current versions' bodies in a table of their own, read by search pages and includes (None: the history's)
    current: CurrentBodies | None = None


@dataclass(frozen=True)
class Subtree:
    """Scoped by its own materialized path "/root/.../self/" (`path`, a column of the provider's table): a token's
    roots of this type (`Type/id`) limit the caller to their subtrees. `roots_by`, a token search parameter, also
    resolves roots written `system|value`; the one provider with `roots_by` is the type of bare-id roots."""

    path: ColumnElement[Any]
    roots_by: str | None = None


@dataclass(frozen=True)
class Via:
    """Scoped through a reference: a row is visible when the `resource_type` resource its reference search
    parameter `param` points at is visible to the caller (for a multi-valued reference: any of them).

    `reverse`: the other way round (`_has`-style): `param` is a reference parameter of `resource_type` pointing at
    this provider, and a row is visible when a live `resource_type` resource the caller sees refers to it
    (Practitioner through `PractitionerRole.practitioner`). Hops chain: `resource_type` may itself be scoped `via`
    another type (a Practitioner through its roles, each role through its `location`).

    `versions`: where each kept version of this (versioned) provider holds the reference as that version had it:
    a ReferenceTarget whose column is a column of the versioning's history table, or (`through=`) of a side table
    with one row per version and reference (`Through(table, key=<the resource's id>, version=<the version>)`).
    Each version is then visible by what it referenced (vread, `_history`), not by the current row."""

    param: str
    resource_type: str
    reverse: bool = False
    versions: ReferenceTarget | None = None


@dataclass(frozen=True)
class VersionScope:
    """Where each kept version of a provider scoped by its own rows holds what scoped it while it was current:
    columns of the versioning's history table. `partition`: the version's partition (its account, its served
    source version), needed when the tenancy declares a partition; `path`: its materialized path, needed when the
    tenancy declares a subtree. The writer keeps the current version's row equal to the current row's (a unit
    whose ancestor moves gets a new version with its new path, so that the subtree it left is told and the one it
    entered receives it; a deleted row's current version has its path changed with its own). Each version is then shown to the
    callers who could read it while it was current (vread, `_history`), whatever the current row holds now."""

    partition: ColumnElement[Any] | None = None
    path: ColumnElement[Any] | None = None


@dataclass(frozen=True)
class Tenancy:
    """Who sees which rows. Every row belongs to a partition (`partition`, a column of the provider's table);
    `partitions` selects (partition key, account, served) for every partition: a caller sees the rows of the
    served partitions of its account only. How a token limited to subtrees applies: `subtree` (the provider's
    own path), `via` (through a reference to a scoped provider) or neither (account only: such a token sees none
    of its rows). A provider scoped `via` a reference may leave out partitions: the referenced provider's account
    then decides alone. Anything the engine cannot apply matches nothing. `first_account` selects (one row, one
    column) the account a token naming none sees (the first one loaded, as the data records it: never derived from
    rows a removal deletes), so that adding an account never changes what existing tokens see; once it holds no
    partition such a token is refused (403 naming it), and without it such a token is refused when the server holds
    several. `former_accounts` selects (account, what became of it, in words: "was renamed 'kenya'") for the names a
    token may still claim that no longer name an account: such a token is refused, 403 naming what happened, never
    served an empty answer (and `check-config` fails, `serve` refuses, when auth.default_account names one)."""

    partition: ColumnElement[Any] | None = None
    partitions: Select[Any] | None = None
    subtree: Subtree | None = None
    via: Via | None = None
    first_account: Select[Any] | None = None
    former_accounts: Select[Any] | None = None
    versions: VersionScope | None = None  # a versioned provider's scope of each kept version (VersionScope)

    def scoped_per_version(self, versioning: Versioning | None) -> bool:
        """Whether every kept version can be scoped by what scoped it while current: a partition and a subtree per
        version (VersionScope), a reference per version (Via.versions). Else, to a caller narrowed by it, the
        history shows the current version alone (the one it provably may read)."""
        if versioning is None:
            return False
        own = self.versions or VersionScope()
        return (self.partition is None or own.partition is not None) and \
            (self.subtree is None or own.path is not None) and \
            (self.via is None or self.via.versions is not None)

    @property
    def path(self) -> ColumnElement[Any] | None:
        """The materialized path column (subtree scoping), else None."""
        return self.subtree.path if self.subtree is not None else None


LAST_UPDATED = "http://hl7.org/fhir/SearchParameter/Resource-lastUpdated"
RESOURCE_ID = "http://hl7.org/fhir/SearchParameter/Resource-id"


@dataclass(frozen=True)
class ResourceProvider:
    resource_type: str
    table: FromClause
    id_column: ColumnElement[Any]
    columns: tuple[ColumnElement[Any], ...]
    to_resource: Callable[[RowMapping], dict[str, Any]]
    search_params: tuple[SearchParam, ...] = ()
    operations: tuple[Operation, ...] = ()
    from_clause: FromClause | None = None  # the table joined with what to_resource needs
    search_columns: tuple[ColumnElement[Any], ...] | None = None  # fewer columns for search pages (default: columns)
    versioning: Versioning | None = None
    last_updated: ColumnElement[Any] | None = None  # default: versioning.last_updated; gives _lastUpdated
    # element -> resource type of the references to_resource writes there (e.g. managingOrganization ->
    # Organization); when no provider serves that type, the engine leaves the `reference` out
    references: Mapping[str, str] = field(default_factory=dict)
    prerendered: Prerendered | None = None  # needs versioning
    tenancy: Tenancy | None = None  # None: every caller sees every row
    profile: str | None = None
    documentation: str | None = None
    params_by_name: Mapping[str, SearchParam] = field(init=False, repr=False, compare=False)
    operations_by_name: Mapping[str, Operation] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        params = {"_id": SearchParam("_id", "token", (TokenTarget(self.id_column),),
                                     "Logical id; a comma gives several (OR)", RESOURCE_ID, sort=self.id_column)}
        params.update({p.name: p for p in self.search_params})
        last_updated = self.last_updated if self.last_updated is not None else (
            self.versioning.last_updated if self.versioning is not None else None)
        if last_updated is not None:
            params["_lastUpdated"] = SearchParam(
                "_lastUpdated", "date", (DateTarget(last_updated),),
                "When the resource last changed: eq, ne, gt, lt, ge, le, sa, eb with a date or instant, a time with "
                "its zone, at any precision (2025, 2025-03, 2025-03-04, 2025-03-04T10:20:30.123Z); "
                "_lastUpdated=ge<the last Bundle's meta.lastUpdated> is a sync", LAST_UPDATED, sort=last_updated)
        object.__setattr__(self, "params_by_name", params)
        object.__setattr__(self, "operations_by_name", {o.name: o for o in self.operations})

    @property
    def source(self) -> FromClause:
        return self.from_clause if self.from_clause is not None else self.table

    def version_resource(self, stored: Any) -> dict[str, Any]:
        """An old version's resource: `to_resource` of its snapshot as stored in `history_snapshot` (JSON text
        decoded: `snapshot_of`)."""
        return self.to_resource(snapshot_of(stored))

    def check(self) -> None:
        """Refuse a bad declaration at start-up rather than at the first request."""
        where = f"provider {self.resource_type}"
        if not RESOURCE_TYPE_RE.match(self.resource_type):
            raise ConfigError(f"{where}: resource type must look like 'Location'")
        if len({p.name for p in self.search_params}) != len(self.search_params):
            raise ConfigError(f"{where}: duplicate search parameter names")
        if len(self.operations_by_name) != len(self.operations):
            raise ConfigError(f"{where}: duplicate operation names")
        for param in self.search_params:
            if not NAME_RE.match(param.name):
                raise ConfigError(f"{where}: search parameter {param.name!r} is not a valid name")
            problem = param.problem()
            if problem is not None:
                raise ConfigError(f"{where}: search parameter {param.name} {problem}")
            for target in param.targets:
                self._check_columns(param, target, where)
        if self.tenancy is not None:
            self._check_tenancy(self.tenancy, where)
        if self.prerendered is not None and self.versioning is None:
            raise ConfigError(f"{where}: prerendered bodies are kept per version: declare versioning too")
        current = self.prerendered.current if self.prerendered is not None else None
        tables = [getattr(c, "table", None) for c in (current.id, current.version, current.body)] if current else []
        if current is not None and (None in tables or len(set(tables)) != 1):
            raise ConfigError(f"{where}: Prerendered.current: id, version and body are columns of one table")
        for op in self.operations:
            if not NAME_RE.match(op.name):
                raise ConfigError(f"{where}: operation {op.name!r} is not a valid name")
            if (op.param is None) == (op.handler is None):
                raise ConfigError(f"{where}: operation {op.name} is a search (param) or has a handler, not both")
            if not op.levels or not op.levels <= {"instance", "type"} or \
                    (op.handler is None and op.levels != {"instance"}):
                raise ConfigError(f"{where}: operation {op.name}: levels are instance and/or type (a handler's)")
            bound = self.params_by_name.get(op.param) if op.param is not None else None
            if op.param is not None and (bound is None or not bound.referenced_types):
                raise ConfigError(f"{where}: operation {op.name} must bind a reference search parameter, not {op.param!r}")

    def _check_columns(self, param: SearchParam, target: Any, where: str) -> None:
        """A target reads the provider's rows (its table, or its from_clause) or its side table (`through=`): a
        column of any other table would be read beside them, every pair of rows (a multi-valued reference declared
        without its side table matches every resource): refused at start-up, named."""
        through = getattr(target, "through", None)
        rows = through.table if through is not None else self.source
        for name in (f.name for f in fields(target)):
            value = getattr(target, name)
            if not isinstance(value, ColumnElement):
                continue
            foreign = [c for c in Through.columns_of(value) if not rows.c.contains_column(c)]
            if foreign:
                held = "its side table (through=)" if through is not None else \
                    "the provider's table or from_clause (a value held in a side table needs through=Through(...))"
                raise ConfigError(f"{where}: search parameter {param.name} reads {', '.join(map(str, foreign))}, "
                                  f"not a column of {held}")

    def _check_tenancy(self, tenancy: Tenancy, where: str) -> None:
        if tenancy.subtree is not None and tenancy.via is not None:
            raise ConfigError(f"{where}: tenancy is scoped by its own subtree or via a reference, not both")
        if (tenancy.partition is None) != (tenancy.partitions is None) or \
                (tenancy.partition is None and tenancy.via is None):
            raise ConfigError(f"{where}: tenancy needs a partition column and its partitions (only a tenancy "
                              "via a reference may leave both out)")
        roots_by = tenancy.subtree.roots_by if tenancy.subtree is not None else None
        if roots_by is not None and getattr(self.params_by_name.get(roots_by), "type", None) != "token":
            raise ConfigError(f"{where}: tenancy.subtree.roots_by must name a token search parameter")
        via = tenancy.via
        if via is not None and via.resource_type == self.resource_type:
            raise ConfigError(f"{where}: tenancy.via must go through another type, not {via.resource_type!r}")
        if via is not None and not via.reverse:  # a reverse one names another provider's parameter (the registry's)
            param = self.params_by_name.get(via.param)
            if param is None or via.resource_type not in param.referenced_types:
                to = sorted(n for n, p in self.params_by_name.items() if via.resource_type in p.referenced_types)
                why = f"it has no search parameter {via.param!r}" if param is None else \
                    f"its {via.param!r} does not refer to {via.resource_type}"
                raise ConfigError(f"{where}: tenancy.via names {via.param!r} to {via.resource_type!r}, but {why}; "
                                  f"its reference parameters to {via.resource_type}: {', '.join(to) or 'none'} "
                                  f"(a parameter of {via.resource_type} referring to {self.resource_type}: "
                                  "Via(..., reverse=True))")
        if via is not None and via.versions is not None:
            self._check_versions(via, via.versions, where)
        if tenancy.versions is not None:
            self._check_version_scope(tenancy, tenancy.versions, where)

    def _check_version_scope(self, tenancy: Tenancy, scope: VersionScope, where: str) -> None:
        versioning = self.versioning
        if versioning is None:
            raise ConfigError(f"{where}: tenancy.versions scopes each kept version: it needs versioning")
        for name, column, declared in (("partition", scope.partition, tenancy.partition),
                                       ("path", scope.path, tenancy.path)):
            if column is None:
                continue
            if declared is None:
                raise ConfigError(f"{where}: tenancy.versions.{name} is given but the tenancy declares no "
                                  f"{'partition' if name == 'partition' else 'subtree'}")
            if getattr(column, "table", None) is not versioning.history:
                raise ConfigError(f"{where}: tenancy.versions.{name}: {column} is not a column of the history table "
                                  "(each version holds its own)")

    def _check_versions(self, via: Via, target: ReferenceTarget, where: str) -> None:
        versioning = self.versioning
        if via.reverse or versioning is None:
            raise ConfigError(f"{where}: tenancy.via.versions scopes each kept version by its own reference: it "
                              "needs versioning and a forward reference (not reverse)")
        if target.resource_type != via.resource_type:
            raise ConfigError(f"{where}: tenancy.via.versions must refer to {via.resource_type}, "
                              f"not {target.resource_type}")
        through = target.through
        if through is None and getattr(target.column, "table", None) is not versioning.history:
            raise ConfigError(f"{where}: tenancy.via.versions: {target.column} is not a column of the history "
                              "table; a multi-valued reference is a side table: through=Through(table, key, version=)")
        if through is not None and through.version is None:
            raise ConfigError(f"{where}: tenancy.via.versions: its side table needs the version column "
                              "(Through(table, key, version=...)): a row per version and reference")


@dataclass(frozen=True)
class StaticProvider:
    """A few resources built in code (canonical resources: OperationDefinition, StructureDefinition,
    CodeSystem...), read and searched by `_id` and `url` in memory. `load` may read the database."""

    resource_type: str
    load: Callable[..., Sequence[dict[str, Any]]]  # (connection) -> resources, each with an id
    documentation: str | None = None
    per_account: bool = False  # load(connection, account): what the caller's account (None: every one) sees

    def check(self) -> None:
        if not RESOURCE_TYPE_RE.match(self.resource_type):
            raise ConfigError(f"provider {self.resource_type}: resource type must look like 'CodeSystem'")


AnyProvider = ResourceProvider | StaticProvider
