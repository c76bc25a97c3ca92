"""Each decision in one place (issue 28): the rows a caller may see are decided by server.search.seen only, the
caller's visibility of a provider (SMART scopes, then its access scope) by server.engine.visibility only, and the rows
of the stored-body queries are read through the decoder written beside each query, by the names it selects."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from server.declare.provider import ResourceProvider
from server.declare.registry import Registry
from server.plugins import get_plugin_manager
from server.params.types.base import EVERY_ROW
from server.search.bodies import BODY, FOLLOWS, ID, MEASURE_AT, PAGE_ROW, StoredVersion, body_page_query, body_query
from server.search.include import page_follows
from server.search.sql import where_clause
from server.search.request import SearchRequest, parse_search
from server.settings import parse_settings

ROOT = Path(__file__).resolve().parents[2]
SERVER = sorted((ROOT / "server").rglob("*.py"))
# who may test a deletion flag: the one condition, and the writer's pre-rendering (no caller: every live version)
DELETION_TESTED_BY = {"server/search/seen.py", "server/storage/prerender.py"}
DELETION_FLAGS = {"deleted", "history_deleted"}


def _calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)]


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_only_seen_tests_whether_a_row_is_deleted() -> None:
    tested = [f"{_name(path)}:{call.lineno}" for path in SERVER if _name(path) not in DELETION_TESTED_BY
              for call in _calls(path)
              if isinstance(call.func, ast.Attribute) and call.func.attr in ("is_", "is_not", "__eq__")
              and isinstance(call.func.value, ast.Attribute) and call.func.value.attr in DELETION_FLAGS]
    assert not tested, f"a deletion condition built outside server/search/seen.py: {tested}"


COPIES = {"replace", "copy", "deepcopy"}  # dataclasses.replace, copy.copy, copy.deepcopy, called by any path


def _made(path: Path, cls: str = "Visibility", named: str = "vis") -> list[int]:
    """Lines of `path` that make a `cls`: calling the class by any path to it, or copying a value annotated as
    one (or whose name starts with `named`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    held = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg) and a.annotation is not None
            and cls in ast.unparse(a.annotation)}
    held |= {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
             and cls in ast.unparse(n.annotation)}

    def called(call: ast.Call) -> str | None:
        func = call.func
        if isinstance(func, ast.Attribute):  # a module's function (dataclasses.replace), not a method of a value
            return func.attr if isinstance(func.value, ast.Name) and func.value.id in ("dataclasses", "copy") \
                or func.attr == cls else None
        return func.id if isinstance(func, ast.Name) else None

    def a_copied(node: ast.expr) -> bool:  # a name, or an attribute (`at.sight`), held or named so
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        return name is not None and (name in held or name.lower().startswith(named))

    return [call.lineno for call in ast.walk(tree) if isinstance(call, ast.Call)
            and (called(call) == cls or (called(call) in COPIES and bool(call.args) and a_copied(call.args[0])))]


# where the one Sight made outside server.search.seen is: EVERY_ROW, the sight of a caller that sees every row
EVERY_ROW_AT = ("server/params/types/base.py", next(
    i for i, line in enumerate((ROOT / "server/params/types/base.py").read_text().splitlines(), 1)
    if line.startswith("EVERY_ROW = Sight()")))

# (the class, the one module that makes it, what a value of it is named)
MADE_IN_ONE_PLACE = [
    pytest.param("Visibility", "server/access/tenancy.py", "vis", id="visibility"),  # from its scope, its queries
    pytest.param("Sight", "server/search/seen.py", "sight", id="sight"),  # from a visibility (EVERY_ROW: none)
]


@pytest.mark.parametrize("cls, home, named", MADE_IN_ONE_PLACE)
def test_what_the_caller_sees_is_made_in_one_place(cls: str, home: str, named: str) -> None:
    """A caller's Visibility is made in server.access.tenancy only (built from its access scope, narrowed there by
    its SMART scopes' queries), and what a clause compiles with of it (`Sight`) in server.search.seen only: made
    anywhere else, either could show rows its scope does not, or mean one thing searched and another chained."""
    made = [f"{_name(path)}:{line}" for path in SERVER if _name(path) != home for line in _made(path, cls, named)
            if (_name(path), line) != EVERY_ROW_AT]
    assert not made, f"a {cls} made outside {home}: {made}"


@pytest.mark.parametrize("source, lines", [
    pytest.param("from server.access.tenancy import Visibility\nv = Visibility(None)\n", [2], id="the-class"),
    pytest.param("from server.access import tenancy\nv = tenancy.Visibility(None)\n", [2], id="by-its-module"),
    pytest.param("import dataclasses\nfrom server.access.tenancy import Visibility\n"
                 "def f(x: Visibility):\n    return dataclasses.replace(x, clause=None)\n", [4], id="a-copy"),
    pytest.param("from dataclasses import replace\ndef f(x):\n    return replace(x, a=1)\n", [], id="another-copy"),
    pytest.param("from dataclasses import replace\ndef f(vis):\n    return replace(vis, a=1)\n", [3], id="a-vis"),
    pytest.param("def f(page):\n    return page.replace('a', 1)\n", [], id="a-method-named-alike"),
    pytest.param("def f(vis):\n    return vis.clause\n", [], id="a-use"),
])
def test_the_visibility_guard_itself(tmp_path: Path, source: str, lines: list[int]) -> None:
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    assert _made(tmp_path / "m.py") == lines


@pytest.mark.parametrize("source, lines", [
    pytest.param("from server.params.types.base import Sight\ns = Sight({}, None)\n", [2], id="the-class"),
    pytest.param("from server.params.types import base\ns = base.Sight()\n", [2], id="by-its-module"),
    pytest.param("from dataclasses import replace\ndef f(at: Sight):\n    return replace(at, roots=())\n", [3],
                 id="a-copy"),
    pytest.param("from dataclasses import replace\ndef f(sight):\n    return replace(sight, roots=())\n", [3],
                 id="a-sight"),
    pytest.param("from dataclasses import replace\ndef f(at):\n    return replace(at.sight, narrowed=None)\n", [3],
                 id="a-copy-of-a-context-s"),
    pytest.param("def f(ctx):\n    return ctx.sight.of('Location')\n", [], id="a-use"),
])
def test_the_sight_guard_itself(tmp_path: Path, source: str, lines: list[int]) -> None:
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    assert _made(tmp_path / "m.py", "Sight", "sight") == lines


def test_only_the_engine_asks_the_scoper_for_a_callers_visibility() -> None:
    asked = [f"{_name(path)}:{call.lineno}" for path in SERVER if _name(path) != "server/engine/visibility.py"
             for call in _calls(path)
             if isinstance(call.func, ast.Attribute) and call.func.attr in ("visibility", "peek")
             and isinstance(call.func.value, ast.Attribute) and call.func.value.attr == "scoper"]
    assert not asked, f"a caller's visibility decided outside server.engine.visibility (SMART scopes skipped): {asked}"


@pytest.fixture(scope="module")
def location() -> ResourceProvider:
    settings = parse_settings({})
    provider = Registry.collect(get_plugin_manager(settings), settings).providers["Location"]
    assert isinstance(provider, ResourceProvider)
    return provider


def _fields(decoder: type) -> list[str]:
    return [f.name for f in dataclasses.fields(decoder)]


@pytest.mark.parametrize("scoped, names", [
    pytest.param(False, ["deleted", "version", "updated", "body"], id="read"),
    pytest.param(True, ["deleted", "version", "updated", "body", "partition", "path"], id="scoped-read"),
])
def test_a_read_of_a_stored_body_selects_what_its_decoder_names(location: ResourceProvider, scoped: bool,
                                                                names: list[str]) -> None:
    selected = [c.name for c in body_query(location, scoped=scoped).selected_columns]
    assert selected == names == _fields(StoredVersion)[:len(names)]


@pytest.mark.parametrize("items, follows, names", [
    pytest.param((), (), ["id", "body", "measure"], id="page"),
    pytest.param((("near", "8.4|-13.2|10|km"),), (), ["id", "body", "measure"], id="ranked-page"),
    pytest.param((("_include", "Location:partof"),), ("parent_id",), ["id", "body", "measure", "_follows0"],
                 id="include-page-reads-its-references"),
    pytest.param((("_include", "Location:organization"),), ("data_source_id",),
                 ["id", "body", "measure", "_follows0"], id="a-reference-in-a-joined-table"),
])
def test_a_page_of_stored_bodies_selects_what_its_decoder_names(location: ResourceProvider,
                                                                items: tuple[tuple[str, str], ...],
                                                                follows: tuple[str, ...], names: list[str]) -> None:
    request: SearchRequest = parse_search(location, items)
    where = where_clause(location, request, page=True, sight=EVERY_ROW)
    columns = page_follows(location, request.includes)
    assert [c.key for c in columns] == list(follows)
    selected = [c.name for c in body_page_query(location, request, where=where, follows=columns).selected_columns]
    assert selected == names
    assert list(PAGE_ROW) == names[:FOLLOWS] and [names[i] for i in (ID, BODY, MEASURE_AT)] == ["id", "body", "measure"]
    assert all(name.startswith("_follows") for name in names[FOLLOWS:])


@pytest.mark.parametrize("row, decoded", [
    pytest.param((0, 3, "2026-01-01", b"{}"), StoredVersion(False, 3, "2026-01-01", b"{}"), id="read"),
    pytest.param((1, 4, "2026-01-02", None, 7, "/1/"), StoredVersion(True, 4, "2026-01-02", None, 7, "/1/"),
                 id="scoped-deleted"),
    pytest.param((memoryview(b"x"), ), None, id="not-a-read-row"),
])
def test_the_read_decoder(row: tuple, decoded: StoredVersion | None) -> None:
    if decoded is None:
        with pytest.raises(ValueError):
            StoredVersion.of(row)
    else:
        assert StoredVersion.of(row) == decoded


def test_the_page_limits_travel_as_one_object() -> None:
    """server.settings.FhirApi (Settings.api) carries `_count`'s default and most: no function takes them apart."""
    apart = [f"{_name(path)}:{node.lineno}" for path in SERVER if _name(path) != "server/settings.py"
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
             and {a.arg for a in (*node.args.args, *node.args.kwonlyargs)} & {"default_count", "max_count"}]
    assert not apart, f"page limits threaded by hand: {apart}"


def test_one_conditional_get() -> None:
    """If-None-Match and If-Modified-Since are read by server.declare.validators only (FHIR answers, static files)."""
    reads = [f"{_name(path)}" for path in SERVER if _name(path) != "server/declare/validators.py"
             if any(f'"{header}"' in path.read_text(encoding="utf-8") for header in ("if-none-match", "if-modified-since"))]
    assert not reads, f"a conditional GET decided outside server.declare.validators: {reads}"
