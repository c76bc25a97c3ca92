"""The layout keeps what differs per database in server.storage, and no state at module level: no dialect branch
outside the storage package (server.storage.backend, server.storage.dialects own them), no module-level store that
is written to, no `global`, and no cache but the one bounded store (server.storage.cache)."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted((ROOT / "server").rglob("*.py"))
          if "migrations" not in path.parts}
STORAGE = ROOT / "server" / "storage"

DIALECT_NAMES = frozenset({"sqlite", "postgresql", "postgres", "sqlite+pysqlite", "postgresql+psycopg", "psycopg"})
DIALECT_ATTRIBUTES = frozenset({"get_backend_name", "drivername"})  # (and `.dialect.name`)
MUTATORS = frozenset({"append", "add", "update", "setdefault", "pop", "popitem", "clear", "extend", "insert",
                      "remove", "discard", "move_to_end", "appendleft"})
CACHE_TYPES = frozenset({"OrderedDict", "defaultdict", "deque", "WeakKeyDictionary", "WeakValueDictionary",
                         "WeakSet", "LRUCache", "Bounded"})


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
