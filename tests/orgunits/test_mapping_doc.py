"""README's "Any registry export: `load mapped`" says where each mapping key goes and what a level's `parent` holds,
and shows the Kenya Master Facility List's mapping (issue 41, second platform-team trial, finding 4a-b): the table is
checked against the keys the parser knows at each place, the `parent` rule against what the reader makes of a
made-up two-file export, and the snippet against the mapping the Kenya sample's tests load."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from plugins.orgunits.importers.mapped import read_units
from plugins.orgunits.importers.mapping import LEVEL_KEYS, SECTION_KEYS, TOP_KEYS, read_mapping
from server import LoadError

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README[README.index("### Any registry export: `load mapped`"):]
SECTION = SECTION[:SECTION.index("\n### ", 1)]


def _table() -> list[tuple[str, str]]:
    """(key, its `where` cell) of each row of the keys table (first column: the keys in backquotes)."""
    rows = [line for line in SECTION.splitlines() if line.startswith("| `")]
    return [(key, row.split(" | ")[1]) for row in rows for key in re.findall(r"`([a-z_]+)`", row.split(" | ")[0])]


@pytest.mark.parametrize("where, keys", [
    pytest.param("top level", TOP_KEYS, id="top-level"),
    pytest.param("in `units` and in each level", SECTION_KEYS - {"format", "records", "delimiter", "encoding"},
                 id="units-and-levels"),
    pytest.param("in a level", LEVEL_KEYS - SECTION_KEYS, id="levels-only"),
    pytest.param("in `units` (for the file on the command line) and in each level with a `file`",
                 frozenset({"format", "records", "delimiter", "encoding"}), id="reading-keys"),
])
def test_the_table_says_where_each_key_goes(where: str, keys: frozenset[str]) -> None:
    table = _table()
    assert {key for key, _ in table} == TOP_KEYS | LEVEL_KEYS  # every key the parser knows
    assert {key for key, cell in table if cell.startswith(where)} == keys


def test_a_reading_key_at_the_top_level_is_refused_as_the_readme_says(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("records: '*.records'\nunits: {id: a, name: b, type: c}\n", encoding="utf-8")
    with pytest.raises(LoadError) as refused:
        read_mapping(tmp_path / "m.yaml")
    assert "unknown key(s) records; known: data_source, date_format, identifier_system, levels, root, units" in \
        str(refused.value)
    assert str(refused.value).split(": ", 1)[1] in " ".join(SECTION.split())  # README quotes it (its lines wrapped)


@pytest.mark.parametrize("region_prefix, expected", [
    pytest.param(None, {"district-7": "region-3", "hf-1": "district-7"}, id="the-level-above-s-prefix"),
    pytest.param("r", {"district-7": "r3", "hf-1": "district-7"}, id="a-prefix-of-its-own"),
])
def test_a_parent_holds_the_raw_code(tmp_path: Path, region_prefix: str | None, expected: dict[str, str]) -> None:
    """A made-up export of two files as README describes: a level's `parent` reads `3`, the loader makes
    `region-3` of it (the level above's prefix)."""
    (tmp_path / "regions.json").write_text(json.dumps([{"records": [{"code": 3, "name": "North"}]}]),
                                           encoding="utf-8")
    (tmp_path / "districts.json").write_text(json.dumps([{"records": [{"code": 7, "name": "Hill",
                                                                       "region": {"code": 3}}]}]), encoding="utf-8")
    (tmp_path / "facilities.json").write_text(json.dumps([{"records": [{"code": "hf-1", "name": "Post",
                                                                        "kind": "Clinic",
                                                                        "district": {"code": 7}}]}]),
                                              encoding="utf-8")
    (tmp_path / "m.yaml").write_text(
        "levels:\n"
        f"  - {{file: regions.json, records: '*.records', type: {{value: Region}}, id: code, name: name"
        f"{f', prefix: {region_prefix}' if region_prefix else ''}}}\n"
        "  - {file: districts.json, records: '*.records', type: {value: District}, id: code, name: name,\n"
        "     parent: region.code}\n"
        "units: {records: '*.records', id: code, name: name, type: kind, parent: district.code}\n", encoding="utf-8")
    units = read_units(read_mapping(tmp_path / "m.yaml"), tmp_path / "facilities.json")
    parents = {unit.ref: unit.parent for unit in units if unit.parent is not None}
    assert parents == expected


def test_the_kenya_snippet_is_the_mapping_the_tests_load() -> None:
    snippet = SECTION[SECTION.index("# kenya.mapping.yaml"):]
    snippet = snippet[snippet.index("\n") + 1:snippet.index("```")]
    shipped = (ROOT / "tests" / "fixtures" / "kenya_mfl_sample" / "kenya.mapping.yaml").read_text(encoding="utf-8")
    assert snippet == shipped
