"""A load that writes two types reports each on its own (issue 29 item 7): an org-unit load writes its units
(Locations) and its data source (an Organization), and `load` prints a line per type and its `--json` line holds
`types`, each type's counts, never one sum; on both backends."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.cli.main import main
from tests.orgunits.test_importers import DHIS2_SAMPLE

UNITS = 32  # in the DHIS2 sample


@dataclass(frozen=True)
class Case:
    before: tuple[tuple[str, ...], ...]  # the loads made first (their options)
    options: tuple[str, ...]  # the load reported
    types: dict[str, dict[str, int]]  # its counts per type (the non-zero ones)
    plugins: str = ""  # settings.yaml's plugins section


CASES = [
    pytest.param(Case((), (), {"Location": {"inserted": UNITS}, "Organization": {"inserted": 1}}), id="first-load"),
    pytest.param(Case(((),), (), {"Location": {"unchanged": UNITS}, "Organization": {"unchanged": 1}}),
                 id="same-file-again"),
    pytest.param(Case(((),), ("--version", "2"), {"Location": {"updated": UNITS}, "Organization": {"updated": 1}}),
                 id="a-new-source-version-served"),
    pytest.param(Case((), ("--dry-run",), {"Location": {"inserted": UNITS}, "Organization": {"inserted": 1}}),
                 id="dry-run"),
    pytest.param(Case((), (), {"Location": {"inserted": UNITS}}, plugins="plugins:\n  organization: false\n"),
                 id="organizations-not-served"),
]
COUNTS = ("inserted", "updated", "unchanged", "deleted", "missing")


@pytest.mark.parametrize("case", CASES)
def test_each_type_a_load_writes_is_counted_on_its_own(case: Case, database_url: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n{case.plugins}", encoding="utf-8")
    common = ("--settings", str(settings), "--database", database_url)
    for options in case.before:
        assert main(["load", "dhis2", str(DHIS2_SAMPLE), *options, *common]) == 0
    capsys.readouterr()
    assert main(["load", "dhis2", str(DHIS2_SAMPLE), *case.options, "--json", *common]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out.strip().splitlines()[-1])
    assert {name: {k: v for k, v in counts.items() if k in COUNTS and v}
            for name, counts in report["types"].items()} == case.types
    assert report["resource_type"] == "Location"
    assert {k: report[k] for k in COUNTS if report[k]} == case.types["Location"]  # the units', as they always were
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    lines = [line for line in logged if line["message"].startswith("load dhis2")]
    assert [(line["resource_type"], {k: line[k] for k in COUNTS if line[k]}) for line in lines] == \
        list(case.types.items())  # a line per type, its fields that type's counts
    if len(case.types) > 1:
        assert all(f": {line['resource_type']}: " in line["message"] for line in lines), lines
    else:  # one type: the line of before
        assert lines[0]["message"].startswith(f"load dhis2: {UNITS:,} inserted, 0 updated, 0 unchanged in ")
