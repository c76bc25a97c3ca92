"""The command line: token, demo, load, serve's start-up checks."""
from __future__ import annotations

import subprocess
from pathlib import Path

import jwt
import pytest
from sqlalchemy import func, select

from server.settings import load_settings
from server.storage.db import create_db_engine
from plugins.orgunits.tables import org_unit
from tests.support.contexts import IASO_CSV
from tests.support.live import CLI, _env, run_cli


def count_units(settings_path: Path, database: str) -> int:
    engine = create_db_engine(load_settings(settings_path, database))
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(org_unit)).scalar_one()
    finally:
        engine.dispose()


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n")
    return path


def test_token_is_signed_with_the_generated_secret(settings_path: Path, database_url: str, tmp_path: Path) -> None:
    token = run_cli("token", "--sub", "alice", "--permission", "a", "--permission", "b", "--ttl", "60",
                    settings=settings_path, database=database_url).strip()
    secret = (tmp_path / "var" / "jwt-secret").read_text().strip()
    claims = jwt.decode(token, secret, algorithms=["HS256"])
    assert claims["sub"] == "alice" and claims["permissions"] == ["a", "b"] and claims["exp"] - claims["iat"] == 60


def test_demo_then_load(settings_path: Path, database_url: str) -> None:
    run_cli("demo", "--size", "300", settings=settings_path, database=database_url)
    assert count_units(settings_path, database_url) == 300
    run_cli("load", "iaso-csv", str(IASO_CSV), settings=settings_path, database=database_url)
    assert count_units(settings_path, database_url) == 436
    run_cli("load", "iaso-csv", str(IASO_CSV), settings=settings_path, database=database_url)
    assert count_units(settings_path, database_url) == 436


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=_env(), cwd=cwd)


def test_load_refuses_a_bad_file_with_its_line_number(settings_path: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    lines = IASO_CSV.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace(lines[3].split(",")[0], "not-an-id", 1)
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = cli("load", "iaso-csv", str(bad), "--settings", str(settings_path))
    assert done.returncode == 1
    assert "line 4" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("settings_text, words", [
    pytest.param("server:\n  port: eighty\n", "server.port", id="bad-type"),
    pytest.param("sever:\n  port: 1\n", "unknown settings section", id="typo-section"),
    pytest.param("plugins:\n  location:\n    config:\n      status_map: {NEW: open}\n", "plugin location", id="bad-plugin"),
    pytest.param("plugins:\n  organisation: {enabled: true}\n", "not installed", id="unknown-plugin"),
    pytest.param("auth:\n  algorithms: [none]\n", "auth.algorithms", id="alg-none"),
])
def test_serve_refuses_bad_settings_with_a_clear_message(tmp_path: Path, settings_text: str, words: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(settings_text)
    done = cli("serve", "--settings", str(path), "--port", "1", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "configuration error" in done.stderr and words in done.stderr and "Traceback" not in done.stderr
