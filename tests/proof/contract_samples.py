"""The proof package's contract samples: the services of tests/proof/services.json, then services-update.json,
over the small pyramid (tests/support/data.py): service -> locations
1 -> 30, 20; 2 -> 10, 20 (version 2, renamed); 3 -> 3; 4 -> 3, 30; 5 -> 1; 6 -> none; 7 -> 32 (deleted).
A caller sees a service when it sees one of its Locations: service 6 no token sees."""
from __future__ import annotations

from server.settings import Settings
from tests.support.contract import Samples, Scope, Search, Subject
from tests.support.proof import PLUGINS, SERVICES, SERVICES_UPDATE, SITE, load_services

HEALTHCARE_SERVICE = Samples(
    "HealthcareService",
    ids=frozenset({"1", "2", "3", "4", "5"}),
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
    versions={"2": ("2", "1"), "1": ("1",), "7": ("2", "1")},
    deleted=frozenset({"7"}),
    hidden=frozenset({"6"}),  # at no Location: no caller's scope holds it
    # a service is seen by whoever sees one of its locations; one without a location only by full-scope callers
    scopes=(Scope(("Location/10",), frozenset({"1", "2", "4", "7"})),
            Scope(("Location/3",), frozenset({"3", "4"})),
            Scope(("Location/1",), frozenset({"1", "2", "3", "4", "5", "7"}))),
)


def _load(settings: Settings) -> None:
    load_services(settings, SERVICES, SERVICES_UPDATE)


SUBJECT = Subject("healthcare_services", PLUGINS, _load, (HEALTHCARE_SERVICE,), site=SITE)
