"""The contract suite from a provider team's own repository: no orgunit-fhir checkout on the path, only the
installed distribution (its pytest plugin, found through its entry point or named with -p) and the repository's
own package and samples. The repository is made here: the proof package (tests/proof/site) and its data files,
and samples written against `server.contract` alone (this project's own ones, their imports pointed at the
repository's modules); the org units its provider is scoped through are the installed org-unit subject's
(plugins.orgunits.contract_samples)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from server.contract import checks
from server.contract.options import POSTGRES_ENV, SUBJECTS_ENV

ROOT = Path(__file__).resolve().parents[2]
PROOF = ROOT / "tests" / "proof"
PACKAGE = "provider_tests"
CONTRACT = f"--fhir-contract=plugins.orgunits.contract_samples:SUBJECT,{PACKAGE}.contract_samples:SUBJECT"
WRONG = ('Search("_id", "4", "4")', 'Search("_id", "4", "5")')  # finds another service than 4
ISOLATION = f'''
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

CHECKOUT = Path({str(ROOT)!r})


def test_no_checkout_on_the_path():
    assert not [p for p in sys.path if Path(p or ".").resolve() == CHECKOUT]
    found = importlib.util.find_spec("tests")
    assert found is None or CHECKOUT not in Path(found.origin or "").parents, found
    assert "tests" not in sys.modules
    assert importlib.metadata.distribution("orgunit-fhir").entry_points.select(group="pytest11")
'''


def _rewired(path: Path, *replacements: tuple[str, str]) -> str:
    """`path`'s text with these replacements (its imports of this project's tests pointed at the repository's
    modules): it imports nothing from this project's tests."""
    text = path.read_text(encoding="utf-8")
    for old, new in replacements:
        assert old in text, (path, old)
        text = text.replace(old, new)
    assert not re.search(r"^\s*(from|import) tests\b", text, re.MULTILINE), f"{path} still imports tests"
    return text


def _repository(folder: Path, *, wrong: bool) -> Path:
    """A provider team's repository: its package (not installed: site/), its data, its samples and a test."""
    repo = folder / "repo"
    shutil.copytree(PROOF / "site", repo / "site", ignore=shutil.ignore_patterns("__pycache__"))
    for data in PROOF.glob("*.json"):
        shutil.copy(data, repo / data.name)
    samples = repo / PACKAGE
    samples.mkdir()
    for name, text in {
        "__init__.py": "",
        "proof.py": _rewired(ROOT / "tests" / "support" / "proof.py", ('parents[1] / "proof"', "parents[1]")),
        "contract_samples.py": _rewired(PROOF / "contract_samples.py", ("tests.support.proof", f"{PACKAGE}.proof"),
                                        *([WRONG] if wrong else [])),
    }.items():
        (samples / name).write_text(text, encoding="utf-8")
    (repo / "test_isolation.py").write_text(ISOLATION, encoding="utf-8")
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider"\n',
                                         encoding="utf-8")
    return repo


@pytest.mark.parametrize(("args", "wrong", "returncode", "present", "absent"), [
    pytest.param(("-v", "-rs", CONTRACT), False, 0,
                 ("test_isolation.py::test_no_checkout_on_the_path PASSED",
                  "fhir-contract::test_read[HealthcareService-sqlite] PASSED",
                  "fhir-contract::test_search_by_each_parameter[HealthcareService-_id=4-sqlite] PASSED",
                  "fhir-contract::test_read[HealthcareService-postgresql] SKIPPED",
                  "no PostgreSQL server: give --fhir-contract-postgres="),
                 (" FAILED", " ERROR"), id="through-its-entry-point"),
    pytest.param(("-p", "server.contract.plugin", "-m", "not postgres", CONTRACT), True, 1,
                 ("FAILED fhir-contract::test_search_by_each_parameter[HealthcareService-_id=4-sqlite]",
                  "1 failed", "deselected"),
                 (), id="named-with-p-and-a-wrong-sample-fails"),
    pytest.param(("-v",), False, 0, ("test_isolation.py::test_no_checkout_on_the_path PASSED", "1 passed"),
                 ("fhir-contract",), id="inert-without-the-option"),
])
def test_a_provider_repository_runs_the_suite_without_a_checkout(
        tmp_path: Path, args: tuple[str, ...], wrong: bool, returncode: int, present: tuple[str, ...],
        absent: tuple[str, ...]) -> None:
    repo = _repository(tmp_path, wrong=wrong)
    env = {name: value for name, value in os.environ.items()
           if name not in {"PYTHONPATH", "PYTEST_ADDOPTS", SUBJECTS_ENV, POSTGRES_ENV}}
    # its own basetemp: the shared /tmp/pytest-of-<user> is pruned by whichever pytest session starts next
    done = subprocess.run([sys.executable, "-m", "pytest", f"--basetemp={tmp_path / 'basetemp'}", *args], cwd=repo,
                          env={**env, "PYTHONPATH": str(repo)}, capture_output=True, text=True, timeout=600,
                          check=False)
    output = done.stdout + done.stderr
    said = "\n".join(line for line in output.splitlines() if line.startswith(("E ", "FAILED", "ERROR", "=")))
    assert done.returncode == returncode, said[-5000:] or output[-5000:]
    assert [p for p in present if p not in output] == [], said[-5000:] or output[-5000:]
    assert [a for a in absent if a in output] == [], output[-5000:]


def test_a_module_importing_the_checks_gets_every_one() -> None:
    """`from server.contract.checks import *` (tests/contract/test_contract.py) runs what the plugin runs."""
    defined = {name for name, value in vars(checks).items() if name.startswith(("test_", "contract_"))
               and callable(value) and getattr(value, "__module__", checks.__name__) == checks.__name__}
    assert defined | {"pytest_generate_tests"} == set(checks.__all__)
