"""Who a failure during `load` is blamed on (issue 41, second platform-team trial, finding 2's wake): a data
directory where a file stood made `load` say "plugin orgunits failed: NotADirectoryError ... a fault of the plugin
orgunits", though the server's own storage step failed. A failure is the plugin's when its code is on the traceback,
or when the call of its format failed before entering it (a wrong signature: a TypeError raised where the server
calls it); any other is the server's."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import server.cli.data
from server.cli.main import main
from server.contract.context import installed

PLUGIN = '''
from server import LoadFormat, LoadReport, hookimpl

PLUGIN_API = "1.1"


def fine(call):
    return LoadReport(inserted=1)


def wrong_signature(call, extra):
    return LoadReport()


def _ratio(count):
    return 100 / count


def raises(call):
    return LoadReport(inserted=_ratio(0))


@hookimpl
def register_load_formats(settings):
    return [LoadFormat("fine", "", fine), LoadFormat("wrong", "", wrong_signature), LoadFormat("raises", "", raises)]
'''


def _storage_fails(*args: Any, **kwargs: Any) -> None:
    raise FileExistsError(17, "File exists", "var")


def _report_fails(*args: Any, **kwargs: Any) -> None:
    raise TypeError("the server's own report step")


@dataclass(frozen=True)
class Case:
    fmt: str
    says: str
    blamed: bool  # on the plugin (else the server's bug)
    patch: tuple[str, Any] | None = None  # a step of server.cli.data replaced by one that fails


CASES = [
    pytest.param(Case("wrong", "plugin blame_plugin failed: TypeError: ", True), id="wrong-signature-the-plugin-s"),
    pytest.param(Case("raises", "plugin blame_plugin failed: ZeroDivisionError: division by zero (at ", True),
                 id="its-code-raises-the-plugin-s"),
    pytest.param(Case("fine", "unexpected FileExistsError: [Errno 17] File exists: 'var' (a bug: please report it",
                      False, ("ensure_schema", _storage_fails)), id="a-storage-step-fails-the-server-s"),
    pytest.param(Case("fine", "unexpected TypeError: the server's own report step (a bug: please report it",
                      False, ("report_lines", _report_fails)), id="a-server-type-error-the-server-s"),
]


@pytest.mark.parametrize("case", CASES)
def test_a_load_failure_is_blamed_on_whose_code_failed(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    (site / "blame_plugin").mkdir(parents=True)
    (site / "blame_plugin" / "__init__.py").write_text(PLUGIN, encoding="utf-8")
    (site / "blame_plugin-0.1.dist-info").mkdir()
    (site / "blame_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: blame-plugin\nVersion: 0.1\n", encoding="utf-8")
    (site / "blame_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[orgunit_fhir]\nblame_plugin = blame_plugin\n", encoding="utf-8")
    if case.patch is not None:
        monkeypatch.setattr(server.cli.data, *case.patch)
    with installed([site]):
        status = main(["load", case.fmt, str(tmp_path), "--database", f"sqlite:///{tmp_path / 'db.sqlite'}"])
    said = capsys.readouterr().err
    assert status == 1
    assert case.says in said, said
    assert ("plugin blame_plugin" in said) is case.blamed and ("a bug: please report it" in said) is not case.blamed
