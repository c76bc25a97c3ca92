"""The `orgunit-fhir load` formats are the importer modules' own declarations (each module's FORMAT): the list is
collected from them, each decides nothing special by name, and the data source of a load is decided in one place
(`ImportFormat.data_source`)."""
from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
from pathlib import Path
from typing import Any

import pytest

from plugins.orgunits import commands
from plugins.orgunits.importers import formats
from plugins.orgunits.importers.declaration import ImportFormat
from plugins.orgunits.importers.formats import DECLARED, FORMATS
from plugins.orgunits.plugin import register_load_formats
from server import LoadError
from tests.support.contexts import IASO_CSV

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
IMPORTERS = Path(formats.__file__).parent
LAKELAND_MAPPING = Path(__file__).resolve().parents[1] / "fixtures" / "mapped" / "lakeland_facilities.mapping.yaml"


def _declarations() -> dict[str, list[tuple[str, ImportFormat]]]:
    """Every ImportFormat found at the top level of a module of plugins.orgunits.importers, by module."""
    found: dict[str, list[tuple[str, ImportFormat]]] = {}
    for info in pkgutil.iter_modules([str(IMPORTERS)]):
        module = importlib.import_module(f"plugins.orgunits.importers.{info.name}")
        declared = [(name, value) for name, value in vars(module).items()
                    if isinstance(value, ImportFormat) and value.loader.__module__ == module.__name__]
        if declared:
            found[module.__name__] = declared
    return found


def test_each_importer_module_declares_exactly_one_format_named_FORMAT() -> None:
    found = _declarations()
    assert sorted(found) == [f"plugins.orgunits.importers.{name}"
                             for name in ("dhis2", "fhir_bundle", "iaso_csv", "iaso_gpkg", "mapped")]
    for module, declared in found.items():
        assert [name for name, _ in declared] == ["FORMAT"], module


def test_the_format_list_is_collected_from_the_declarations() -> None:
    declared = {value for module in _declarations().values() for _, value in module}
    assert set(DECLARED) == declared and len(DECLARED) == len(declared)
    # and the directory's format (Organizations that are not data sources: plugins.orgunits.directory), no importer
    # of units
    assert [f.name for f in register_load_formats(None)] == [  # type: ignore[arg-type]
        *(d.name for d in DECLARED), "organizations"]
    assert [(f.name, f.help, f.dry_run) for f in commands.LOAD_FORMATS] == [(d.name, d.help, True) for d in DECLARED]
    assert sorted(FORMATS) == sorted(d.name for d in DECLARED if not d.own_options)


@pytest.mark.parametrize("name, options", [
    pytest.param("iaso-csv", [], id="iaso-csv"),
    pytest.param("mapped", ["mapping"], id="mapped"),
])
def test_a_format_adds_its_own_options_before_the_common_ones(name: str, options: list[str]) -> None:
    parser = argparse.ArgumentParser()
    next(f for f in commands.LOAD_FORMATS if f.name == name).configure(parser)
    assert [a.dest for a in parser._actions if a.dest != "help"] == \
        [*options, "data_source", "version", "delete_missing", "account", "allow_reparent", "allow_mass_delete",
         "allow_reclassify", "allow_identifier_change", "allow_duplicate_source"]


def test_no_format_is_special_cased_by_name() -> None:
    """No comparison of a value with a format's name anywhere in the plugins (`fmt == "mapped"`)."""
    names = {d.name for d in DECLARED}
    found = []
    for path in sorted(PLUGINS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(isinstance(side, ast.Constant) and side.value in names
                                                     for side in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(PLUGINS)}:{node.lineno}")
    assert not found


@pytest.mark.parametrize("name, given, own, expected", [
    pytest.param("iaso-csv", None, {}, "Iaso", id="iaso-csv-default"),
    pytest.param("iaso-gpkg", None, {}, "Iaso", id="iaso-gpkg-default"),
    pytest.param("dhis2", None, {}, "DHIS2", id="dhis2-default"),
    pytest.param("fhir-bundle", None, {}, "FHIR", id="fhir-bundle-default"),
    pytest.param("mapped", None, {"mapping": LAKELAND_MAPPING}, "Lakeland MFL", id="mapped-the-mappings"),
    pytest.param("dhis2", "Partner", {}, "Partner", id="named"),
    pytest.param("mapped", "Partner", {"mapping": Path("/nowhere.yaml")}, "Partner", id="named-mapping-unread"),
    pytest.param("fhir-bundle", "", {}, "FHIR", id="empty-is-the-default"),
])
def test_the_data_source_of_a_load(name: str, given: str | None, own: dict[str, Any], expected: str) -> None:
    assert next(d for d in DECLARED if d.name == name).data_source(given, **own) == expected


def test_the_default_data_source_is_decided_in_one_place() -> None:
    """The importers ask their declaration (FORMAT.data_source); none writes `data_source or ...` itself."""
    found = []
    for path in sorted((PLUGINS / "orgunits").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and any(
                    isinstance(value, ast.Name | ast.Attribute) and "data_source" in ast.unparse(value)
                    for value in node.values[:1]):
                found.append(f"{path.relative_to(PLUGINS)}:{node.lineno} {ast.unparse(node)}")
    assert not found


def test_load_file_names_the_format_it_does_not_know(engine: Any) -> None:
    with pytest.raises(LoadError, match="unknown format 'mapped'; known formats: iaso-csv, iaso-gpkg, dhis2"):
        formats.load_file(engine, "mapped", IASO_CSV)
