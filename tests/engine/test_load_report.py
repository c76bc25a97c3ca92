"""LoadReport per resource type (issue 29 item 7): a format of one type reports as before; one that writes several
reports each type's counts on a line of its own and in the JSON line's `types`, never a sum; a report of several
types that does not name each once is a plugin's mistake, refused."""
from __future__ import annotations

import pytest

from server import ConfigError, LoadReport
from server.cli.data import report_fields, report_lines

TWO = LoadReport(3, 1, 5, 0, ("a note",), about={"data_source": "X"}, resource_type="Location",
                 other_types=(LoadReport(inserted=1, resource_type="Organization"),))


@pytest.mark.parametrize("report, lines, types", [
    pytest.param(LoadReport(inserted=2), ["load f: 2 inserted, 0 updated, 0 unchanged in 0.5s"], None,
                 id="one-type-unnamed-as-before"),
    pytest.param(LoadReport(inserted=2, resource_type="Location"),
                 ["load f: 2 inserted, 0 updated, 0 unchanged in 0.5s"], {"Location": 2}, id="one-type-named"),
    pytest.param(TWO, ["load f: Location: 3 inserted, 1 updated, 5 unchanged in 0.5s",
                       "load f: Organization: 1 inserted, 0 updated, 0 unchanged in 0.5s"],
                 {"Location": 3, "Organization": 1}, id="two-types-a-line-each"),
])
def test_a_report_per_type(report: LoadReport, lines: list[str], types: dict[str, int] | None) -> None:
    logged = report_lines("f", "p", report, False, 0.5)
    assert [line for line, _ in logged] == lines
    assert [fields["inserted"] for _, fields in logged] == [part.inserted for part in report.by_type]
    fields = report_fields("f", "p", report, False, 0.5)
    assert fields["inserted"] == report.inserted and fields["notes"] == list(report.notes)  # the main type's, as before
    assert (None if "types" not in fields else {name: c["inserted"] for name, c in fields["types"].items()}) == types


@pytest.mark.parametrize("other_types, main", [
    pytest.param((LoadReport(inserted=1),), "Location", id="other-type-unnamed"),
    pytest.param((LoadReport(inserted=1, resource_type="Organization"),), None, id="main-type-unnamed"),
    pytest.param((LoadReport(resource_type="Location"),), "Location", id="a-type-twice"),
    pytest.param((TWO,), "Group", id="nested"),
])
def test_several_types_each_named_once(other_types: tuple[LoadReport, ...], main: str | None) -> None:
    with pytest.raises(ConfigError, match="names each once"):
        LoadReport(resource_type=main, other_types=other_types)


#: a main type whose report holds every key that only some reports have (`<kind>_units`, a change of its own,
#: `refused`), and another type with resources of its own named
RICH = LoadReport(3, 0, 0, notes=("a note",), resource_type="Location", changes=(("withdrawn", 2),),
                  named={"inserted": ("a 'A' (id 1)",), "withdrawn": ("b 'B' (id 2)",)}, refused=("too many",),
                  other_types=(LoadReport(inserted=1, resource_type="Organization"),
                               LoadReport(updated=1, resource_type="Endpoint", named={"updated": ("ep-1",)})))


@pytest.mark.parametrize("resource_type, own", [
    pytest.param("Location", {"inserted_units": ["a 'A' (id 1)"], "withdrawn_units": ["b 'B' (id 2)"],
                              "withdrawn": 2, "refused": ["too many"]}, id="main-type-its-own"),
    pytest.param("Organization", {}, id="other-type-none-of-the-main-types"),
    pytest.param("Endpoint", {"updated_units": ["ep-1"]}, id="other-type-its-own-only"),
])
def test_a_types_line_holds_only_its_own_resources(resource_type: str, own: dict[str, object]) -> None:
    """A second platform-team trial of issue 41: the Organization's line of a mapped load carried the Locations'
    `inserted_units` (keys only the main type's report has were kept from its fields)."""
    fields = dict(next(fields for _, fields in report_lines("f", "p", RICH, False, 0.5)
                       if fields["resource_type"] == resource_type))
    optional = {key: fields[key] for key in fields
                if (key.endswith("_units") and key not in ("deleted_units", "missing_units"))
                or key in ("withdrawn", "refused")}
    assert optional == own
    assert fields["notes"] == ["a note"] and fields["format"] == "f"  # the load's own fields on every line
