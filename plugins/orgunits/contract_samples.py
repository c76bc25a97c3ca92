"""The org-unit plugins' contract samples, over the small pyramid (plugins.orgunits.samples): Location, Organization
and the canonical resources. Installed with the distribution: a provider package scoped through Locations runs the
contract suite with this subject first (`--fhir-contract=plugins.orgunits.contract_samples:SUBJECT,...`), its own
sample data then referring to these Locations by id."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from plugins.orgunits.canonical import EXTENSIONS
from server import Settings, writing_engine
from server.contract import Samples, Scope, Search, Subject, load_files  # the suite's declarations
from plugins.orgunits.samples import UNITS, load_small_pyramid

NS = "https://orgunit-fhir.example.org/fhir"
SOURCE = "ministere-de-la-sante"  # the slug of the sample data source (Organization/1, account "default")

LOCATION = Samples(
    "Location",
    ids=frozenset(str(u.id) for u in UNITS),
    searches=(
        Search("_id", "10", "10"),
        Search("_lastUpdated", "ge2000-01-01", "1"),
        Search("name", "aire de seg", "20"),
        Search("name", "segou nord", "20"),  # an alias
        Search("status", "active", "1"),
        Search("identifier", "zmSNCYjqQGj", "1"),
        Search("type", "COUNTRY", "1"),
        Search("partof", "Location/1", "2"),
        Search("partof:below", "10", "30"),
        Search("organization", "Organization/1", "1"),
        Search("near", "11.716788|-3.339844|1|km", "30"),
        Search("operational-status", "C", "31"),  # closed in 2020 (32 closes in 2999)
        Search("operational-status:missing", "true", "1"),  # not closed
    ),
    bad_values=(("status", "closed"), ("near", "north"), ("_lastUpdated", "yesterday"), ("partof", "Patient/1")),
    versions={"1": ("1",), "30": ("1",)},
    scopes=(Scope(("Location/10",), frozenset({"10", "20", "30", "31", "32"})),
            Scope(("Location/3",), frozenset({"3"}))),
)

# the data source 1, and two Organizations of its directory (`load organizations`): a network and its member
DIRECTORY = [{"code": "CHAK", "name": "Christian Health Association",
              "type": {"system": "http://terminology.hl7.org/CodeSystem/organization-type", "code": "cg"}},
             {"code": "CHAK-N", "name": "CHAK North", "partof": "CHAK"}]
ORGANIZATION = Samples(
    "Organization",
    ids=frozenset({"1", "1000000000", "1000000001"}),
    searches=(
        Search("_id", "1", "1"),
        Search("identifier", f"{NS}/sid/organization|CHAK", "1000000000"),
        Search("partof", "Organization/1000000000", "1000000001"),
        Search("type", "cg", "1000000000"),
        Search("_lastUpdated", "ge2000-01-01", "1"),
        Search("name", "minist", "1"),
        Search("identifier", f"{NS}/sid/data-source|ministere-de-la-sante", "1"),
        Search("active", "true", "1"),
        Search("type", "http://terminology.hl7.org/CodeSystem/organization-type|govt", "1"),
        Search("partof:missing", "true", "1"),  # a data source is part of no other Organization
    ),
    bad_values=(("active", "maybe"), ("_lastUpdated", "yesterday"), ("partof", "Location/1")),
    versions={"1": ("1",)},
    # an account-wide provider cannot apply a subtree restriction: a subtree-limited token sees none of it
    scopes=(Scope(("Location/10",), frozenset()),),
)


def _canonical(resource_type: str, ids: list[str]) -> Samples:
    return Samples(resource_type, frozenset(ids), (Search("_id", ids[0], ids[0]),
                                                   Search("url", f"{NS}/{resource_type}/{ids[0]}", ids[0])),
                   tenanted=False)


CANONICAL = (_canonical("OperationDefinition",  # export: Bulk Data's
                        ["Location-children", "Location-counts", "Location-csv", "Location-geojson", "export"]),
             _canonical("StructureDefinition", sorted(EXTENSIONS)),
             _canonical("CodeSystem", ["org-unit-type"]))


def _load(settings: Settings) -> None:
    with writing_engine(settings) as engine:
        load_small_pyramid(engine)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "directory.json"
        path.write_text(json.dumps({"organizations": DIRECTORY}), encoding="utf-8")
        load_files(settings, "organizations", path, data_source=SOURCE)  # the other options: the CLI's defaults


PLUGINS = {"orgunits": {"enabled": True}, "location": {"enabled": True}, "organization": {"enabled": True},
           "canonical": {"enabled": True}}
SUBJECT = Subject("orgunits", PLUGINS, _load, (LOCATION, ORGANIZATION, *CANONICAL))
