"""How the contract checks ask the server (server.contract.answers): every path under the FHIR API's mount is built
by fhir_path from the one mount (server.settings.FHIR_MOUNT), never written by hand in the suite."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from server.contract.answers import fhir_path

CONTRACT = Path(__file__).resolve().parents[2] / "server" / "contract"


@pytest.mark.parametrize("segments, query, path", [
    pytest.param(("metadata",), "", "/fhir/metadata", id="metadata"),
    pytest.param(("Location",), "", "/fhir/Location", id="search"),
    pytest.param(("Location", 12), "", "/fhir/Location/12", id="read-an-int-id"),
    pytest.param(("Location", "a-1", "_history", 2), "", "/fhir/Location/a-1/_history/2", id="vread"),
    pytest.param(("Location", "_history"), "_count=2", "/fhir/Location/_history?_count=2", id="history-with-query"),
    pytest.param((), "", "/fhir", id="the-base"),
])
def test_a_path_under_the_mount(segments: tuple[object, ...], query: str, path: str) -> None:
    assert fhir_path(*segments, query=query) == path


def _mount_paths(tree: ast.AST) -> list[int]:
    """Lines of a string, or an f-string, that starts with the mount (a part inside an f-string is not a start)."""
    parts = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    starts = [node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node for node in ast.walk(tree)
              if isinstance(node, ast.JoinedStr) or id(node) not in parts]
    return [node.lineno for node in starts
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/fhir")]


@pytest.mark.parametrize("source, lines", [
    pytest.param('get("/fhir/metadata")', [1], id="a-literal"),
    pytest.param('get(f"/fhir/{rtype}")', [1], id="an-f-string"),
    pytest.param('get(fhir_path(rtype))', [], id="built"),
    pytest.param('url = f"{namespace}/fhir/x"', [], id="a-canonical-url-is-not-a-path"),
])
def test_the_mount_path_finder_itself(source: str, lines: list[int]) -> None:
    assert _mount_paths(ast.parse(source)) == lines


def test_the_suite_writes_no_path_under_the_mount_by_hand() -> None:
    found = {f"{path.name}:{line}" for path in sorted(CONTRACT.glob("*.py"))
             for line in _mount_paths(ast.parse(path.read_text(encoding="utf-8")))}
    assert not found, f"paths under the mount written by hand at {sorted(found)}: use fhir_path"
