"""A load that writes two types reports each on its own (issue 29 item 7): an org-unit load writes its units
(Locations) and its data source (an Organization), and `load` prints a line per type and its `--json` line holds
`types`, each type's counts, never one sum; on both backends. Each type's line names only its own resources (a
second platform-team trial of issue 41: the Organization's line of a mapped load carried the Locations'
`inserted_units`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.cli.main import main
from tests.orgunits.test_importers import DHIS2_SAMPLE

UNITS = 32  # in the DHIS2 sample
MAPPED = Path(__file__).resolve().parents[1] / "fixtures" / "mapped"
MAPPED_LOAD = ("mapped", str(MAPPED / "lakeland_facilities.csv"), "--mapping",
               str(MAPPED / "lakeland_facilities.mapping.yaml"))
MAPPED_UNITS = 23 + 1 + 3 + 7  # its facilities, the root, its counties and sub-counties


@dataclass(frozen=True)
class Case:
    before: tuple[tuple[str, ...], ...]  # the loads made first (their options)
    options: tuple[str, ...]  # the load reported
    types: dict[str, dict[str, int]]  # its counts per type (the non-zero ones)
    plugins: str = ""  # settings.yaml's plugins section
    named: dict[str, tuple[str, ...]] | None = None  # per type, its `<kind>_units` holding resources (default: none)
    load: tuple[str, ...] = ("dhis2", str(DHIS2_SAMPLE))  # the format and its file (and options)


INSERTED = {"Location": ("inserted_units",), "Organization": ()}
CASES = [
    pytest.param(Case((), (), {"Location": {"inserted": UNITS}, "Organization": {"inserted": 1}}, named=INSERTED),
                 id="first-load"),
    pytest.param(Case(((),), (), {"Location": {"unchanged": UNITS}, "Organization": {"unchanged": 1}}),
                 id="same-file-again"),
    pytest.param(Case(((),), ("--version", "2"), {"Location": {"updated": UNITS}, "Organization": {"updated": 1}},
                      named={"Location": ("updated_units",), "Organization": ()}),
                 id="a-new-source-version-served"),
    pytest.param(Case((), ("--dry-run",), {"Location": {"inserted": UNITS}, "Organization": {"inserted": 1}},
                      named=INSERTED),
                 id="dry-run"),
    pytest.param(Case((), (), {"Location": {"inserted": UNITS}}, plugins="plugins:\n  organization: false\n",
                      named={"Location": ("inserted_units",)}),
                 id="organizations-not-served"),
    pytest.param(Case((), (), {"Location": {"inserted": MAPPED_UNITS}, "Organization": {"inserted": 1}},
                      named=INSERTED, load=MAPPED_LOAD),
                 id="mapped-first-load"),
]
COUNTS = ("inserted", "updated", "unchanged", "deleted", "missing")


def _named(fields: dict[str, object]) -> tuple[str, ...]:
    """The `<kind>_units` keys of a report's fields that name resources."""
    return tuple(key for key, value in fields.items() if key.endswith("_units") and value)


@pytest.mark.parametrize("case", CASES)
def test_each_type_a_load_writes_is_counted_on_its_own(case: Case, database_url: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n{case.plugins}", encoding="utf-8")
    common = ("--settings", str(settings), "--database", database_url)
    for options in case.before:
        assert main(["load", *case.load, *options, *common]) == 0
    capsys.readouterr()
    assert main(["load", *case.load, *case.options, "--json", *common]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out.strip().splitlines()[-1])
    assert {name: {k: v for k, v in counts.items() if k in COUNTS and v}
            for name, counts in report["types"].items()} == case.types
    assert report["resource_type"] == "Location"
    assert {k: report[k] for k in COUNTS if report[k]} == case.types["Location"]  # the units', as they always were
    named = case.named or {name: () for name in case.types}
    assert {name: _named(counts) for name, counts in report["types"].items()} == named
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    lines = [line for line in logged if line["message"].startswith(f"load {case.load[0]}")]
    assert [(line["resource_type"], {k: line[k] for k in COUNTS if line[k]}) for line in lines] == \
        list(case.types.items())  # a line per type, its fields that type's counts
    assert {line["resource_type"]: _named(line) for line in lines} == named  # ...and only its own resources named
    for line in lines:
        assert {key: line[key] for key in named[line["resource_type"]]} == \
            {key: report["types"][line["resource_type"]][key] for key in named[line["resource_type"]]}
    if len(case.types) > 1:
        assert all(f": {line['resource_type']}: " in line["message"] for line in lines), lines
    else:  # one type: the line of before
        assert lines[0]["message"].startswith(f"load dhis2: {UNITS:,} inserted, 0 updated, 0 unchanged in ")
