"""The proof package's contract samples: the services of tests/proof/services.json, then services-update.json,
over the small pyramid (tests/support/data.py): service -> locations
1 -> 30, 20; 2 -> 10, 20 (version 2, renamed); 3 -> 3; 4 -> 3, 30; 5 -> 1; 6 -> none; 7 -> 32 (deleted);
8 -> 3, then 30 (version 2: it moved from region 3 into district 10).
A caller sees a service when it sees one of its Locations, each kept version by the Locations it had: service 6 (at
no Location) only a caller seeing the whole account; version 1 of service 8 a token of region 3, version 2 one of
district 10."""
from __future__ import annotations

from server.contract import Samples, Scope, Search, Subject
from server.settings import Settings
from server.contract import load_files
from tests.support.proof import PLUGINS, SERVICES, SERVICES_UPDATE, SITE, WORKERS, WORKERS_UPDATE, load_services

HEALTHCARE_SERVICE = Samples(
    "HealthcareService",
    ids=frozenset({"1", "2", "3", "4", "5", "6", "8"}),
    searches=(
        Search("_id", "4", "4"),
        Search("_lastUpdated", "ge2000-01-01", "1"),
        Search("name", "telemedecine", "4"),
        Search("name:exact", "Vaccination et PEV Boromo", "2"),
        Search("active", "false", "3"),
        Search("service-category", "http://terminology.hl7.org/CodeSystem/service-category|14", "5"),
        Search("location", "Location/20", "2"),
        Search("location", "30", "4"),
        Search("organization", "Organization/1", "5"),
    ),
    bad_values=(("active", "maybe"), ("_lastUpdated", "yesterday"), ("location", "Organization/1")),
    versions={"2": ("2", "1"), "1": ("1",), "7": ("2", "1"), "8": ("2", "1")},
    deleted=frozenset({"7"}),
    # a service is seen by whoever sees one of its locations (each version by its own); one without a location only
    # by callers seeing the whole account
    scopes=(Scope(("Location/10",), frozenset({"1", "2", "4", "7", "8"}), versions={"8": ("2",)}),
            # service 8 left region 3: its version 2 is a deletion there (a departure)
            Scope(("Location/3",), frozenset({"3", "4"}), versions={"8": ("2", "1")}, departures={"8": ("2",)}),
            Scope(("Location/1",), frozenset({"1", "2", "3", "4", "5", "7", "8"}))),
)


# tests/proof/workers.json, then workers-update.json: role -> practitioner, locations
# 1 -> 1, 30; 2 -> 2, 11; 3 -> 3, 3 then 30 (version 2); 4 -> 2, 3 and 1 (inactive); 5 -> 1, 32 (deleted);
# 6 -> 5, 32 (deleted with practitioner 5).
# A caller sees a role when it sees one of its Locations (each version by its own), a practitioner when it sees one
# of its live roles (a deleted practitioner: one of its roles, live or deleted), or when it sees the whole account:
# practitioner 4 holds no role. A practitioner's versions are not scoped each: a caller narrowed to a subtree sees
# its current version alone.
PRACTITIONER_ROLE = Samples(
    "PractitionerRole",
    ids=frozenset({"1", "2", "3", "4"}),
    searches=(
        Search("_id", "2", "2"),
        Search("_lastUpdated", "ge2000-01-01", "1"),
        Search("practitioner", "Practitioner/2", "4"),
        Search("location", "Location/30", "3"),
        Search("location", "1", "4"),
        Search("location:below", "10", "1"),  # held in the district, at a unit below it
        Search("location:below", "Location/3", "4"),  # held at the unit itself
        Search("active", "false", "4"),
    ),
    bad_values=(("active", "maybe"), ("location", "Organization/1"), ("practitioner", "Location/1")),
    versions={"3": ("2", "1"), "5": ("2", "1"), "6": ("2", "1"), "1": ("1",)},
    deleted=frozenset({"5", "6"}),
    # each version by the Locations it was held at: role 3 moved from Location 3 to Location 30
    scopes=(Scope(("Location/10",), frozenset({"1", "3", "5", "6"}), versions={"3": ("2",)}),
            Scope(("Location/3",), frozenset({"4"}), versions={"3": ("2", "1")}, departures={"3": ("2",)}),
            Scope(("Location/1",), frozenset({"1", "2", "3", "4", "5", "6"}))),
)

PRACTITIONER = Samples(
    "Practitioner",
    ids=frozenset({"1", "2", "3", "4"}),
    searches=(Search("_id", "3", "3"), Search("name", "claire", "3"), Search("name", "Boukary", "2"),
              Search("_lastUpdated", "ge2000-01-01", "4")),
    versions={"5": ("2", "1"), "1": ("1",)},
    deleted=frozenset({"5"}),  # deleted with its one role: seen going by whoever saw that role
    scopes=(Scope(("Location/10",), frozenset({"1", "3", "5"}), versions={"5": ("2",)}),
            Scope(("Location/3",), frozenset({"2"})),
            Scope(("Location/2",), frozenset({"1", "2", "3", "5"}), versions={"5": ("2",)})),
)


def _load(settings: Settings) -> None:
    load_services(settings, SERVICES, SERVICES_UPDATE)
    load_files(settings, "workers-json", WORKERS, WORKERS_UPDATE)


SUBJECT = Subject("healthcare_services", PLUGINS, _load, (HEALTHCARE_SERVICE, PRACTITIONER_ROLE, PRACTITIONER),
                  site=SITE)
