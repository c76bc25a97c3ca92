"""The layout shows the architecture: modules of one concern each, no import cycle, no import hidden in a function, an engine
that knows no org-unit table, plugins that import only the public surface `server`, and Bulk Data that imports only
that and the engine's reader protocol."""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import server
from plugins.orgunits.tables import metadata as orgunit_tables
from server.engine import export_reader

ROOT = Path(__file__).resolve().parents[2]
MAX_CODE_LINES = 500  # beyond a whole concern: a module this long has grown a second one (tables of cases apart)


def _modules(*packages: str) -> Iterator[tuple[str, Path]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


SOURCES = {name: (path, ast.parse(path.read_text(encoding="utf-8"))) for name, path in _modules("server", "plugins")}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _top_level_imports(tree: ast.Module) -> Iterator[str]:
    for node in tree.body:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _local(name: str) -> str | None:
    """The project module an import names (a submodule, or the module holding the imported name)."""
    while name:
        if name in SOURCES:
            return name
        name = name.rpartition(".")[0]
    return None


def _graph() -> dict[str, set[str]]:
    return {name: {m for imported in _top_level_imports(tree) if (m := _local(imported)) and m != name}
            for name, (_, tree) in SOURCES.items()}


def _table_lines(tree: ast.Module) -> set[int]:
    """The lines of module-level tables: a name bound to a literal list, tuple, dict or set (or a call on one)."""
    def literal(node: ast.expr) -> bool:
        return isinstance(node, ast.List | ast.Tuple | ast.Dict | ast.Set) or (
            isinstance(node, ast.Call) and bool(node.args) and all(literal(a) for a in node.args))

    return {line for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
            and literal(node.value) for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_module_states_its_one_concern(name: str) -> None:
    """A module opens with the docstring saying what it is for (an empty package marker says nothing)."""
    path, tree = SOURCES[name]
    assert not tree.body or ast.get_docstring(tree), f"{path} does not open with a docstring stating its concern"


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_no_module_outgrows_one_concern(name: str) -> None:
    """A generous guard, not a shape: the lines of a module but its tables of cases (which may be long)."""
    path, tree = SOURCES[name]
    code = len(path.read_text(encoding="utf-8").splitlines()) - len(_table_lines(tree))
    assert code <= MAX_CODE_LINES, f"{path}: {code} lines besides its tables; does it hold one concern?"


@pytest.mark.parametrize("source, table_lines", [
    pytest.param("X = [\n  1,\n  2,\n]\ndef f():\n    return [1,\n 2]\n", {1, 2, 3, 4}, id="list-not-function-body"),
    pytest.param("T: dict = {\n 'a': 1}\nS = frozenset({\n 1})\n", {1, 2, 3, 4}, id="annotated-and-call-on-literal"),
    pytest.param("Y = compute(\n 1)\n", set(), id="call-on-a-value"),
])
def test_what_counts_as_a_table(source: str, table_lines: set[int]) -> None:
    assert _table_lines(ast.parse(source)) == table_lines


def test_no_import_cycle() -> None:
    graph = _graph()
    # a package's __init__ importing its own submodules is how Python packages work, not a cycle to report
    edges = {m: {d for d in deps if not (d.startswith(m + ".") or m.startswith(d + ".") and d in ("server",))}
             for m, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(edges.get(module, ())):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(dep):] + [dep]))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


# The layers of `server`, bottom first: a package (or top module) imports only from its own layer or below. The
# public surface `server` (server/__init__.py) sits above them all: it is what plugins import.
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(f"server.{n}" for n in layer.split()) for layer in (
    "errors settings",                      # what everything may raise or read
    "params",                               # search-parameter types
    "declare",                              # what a provider (and any plugin) declares, and the registry
    "html",                                 # the HTML shell of pages, their static files
    "storage",                              # tables, connections, freshness, writes
    "search telemetry",                     # a search parsed into SQL; logs and metrics
    "access",                               # tokens, SMART scopes, tenancy
    "hookspecs defaults plugins extensions",  # the plugin manager and the core defaults
    "engine",                               # interactions, the server context
    "http",                                 # the request pipeline, routes, responses
    "bulk",                                 # Bulk Data: a core plugin on the public hooks and the reader protocol
    "ops",                                  # health, readiness, start-up checks
    "app asgi",                             # the assembly
    "cli",                                  # the command line
    "contract",                             # the provider contract suite: a pytest plugin over the assembled app
))


def _package(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "server" and len(parts) > 1 else None


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, deps in _graph().items():
        source = _package(module)
        if source is not None:
            graph.setdefault(source, set()).update(d for dep in deps if (d := _package(dep)) and d != source)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    return next((c for node in sorted(graph) if node not in state and (c := visit(node))), None)


def test_no_package_level_import_cycle() -> None:
    cycle = _cycle(_package_graph())
    assert cycle is None, "package-level import cycle: " + " -> ".join(cycle or ())


def test_every_package_of_the_server_is_in_a_layer() -> None:
    layered = set().union(*LAYERS)
    assert set(_package_graph()) - layered == set()
    assert layered - set(_package_graph()) == set(), "a layer names a package that no longer exists"


def test_each_package_imports_only_its_layer_or_below() -> None:
    level = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    upward = sorted(f"{source} -> {dep}" for source, deps in _package_graph().items() for dep in deps
                    if level.get(dep, -1) > level.get(source, -1))
    assert not upward, f"imports of a higher layer: {upward}"


@pytest.mark.parametrize("graph, cycle", [
    pytest.param({"a": {"b"}, "b": {"c"}, "c": set()}, None, id="a-chain"),
    pytest.param({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"], id="two-packages"),
    pytest.param({"a": {"b"}, "b": {"c"}, "c": {"b"}}, ["b", "c", "b"], id="below-the-first"),
])
def test_the_cycle_finder_itself(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert _cycle(graph) == cycle


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_no_project_import_inside_a_function(name: str) -> None:
    path, tree = SOURCES[name]
    top = set(map(id, tree.body)) | {id(n) for node in tree.body if _is_type_checking(node) for n in node.body}
    hidden = [f"{path.name}:{node.lineno}" for node in ast.walk(tree)
              if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in top
              and any(n.split(".")[0] in ("server", "plugins") for n in
                      ([node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]))]
    assert not hidden, f"imports of project modules inside functions: {hidden}"


def test_the_engine_imports_no_plugin_and_names_no_org_unit_table() -> None:
    tables = set(orgunit_tables.tables)
    for name, (path, tree) in SOURCES.items():
        if not name.startswith("server"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(m.split(".")[0] == "plugins" for m in modules), f"{path}:{node.lineno} imports plugins"
            named = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
                node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
            assert named not in tables, f"{path}:{getattr(node, 'lineno', '?')} names the org-unit table {named!r}"


@pytest.mark.parametrize("name", sorted(n for n in SOURCES if n.startswith("plugins")))
def test_plugins_import_only_the_public_surface(name: str) -> None:
    path, tree = SOURCES[name]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("server"):
            # a plugin's contract samples declare themselves with the contract suite's own declarations
            samples = path.name == "contract_samples.py" and node.module == "server.contract"
            assert node.module == "server" or samples, \
                f"{path}:{node.lineno} imports {node.module}; plugins use `from server import`"
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("server.") for a in node.names), f"{path}:{node.lineno}"
    off = _off_the_surface(tree, _imported(name, tree))
    assert not off, f"{path} takes {off} from `server`, which its public surface does not list"


# Bulk Data, a core plugin, imports the public surface and the engine's reader protocol only, besides its own modules
# (issue 42: it imported the engine's searches, visibility and drivers, search.seen and storage.backend)
BULK = "server.bulk"
READER = "server.engine.export_reader"
BULK_READS_THROUGH = frozenset({"server", READER})


def _imported(name: str, tree: ast.Module) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """Every module the module `name` imports, anywhere in it (for type checkers too), relative imports resolved,
    with the names taken from it (none for `import m`)."""
    package = name if SOURCES.get(name, (Path("__init__.py"),))[0].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            yield node.lineno, ".".join(p for p in (base, node.module) if p), tuple(a.name for a in node.names)


def _off_the_surface(tree: ast.Module, imported: Iterator[tuple[int, str, tuple[str, ...]]]) -> list[str]:
    """What is taken from `server` that its public surface does not list: `from server import engine` (a from-import
    falls back to the submodule), or `server.engine` after `import server`."""
    surface, imported = set(server._SURFACE), list(imported)
    taken = [f"{line}: server.{n}" for line, module, names in imported if module == "server"
             for n in names if n not in surface]
    if not any(module == "server" and not names for _, module, names in imported):  # `server` is no module here
        return taken
    return taken + [f"{node.lineno}: server.{node.attr}" for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "server" and node.attr not in surface and not node.attr.startswith("__")]


def _beyond_bulks_protocol(name: str, tree: ast.Module) -> list[str]:
    """What a module of `server.bulk` imports of the server besides `server`'s surface, its package and the names of
    the reader protocol."""
    imported = list(_imported(name, tree))
    protocol = set(export_reader.__all__)
    beyond = [f"{line}: {module}" for line, module, _ in imported
              if module.split(".")[0] == "server" and module not in BULK_READS_THROUGH
              and module != BULK and not module.startswith(BULK + ".")]
    beyond += [f"{line}: {module}.{n}" for line, module, names in imported if module == READER
               for n in names if n not in protocol]
    return beyond + _off_the_surface(tree, iter(imported))


@pytest.mark.parametrize("name", sorted(n for n in SOURCES if n == BULK or n.startswith(BULK + ".")))
def test_bulk_imports_only_the_surface_and_the_reader_protocol(name: str) -> None:
    path, tree = SOURCES[name]
    beyond = _beyond_bulks_protocol(name, tree)
    assert not beyond, f"{path} imports {beyond}; Bulk Data reads through `server` and server.engine.export_reader"


@pytest.mark.parametrize("source, beyond", [
    pytest.param("from server import Answer, hookimpl\n", [], id="the-public-surface"),
    pytest.param("from server.engine.export_reader import ExportReader\n", [], id="the-reader-protocol"),
    pytest.param("from server.bulk.jobs import Job\nimport server.bulk.files\n", [], id="its-own-modules"),
    pytest.param("from .jobs import Job\n", [], id="its-own-module-relative"),
    pytest.param("import orjson\nfrom sqlalchemy import select\n", [], id="third-party"),
    pytest.param("from server.engine.visibility import visibility\n", ["1: server.engine.visibility"],
                 id="an-engine-module"),
    pytest.param("from server.engine import visibility\n", ["1: server.engine"], id="an-engine-module-by-package"),
    pytest.param("import server.storage.backend\n", ["1: server.storage.backend"], id="a-plain-import"),
    pytest.param("from ..search import seen\n", ["1: server.search"], id="a-relative-import-out-of-bulk"),
    pytest.param("from server.errors import StorageError\n", ["1: server.errors"], id="below-the-surface"),
    pytest.param("from server.bulkier import x\n", ["1: server.bulkier"], id="a-package-named-alike"),
    pytest.param("if TYPE_CHECKING:\n    from server.engine.context import ServerContext\n",
                 ["2: server.engine.context"], id="for-type-checkers-too"),
    pytest.param("def f():\n    from server.search.seen import seen\n", ["2: server.search.seen"], id="in-a-function"),
    pytest.param("from server import engine\n", ["1: server.engine"], id="a-package-through-the-surface"),
    pytest.param("from .. import storage\n", ["1: server.storage"], id="a-package-through-the-surface-relative"),
    pytest.param("import server\nserver.engine.visibility.visibility\n", ["2: server.engine"],
                 id="a-package-by-attribute"),
    pytest.param("import server\nserver.hookimpl\n", [], id="a-surface-name-by-attribute"),
    pytest.param("from server.engine.export_reader import visibility\n",
                 ["1: server.engine.export_reader.visibility"], id="beyond-the-protocols-names"),
])
def test_what_bulk_may_import(source: str, beyond: list[str]) -> None:
    assert _beyond_bulks_protocol("server.bulk.runner", ast.parse(source)) == beyond


def test_the_public_surface_exports_what_it_lists() -> None:
    """Every name of `server._SURFACE` is exported and resolves to the object of the module it names; the imports
    for type checkers restate exactly that list."""
    import server

    checked = [node for node in SOURCES["server"][1].body if _is_type_checking(node)]
    assert len(checked) == 1
    typed = {alias.asname or alias.name: f"{node.module}:{alias.name}" for node in ast.walk(checked[0])
             if isinstance(node, ast.ImportFrom) for alias in node.names}
    listed = {name: target if ":" in target else f"{target}:{name}" for name, target in server._SURFACE.items()}
    assert typed == listed
    assert server.__all__ == sorted(listed)
    for name, target in listed.items():
        module, _, attribute = target.partition(":")
        assert getattr(server, name) is getattr(importlib.import_module(module), attribute), name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        server.nothing  # noqa: B018


# what `import server` (and its bottom layer: the errors, the declarations) may load at most, and never these layers
SURFACE_MODULES = 12
HEAVY_LAYERS = ("engine", "storage", "cli", "search", "http", "bulk", "html", "access")


@pytest.mark.parametrize("statement", ["import server", "import server.errors", "import server.hookspecs",
                                       "from server import FhirError, hookimpl, PLUGIN_API"])
def test_importing_the_surface_loads_no_engine(statement: str) -> None:
    """Issue 42: `import server` loaded 76 modules of the server (2.7 s on a loaded machine), the engine, storage
    and cli among them, for a plugin that wanted an error class."""
    code = (f"import sys, time; started = time.perf_counter(); {statement}; took = time.perf_counter() - started; "
            "print(took, *sorted(m for m in sys.modules if m == 'server' or m.startswith('server.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    took, *loaded = done.stdout.split()
    heavy = [m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in HEAVY_LAYERS]
    assert not heavy, f"{statement} loads {heavy}"
    assert len(loaded) <= SURFACE_MODULES, loaded
    print(f"{statement}: {len(loaded)} server modules, {float(took) * 1000:.0f} ms")


ORG_UNIT_WORDS = ("Location", "partof", "$children", "org-unit", "orgunits", "explorer.js", "leaflet")


def test_no_org_unit_knowledge_in_the_engines_html() -> None:
    """The engine's pages are generic FHIR pages and the token page; the explorer lives with the org-unit plugin
    (plugins/orgunits/explorer.py and static/, served through the register_web_pages hook)."""
    html = ROOT / "server" / "html"
    for path in sorted(p for p in html.rglob("*") if p.is_file() and p.suffix in (".py", ".js", ".css", ".svg")):
        text = path.read_text(encoding="utf-8")
        found = [word for word in ORG_UNIT_WORDS if word in text]
        assert not found, f"{path.relative_to(ROOT)} knows the org-unit domain: {found}"


def _second_protocols(tree: ast.Module) -> list[int]:
    """Lines yielding a (statement, shape) pair, or naming the second protocol's words: what a generator of the
    search layer asked before it yielded the engine's steps."""
    found = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Yield | ast.YieldFrom)
             and isinstance(node.value, ast.Tuple) and any(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                           for e in node.value.elts)]
    found += [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id in {"Asks", "Shape"}
              or isinstance(node, ast.alias | ast.FunctionDef) and node.name in {"Asks", "Shape", "asked", "run_on"}]
    return found


def test_one_step_protocol() -> None:
    """Issue 42: an interaction and the search layer it runs yield the same steps (server.storage.steps), where
    the search layer yielded (statement, shape) pairs that `asked` and `run_on` adapted."""
    offending = {name: lines for name, (_, tree) in SOURCES.items() if (lines := _second_protocols(tree))}
    assert not offending, offending


@pytest.mark.parametrize("source, lines", [
    pytest.param("def f():\n    found = yield query, 'scalar'\n", [2], id="a-shaped-yield"),
    pytest.param("from x import Asks\n", [1], id="the-old-type"),
    pytest.param("def asked(ctx, asks):\n    pass\n", [1], id="the-adapter"),
    pytest.param("def f():\n    found = yield from rows(query)\n", [], id="a-step"),
    pytest.param("asked = set(chunk)\n", [], id="a-variable-named-asked"),
])
def test_the_second_protocol_is_recognized(source: str, lines: list[int]) -> None:
    assert _second_protocols(ast.parse(source)) == lines


def test_routes_name_their_interactions_without_lambdas() -> None:
    """Issue 42: each route hands the pipeline a named engine function of the interactions' table
    (server.engine.interactions.INTERACTIONS), where it handed lambdas a reader lost a parameter at."""
    from server.engine.interactions import INTERACTIONS

    for module in ("server.http.routes", "server.engine.interactions"):
        lambdas = [node.lineno for node in ast.walk(SOURCES[module][1]) if isinstance(node, ast.Lambda)]
        assert not lambdas, f"{module}: lambdas at lines {lambdas}"
    named = {node.slice.value for node in ast.walk(SOURCES["server.http.routes"][1])
             if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
             and node.value.id == "INTERACTIONS" and isinstance(node.slice, ast.Constant)}
    assert named == set(INTERACTIONS)


def test_a_name_compiled_per_database_brings_its_renderings() -> None:
    """An index a plugin declares with `text_index_expression`, compiled for PostgreSQL in a process that imported
    nothing else of the server, is in code-point order (the renderings of server.storage.dialects registered), as
    the searches that read it compare."""
    code = ("from sqlalchemy import Column, Index, MetaData, String, Table; "
            "from sqlalchemy.dialects import postgresql; from sqlalchemy.schema import CreateIndex; "
            "from server import text_index_expression; "
            "t = Table('t', MetaData(), Column('c', String)); "
            "print(CreateIndex(Index('i', text_index_expression(t.c.c))).compile(dialect=postgresql.dialect()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert 'COLLATE "C"' in done.stdout, done.stdout
