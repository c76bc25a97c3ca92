"""Settings that name paths, as an operator gets them wrong (issue 41, second platform-team trial, finding 2).

`ORGUNIT_FHIR_SETTINGS=` set but empty made `load` fail with "unexpected IsADirectoryError: ... '.' (a bug: please
report it ...)". An empty variable (or `--settings=`) counts as unset, as README says, for every command: then
./settings.yaml, else the defaults; `ORGUNIT_FHIR_DATABASE_URL=` likewise leaves the settings' database. Any setting
naming a path that is a directory where a file should be (or a file where a folder should be, or a file that is not
text) is refused by one line naming the setting, never as a bug of the server or a fault of a plugin."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from server.cli.main import main
from server.settings import DATABASE_ENV, SETTINGS_ENV

ROOT = Path(__file__).resolve().parents[2]
LAKELAND_CSV = ROOT / "tests" / "fixtures" / "mapped" / "lakeland_facilities.csv"
LAKELAND = ROOT / "tests" / "fixtures" / "mapped" / "lakeland_facilities.mapping.yaml"
LOAD = ("load", "mapped", str(LAKELAND_CSV), "--mapping", str(LAKELAND))
SECRET = "s" * 48


@dataclass(frozen=True)
class Unset:
    command: tuple[str, ...]
    shows: str  # in what it prints: proof that the settings (and the database) it read are the expected ones
    settings_file: bool = True  # ./settings.yaml (data_dir: here) in the current folder; else the defaults (./var)


UNSET = [
    pytest.param(Unset(LOAD, "load mapped: Location: 34 inserted"), id="load"),
    pytest.param(Unset(LOAD, "load mapped: Location: 34 inserted", settings_file=False), id="load-defaults"),
    pytest.param(Unset(("migrate",), "migrate: schema"), id="migrate"),
    pytest.param(Unset(("check-config",), "settings: settings.yaml parsed"), id="check-config"),
    pytest.param(Unset(("check-config",), "settings: (defaults) parsed", settings_file=False),
                 id="check-config-defaults"),
    pytest.param(Unset(("versions", "list"), "Lakeland MFL"), id="versions-list"),
    pytest.param(Unset(("data-sources", "list"), "Lakeland MFL"), id="data-sources-list"),
    pytest.param(Unset(("token",), "eyJ"), id="token"),
    pytest.param(Unset(("render",), "render: "), id="render"),
]


@pytest.mark.parametrize("case", UNSET)
def test_an_empty_variable_counts_as_unset_for_every_command(case: Unset, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / ("here" if case.settings_file else "var")
    if case.settings_file:
        (tmp_path / "settings.yaml").write_text("server:\n  data_dir: here\n", encoding="utf-8")
    monkeypatch.setenv(SETTINGS_ENV, "")
    monkeypatch.setenv(DATABASE_ENV, "")
    if case.command != LOAD:
        assert main([*LOAD]) == 0
        (folder / "jwt-secret").write_text(SECRET, encoding="utf-8")
    capsys.readouterr()
    assert main([*case.command]) == 0
    said = capsys.readouterr()
    assert case.shows in said.out + said.err
    assert (folder / "orgunits.db").is_file()  # the database of ./settings.yaml's data_dir (or the default's)
    assert not (tmp_path / ("var" if case.settings_file else "here")).exists()


@dataclass(frozen=True)
class Mistake:
    command: tuple[str, ...]
    status: int
    says: str  # in what it prints ({tmp}: the test's folder)
    settings: str = ""  # settings.yaml given with --settings (empty: none given)
    env: dict[str, str] = field(default_factory=dict)  # environment variables ({tmp} replaced)
    options: tuple[str, ...] = ()  # after the command ({tmp} replaced)


# in the test's folder: a folder `adir`, a file `afile`, a file `binary` that is not UTF-8 text
MISTAKES = [
    pytest.param(Mistake(LOAD, 2, "settings file {tmp}/adir (from $ORGUNIT_FHIR_SETTINGS) is a directory",
                         env={SETTINGS_ENV: "{tmp}/adir"}), id="settings-variable-a-directory"),
    pytest.param(Mistake(("check-config",), 2, "settings file {tmp}/adir (from --settings) is a directory",
                         options=("--settings", "{tmp}/adir")), id="settings-option-a-directory"),
    pytest.param(Mistake(("token",), 2, "settings file {tmp}/binary (from --settings) is not UTF-8 text",
                         options=("--settings", "{tmp}/binary")), id="settings-file-not-text"),
    pytest.param(Mistake(("migrate",), 2, "settings file settings.yaml (from the current folder) is a directory",
                         env={"MAKE_SETTINGS_YAML_A_DIRECTORY": "1"}), id="settings-yaml-a-directory"),
    pytest.param(Mistake(LOAD, 2, "server.data_dir {tmp}/afile: {tmp}/afile is not a directory",
                         "server: {data_dir: {tmp}/afile}"), id="data-dir-a-file-load"),
    pytest.param(Mistake(("migrate",), 2, "server.data_dir {tmp}/afile/var: {tmp}/afile is not a directory",
                         "server: {data_dir: {tmp}/afile/var}"), id="data-dir-below-a-file-migrate"),
    pytest.param(Mistake(("token",), 2, "server.data_dir {tmp}/afile: {tmp}/afile is not a directory",
                         "server: {data_dir: {tmp}/afile}"), id="data-dir-a-file-token"),
    pytest.param(Mistake(("serve", "--port", "1"), 2, "server.data_dir {tmp}/afile: {tmp}/afile is not a directory",
                         "server: {data_dir: {tmp}/afile}"), id="data-dir-a-file-serve"),
    pytest.param(Mistake(("check-config",), 1, "FAIL  server.data_dir {tmp}/afile: {tmp}/afile is not a directory",
                         "server: {data_dir: {tmp}/afile}"), id="data-dir-a-file-check-config"),
    pytest.param(Mistake(("migrate",), 2, "database.url (or --database, $ORGUNIT_FHIR_DATABASE_URL) "
                         "sqlite:///{tmp}/adir: {tmp}/adir is a directory, not a SQLite database file",
                         options=("--database", "sqlite:///{tmp}/adir")), id="database-option-a-directory"),
    pytest.param(Mistake(LOAD, 2, "sqlite:///{tmp}/afile/x.db: {tmp}/afile is not a directory, where the "
                         "database's folder should be", env={DATABASE_ENV: "sqlite:///{tmp}/afile/x.db"}),
                 id="database-variable-below-a-file"),
    pytest.param(Mistake(("token",), 2, "auth.secret_file {tmp}/adir: is a directory, not a file",
                         "auth: {secret_file: {tmp}/adir}"), id="secret-file-a-directory-token"),
    pytest.param(Mistake(("check-config",), 1, "FAIL  auth.secret_file {tmp}/adir: is a directory, not a file",
                         "auth: {secret_file: {tmp}/adir}"), id="secret-file-a-directory-check-config"),
    pytest.param(Mistake(("token",), 2, "auth.secret_file {tmp}/binary: is not UTF-8 text",
                         "auth: {secret_file: {tmp}/binary}"), id="secret-file-not-text"),
    pytest.param(Mistake(("check-config",), 1, "FAIL  auth.secret_file {tmp}/binary: is not UTF-8 text",
                         "auth: {secret_file: {tmp}/binary}"), id="secret-file-not-text-check-config"),
    pytest.param(Mistake(("token",), 2, "the HMAC secret of server.data_dir {tmp}/adir/jwt-secret: is a directory",
                         "server: {data_dir: {tmp}/adir}"), id="data-dir-secret-a-directory-token"),
    pytest.param(Mistake(("check-config",), 1, "FAIL  auth.public_key_file {tmp}/adir: is a directory, not a file",
                         "auth: {public_key_file: {tmp}/adir, algorithms: [RS256]}"),
                 id="public-key-file-a-directory"),
    pytest.param(Mistake(("check-config",), 1, "FAIL  auth.jwks_file {tmp}/adir: is a directory, not a file",
                         "auth: {jwks_file: {tmp}/adir, algorithms: [RS256]}"), id="jwks-file-a-directory"),
    pytest.param(Mistake(("load", "mapped", str(LAKELAND_CSV)), 1, "mapping {tmp}/adir: cannot read the file",
                         "server: {data_dir: {tmp}/data}", options=("--mapping", "{tmp}/adir")),
                 id="mapping-a-directory"),
    pytest.param(Mistake(("load", "mapped", str(LAKELAND_CSV)), 1, "mapping {tmp}/binary: not UTF-8 text",
                         "server: {data_dir: {tmp}/data}", options=("--mapping", "{tmp}/binary")),
                 id="mapping-not-text"),
]


@pytest.mark.parametrize("case", MISTAKES)
def test_a_path_setting_that_cannot_be_is_named(case: Mistake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir" / "jwt-secret").mkdir()
    (tmp_path / "afile").write_text("a file\n", encoding="utf-8")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00 not text")
    if "MAKE_SETTINGS_YAML_A_DIRECTORY" in case.env:
        (tmp_path / "settings.yaml").mkdir()
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.replace("{tmp}", str(tmp_path)))
    settings: tuple[str, ...] = ()
    if case.settings:
        (tmp_path / "given.yaml").write_text(case.settings.replace("{tmp}", str(tmp_path)), encoding="utf-8")
        settings = ("--settings", str(tmp_path / "given.yaml"))
    capsys.readouterr()
    assert main([*case.command, *(option.replace("{tmp}", str(tmp_path)) for option in case.options),
                 *settings]) == case.status
    said = capsys.readouterr()
    printed = said.out + said.err
    assert case.says.replace("{tmp}", str(tmp_path)) in printed
    assert "a bug" not in printed and "unexpected" not in printed and " failed:" not in printed
    assert "Traceback" not in printed
    assert not (tmp_path / "var").exists()  # nothing made elsewhere instead
