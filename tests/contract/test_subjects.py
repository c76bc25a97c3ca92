"""Issue 41 item 5: the contract suite for one package among several. It checks the subjects named and treats the
other installed providers (and the subjects given as context) as context, their samples optional; the scratch
PostgreSQL database's name prefix is an option (a role that may create `team_*` databases only)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest

from server.contract.context import scratch_database
from server.contract.options import DEFAULT_PREFIX, PREFIX_ENV, PREFIX_OPTION, database_prefix
from tests.support import pg
from tests.support.proof import SITE

ROOT = Path(__file__).resolve().parents[2]
SELECTED = "every_provider_of_the_subjects or cover_every_declared"


def _suite(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """The plugin's checks from an empty directory (no conftest of this tree), the proof package installed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SITE)])}
    env.pop("ORGUNIT_FHIR_CONTRACT_SUBJECTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "server.contract.plugin", "-q", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path), "-k", SELECTED, *options],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)


def test_one_subject_among_installed_packages_is_checked_alone(tmp_path: Path) -> None:
    """The org-unit subject checked while the proof package is installed and enabled, without samples of its own:
    its HealthcareService, Practitioner and PractitionerRole are context (it was "give Samples for every registered
    provider")."""
    done = _suite(tmp_path, "--fhir-contract=plugins.orgunits.contract_samples:SUBJECT")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_a_subject_checked_over_a_context_subject(tmp_path: Path) -> None:
    """The proof subject checked, the org units it is scoped through loaded as context (not checked)."""
    done = _suite(tmp_path, "--fhir-contract=tests.proof.contract_samples:SUBJECT",
                  "--fhir-contract-context=plugins.orgunits.contract_samples:SUBJECT")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "[Location-" not in done.stdout  # the context's samples are not checked
    collected = _suite(tmp_path, "--fhir-contract=tests.proof.contract_samples:SUBJECT",
                       "--fhir-contract-context=plugins.orgunits.contract_samples:SUBJECT", "--collect-only")
    assert "HealthcareService" in collected.stdout and "[Location" not in collected.stdout, collected.stdout[-2000:]


def test_a_missing_sample_of_a_checked_subject_still_fails(tmp_path: Path) -> None:
    """The proof subject checked without samples for Practitioner: named, as before (its own plugin serves it)."""
    (tmp_path / "partial.py").write_text(
        "from dataclasses import replace\n"
        "from tests.proof.contract_samples import SUBJECT as PROOF\n"
        "SUBJECT = replace(PROOF, samples=tuple(s for s in PROOF.samples if s.resource_type != 'Practitioner'))\n",
        encoding="utf-8")
    env_path = f"--fhir-contract=partial:SUBJECT"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "server.contract.plugin", "-q", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), "-k", "every_provider_of_the_subjects",
                           env_path, "--fhir-contract-context=plugins.orgunits.contract_samples:SUBJECT"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), str(SITE)])})
    assert done.returncode == 1, done.stdout[-3000:]
    assert "give Samples for Practitioner" in done.stdout


@pytest.mark.parametrize("given, env, expected", [
    pytest.param(None, None, DEFAULT_PREFIX, id="default"),
    pytest.param("team_", None, "team_", id="option"),
    pytest.param(None, "team_ci_", "team_ci_", id="environment"),
    pytest.param("Team-", None, None, id="refused"),
])
def test_the_scratch_database_prefix_is_an_option(monkeypatch: pytest.MonkeyPatch, given: str | None,
                                                  env: str | None, expected: str | None) -> None:
    config = SimpleNamespace(getoption=lambda name, default=None: given if name == PREFIX_OPTION.lstrip("-")
                             .replace("-", "_") else default)
    monkeypatch.delenv(PREFIX_ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(PREFIX_ENV, env)
    if expected is None:
        with pytest.raises(pytest.UsageError, match="lower-case letters"):
            database_prefix(config)  # type: ignore[arg-type]
    else:
        assert database_prefix(config) == expected  # type: ignore[arg-type]


@pytest.mark.postgres
def test_the_scratch_database_is_named_with_the_prefix() -> None:
    pg.ensure_running()
    with scratch_database(pg.ADMIN_URL, "team_") as url:
        name = url.rsplit("/", 1)[-1]
        assert name.startswith("team_") and len(name) == len("team_") + 12
        with psycopg.connect(pg.ADMIN_URL) as conn:
            assert conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    with psycopg.connect(pg.ADMIN_URL) as conn:
        assert not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
