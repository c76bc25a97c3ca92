"""The layout keeps what differs per database in server.storage, and no state at module level: no dialect branch
outside the storage package (server.storage.backend, server.storage.dialects own them), no module-level store that
is written to, no `global`, no class-level store its instances write to, no cache but the one bounded store
(server.storage.cache), and no unbounded functools cache but those over a small closed domain (UNBOUNDED_CACHES)."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted((ROOT / "server").rglob("*.py"))
          if "migrations" not in path.parts}
PLUGINS = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted((ROOT / "plugins").rglob("*.py"))
           if "migrations" not in path.parts}
STORAGE = ROOT / "server" / "storage"

DIALECT_NAMES = frozenset({"sqlite", "postgresql", "postgres", "sqlite+pysqlite", "postgresql+psycopg", "psycopg"})
DIALECT_ATTRIBUTES = frozenset({"get_backend_name", "drivername"})  # (and `.dialect.name`)
MUTATORS = frozenset({"append", "add", "update", "setdefault", "pop", "popitem", "clear", "extend", "insert",
                      "remove", "discard", "move_to_end", "appendleft"})
CACHE_TYPES = frozenset({"OrderedDict", "defaultdict", "deque", "WeakKeyDictionary", "WeakValueDictionary",
                         "WeakSet", "LRUCache", "Bounded"})


# The functools caches without a bound, each over a small closed domain no request value reaches (a cache keyed by
# what a request sends is bounded: server.storage.cache.Bounded, or an lru_cache with a stated maxsize).
UNBOUNDED_CACHES = {
    "server/engine/subset.py:summary_elements": "a stored resource's type: the ~150 resource types of FHIR R4",
    "server/http/xml.py:_lenient": "a FHIR R4B model class: ~150",
    "server/search/hops.py:_aliased": "a provider's table, declared once per process",
    "server/params/types/base.py:implements": "a parameter type class and one of the four optional protocols",
    "server/http/protocol.py:edge_limits": "no argument: the worker's settings, one value",
    "server/declare/registry.py:_engine_rendering": "no argument: a digest of the engine's code, one value",
    "server/cli/data.py:load_call": "no argument: the one server context of a load, made at its first look-up",
    "server/engine/capabilities.py:software_version": "no argument: the installed distribution's version",
    "server/declare/typed.py:_hints": "a declaration's dataclass: the declaration types plugins return at start-up",
}


def _is_functools(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name or isinstance(node, ast.Attribute) and node.attr == name \
        and isinstance(node.value, ast.Name) and node.value.id == "functools"


def _unbounded(node: ast.expr) -> bool:
    """`cache`, `functools.cache`, `lru_cache(None)`, `lru_cache(maxsize=None)` (a bare `lru_cache` keeps 128)."""
    if _is_functools(node, "cache"):
        return True
    if isinstance(node, ast.Call) and _is_functools(node.func, "lru_cache"):
        size = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "maxsize"), None)
        return isinstance(size, ast.Constant) and size.value is None
    return False


def unbounded_caches(tree: ast.Module) -> Iterator[str]:
    """The functions holding an unbounded functools cache: one it decorates, or the one whose body makes one by a
    call (`cache(f)`, `lru_cache(maxsize=None)(f)`; `<module>` at module level)."""
    def visit(node: ast.AST, within: str) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if any(_unbounded(d) for d in child.decorator_list):
                    yield child.name
                for d in child.decorator_list:
                    yield from visit(d, within)
                for part in (child.args, *child.body):
                    yield from visit(part, child.name)
                continue
            if isinstance(child, ast.Call) and _unbounded(child.func) and child.args:
                yield within
            yield from visit(child, within)

    yield from visit(tree, "<module>")


def class_state(tree: ast.Module) -> Iterator[str]:
    """Class attributes holding a container its code writes to (`self.x[k] = v`, `self.x.pop(k)`, `cls.x...`): a
    store every instance of the class, in any server of the process, shares."""
    held: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                value = item.value if isinstance(item, ast.Assign | ast.AnnAssign) else None
                container = isinstance(value, ast.Dict | ast.List | ast.Set) or _called(value) in {"dict", "list", "set"}
                targets = item.targets if isinstance(item, ast.Assign) else [item.target] if isinstance(
                    item, ast.AnnAssign) else []
                held.update(t.id for t in targets if container and isinstance(t, ast.Name))

    def through_class(node: ast.expr) -> str | None:
        if isinstance(node, ast.Attribute) and node.attr in held and isinstance(node.value, ast.Name):
            return node.attr
        return None

    for node in ast.walk(tree):
        written = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target] if isinstance(
            node, ast.AugAssign) else []
        for target in written:
            if isinstance(target, ast.Subscript) and (name := through_class(target.value)):
                yield f"{name} is written to (line {node.lineno})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS and \
                (name := through_class(node.func.value)):
            yield f"{name}.{node.func.attr}() (line {node.lineno})"


def dialect_branches(tree: ast.AST) -> Iterator[int]:
    """Lines that name a database: a dialect's name as a string, `.dialect.name`, a URL's backend or driver."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in DIALECT_NAMES:
            yield node.lineno
        elif isinstance(node, ast.Attribute) and (node.attr in DIALECT_ATTRIBUTES or node.attr == "name" and (
                isinstance(node.value, ast.Attribute) and node.value.attr == "dialect")):
            yield node.lineno


def _called(value: ast.AST | None) -> str | None:
    if isinstance(value, ast.Call):
        func = value.func
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return None


def module_state(tree: ast.Module) -> Iterator[str]:
    """Module-level names that hold state: a cache-like object, a container written to anywhere in the module
    (an item set or deleted, a mutating method called), and any `global` statement."""
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        for target in targets:
            if isinstance(target, ast.Name):
                names.add(target.id)
                if _called(value) in CACHE_TYPES:
                    yield f"{target.id} (line {node.lineno}) is a {_called(value)} at module level"
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            yield f"global {', '.join(node.names)} (line {node.lineno})"
        written = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target] if isinstance(
            node, ast.AugAssign) else []
        for target in written:
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in names:
                yield f"{target.value.id} is written to (line {node.lineno})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS and \
                isinstance(node.func.value, ast.Name) and node.func.value.id in names:
            yield f"{node.func.value.id}.{node.func.attr}() (line {node.lineno})"


@pytest.mark.parametrize("path", [p for p in SERVER if STORAGE not in p.parents],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dialect_branch_outside_the_storage_package(path: Path) -> None:
    lines = sorted(set(dialect_branches(SERVER[path])))
    assert not lines, f"{path.relative_to(ROOT)} names a database at lines {lines}: ask server.storage.backend"


# The migrations that name a database: each is frozen history, the DDL an upgrade ran once; re-pointing one at a
# helper of the public surface, which may change, would change what an old upgrade does on a database behind.
MIGRATIONS_NAMING_A_DATABASE = {
    "plugins/orgunits/migrations/versions/0002_org_unit_path.py": "the path column's collation (C) as created",
    "plugins/orgunits/migrations/versions/0005_accounts_and_served_versions.py":
        "the unique constraints' names each database gave them",
    "plugins/orgunits/migrations/versions/0007_search_indexes.py": "PostgreSQL's column collation (ALTER TYPE)",
    "plugins/orgunits/migrations/versions/0009_token_text_indexes.py": "the expression indexes' DDL per database",
    "plugins/orgunits/migrations/versions/0015_types_per_data_source.py": "PostgreSQL's sequence, set past the copies",
    "plugins/orgunits/migrations/versions/0018_directory_organizations.py": "the norm column's collation as created",
}
MIGRATIONS = {path: ast.parse(path.read_text(encoding="utf-8")) for root in ("server", "plugins")
              for path in sorted((ROOT / root).rglob("migrations/**/*.py"))}


def test_no_dialect_branch_in_a_plugin() -> None:
    """A plugin imports the public surface `server` only; what differs per database is asked of it
    (code_point_string, reuses_deleted_ids, refresh_statistics), never decided by a database's name."""
    found = {f"{path.relative_to(ROOT)}:{line}" for path, tree in PLUGINS.items() for line in dialect_branches(tree)}
    assert not found, f"plugins name a database at {sorted(found)}: ask the public surface (server.storage decides)"


def test_no_migration_names_a_database_but_those_listed() -> None:
    found = {str(path.relative_to(ROOT)) for path, tree in MIGRATIONS.items() if any(dialect_branches(tree))}
    assert not found - MIGRATIONS_NAMING_A_DATABASE.keys(), \
        f"{sorted(found - MIGRATIONS_NAMING_A_DATABASE.keys())} name a database: ask server.storage, or list the " \
        "migration in MIGRATIONS_NAMING_A_DATABASE with the reason it must"
    assert not MIGRATIONS_NAMING_A_DATABASE.keys() - found, "a listed migration no longer names a database"


@pytest.mark.parametrize("path", list(SERVER), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_level_state(path: Path) -> None:
    found = list(module_state(SERVER[path]))
    assert not found, f"{path.relative_to(ROOT)}: {found}; keep state in an object the server context owns"


@pytest.mark.parametrize("path", [p for p in SERVER if p != STORAGE / "cache.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cache_is_the_bounded_store(path: Path) -> None:
    """An LRU made by hand (an OrderedDict, SQLAlchemy's LRUCache) instead of server.storage.cache.Bounded."""
    used = sorted({n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(SERVER[path])
                   if isinstance(n, ast.Name | ast.Attribute) and (n.id if isinstance(n, ast.Name) else n.attr) in
                   {"OrderedDict", "LRUCache", "move_to_end", "popitem"}})
    assert not used, f"{path.relative_to(ROOT)} keeps values by hand ({used}): use server.storage.cache.Bounded"


@pytest.mark.parametrize("source, found", [
    pytest.param('if conn.dialect.name == "postgresql": pass', [1, 1], id="dialect-name"),
    pytest.param('embedded = url.startswith("sqlite")', [1], id="url-prefix"),
    pytest.param('@compiles(X, "postgresql")\ndef f(): pass', [1], id="compiles"),
    pytest.param("backend = make_url(u).get_backend_name()", [1], id="backend-name"),
    pytest.param("backend = backend_of(conn).copies_binary", [], id="asking-the-backend"),
])
def test_the_dialect_finder_itself(source: str, found: list[int]) -> None:
    assert sorted(dialect_branches(ast.parse(source))) == found


@pytest.mark.parametrize("source, found", [
    pytest.param("_SEEN = {}\ndef f(k, v):\n    _SEEN[k] = v", 1, id="a-dict-written"),
    pytest.param("_LAST = [None]\ndef f(w):\n    _LAST[0] = w", 1, id="a-list-slot-written"),
    pytest.param("_KEPT = weakref.WeakKeyDictionary()", 1, id="a-weak-cache"),
    pytest.param("_KEPT = {}\ndef f(k):\n    return _KEPT.setdefault(k, 1)", 1, id="setdefault"),
    pytest.param("N = 0\ndef f():\n    global N\n    N += 1", 1, id="global"),
    pytest.param("HEADERS = {'Cache-Control': 'no-store'}\ndef f():\n    return {**HEADERS}", 0, id="a-constant"),
    pytest.param("def f():\n    seen = {}\n    seen[1] = 2", 0, id="a-local"),
])
def test_the_state_finder_itself(source: str, found: int) -> None:
    assert len(list(module_state(ast.parse(source)))) == found


def test_no_unbounded_cache_but_over_a_closed_domain() -> None:
    """A functools cache without a bound keeps whatever its keys are: over a request's values, without end."""
    found = {f"{path.relative_to(ROOT)}:{name}" for path, tree in {**SERVER, **PLUGINS}.items()
             for name in unbounded_caches(tree)}
    assert not found - UNBOUNDED_CACHES.keys(), \
        f"unbounded caches {sorted(found - UNBOUNDED_CACHES.keys())}: bound them (server.storage.cache.Bounded, " \
        "lru_cache(maxsize=N)), or add them to UNBOUNDED_CACHES with the closed domain they are keyed by"
    assert not UNBOUNDED_CACHES.keys() - found, f"UNBOUNDED_CACHES names no cache: {UNBOUNDED_CACHES.keys() - found}"


def test_no_class_level_state() -> None:
    found = [f"{path.relative_to(ROOT)}: {what}" for path, tree in {**SERVER, **PLUGINS}.items()
             for what in class_state(tree)]
    assert not found, f"{found}: keep state in an instance its owner makes (per server, per connection)"


@pytest.mark.parametrize("source, found", [
    pytest.param("@cache\ndef f(x): pass", ["f"], id="cache"),
    pytest.param("@functools.cache\ndef f(x): pass", ["f"], id="functools-cache"),
    pytest.param("@lru_cache(maxsize=None)\ndef f(x): pass", ["f"], id="lru-maxsize-none"),
    pytest.param("@functools.lru_cache(None)\ndef f(x): pass", ["f"], id="lru-none-positional"),
    pytest.param("class A:\n    @cache\n    def f(self, x): pass", ["f"], id="a-method"),
    pytest.param("def g():\n    made = functools.cache(lambda: 1)", ["g"], id="a-call-in-a-function"),
    pytest.param("_q = lru_cache(maxsize=None)(quote)", ["<module>"], id="a-call-at-module-level"),
    pytest.param("@lru_cache(maxsize=64)\ndef f(x): pass", [], id="bounded"),
    pytest.param("@lru_cache\ndef f(x): pass", [], id="bare-lru-keeps-128"),
    pytest.param("_q = lru_cache(maxsize=4096)(quote)", [], id="a-bounded-call"),
    pytest.param("@cached_property\ndef f(self): pass", [], id="cached-property-is-per-instance"),
])
def test_the_cache_finder_itself(source: str, found: list[str]) -> None:
    assert list(unbounded_caches(ast.parse(source))) == found


@pytest.mark.parametrize("source, found", [
    pytest.param("class P:\n    idle: dict = {}\n    def f(self):\n        self.idle[self] = None", 1, id="item-set"),
    pytest.param("class P:\n    seen = set()\n    def f(self, k):\n        self.seen.add(k)", 1, id="mutator"),
    pytest.param("class P:\n    idle = {}\n    @classmethod\n    def f(cls):\n        cls.idle.clear()", 1,
                 id="through-cls"),
    pytest.param("class P:\n    TYPES = {'a': 1}\n    def f(self):\n        return self.TYPES['a']", 0, id="a-table"),
    pytest.param("class P:\n    def __init__(self):\n        self.idle = {}\n        self.idle[1] = 2", 0,
                 id="per-instance"),
])
def test_the_class_state_finder_itself(source: str, found: int) -> None:
    assert len(list(class_state(ast.parse(source)))) == found
