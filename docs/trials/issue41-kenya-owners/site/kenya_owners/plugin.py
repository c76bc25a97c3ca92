"""Entry point `kenya_owners`: the OrganizationAffiliation provider, `orgunit-fhir kenya-owners FILE > owners.json`
(the owners as a `load organizations` file) and `orgunit-fhir load kenya-affiliations FILE` (each facility linked
to its owner)."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert

from kenya_owners.tables import MIGRATIONS, affiliation
from server import (AmbiguousLookup, Command, LoadCall, LoadError, LoadFormat, LoadReport, Migrations,
                    ReferenceTarget, ResourceProvider, SearchParam, Settings, StringTarget, Tenancy, TokenTarget, Via,
                    hookimpl)

OWNER_SYSTEM = "https://mfl.health.go.ke/owner"
SP = "http://hl7.org/fhir/SearchParameter/OrganizationAffiliation-"


def _facilities(path: str) -> list[dict[str, Any]]:
    try:
        return [r for block in json.loads(Path(path).read_text(encoding="utf-8")) for r in block["records"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LoadError(f"{path}: not an MFL facilities file ({exc!r})") from exc


def owner_code(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _owners(args: argparse.Namespace, settings: Settings) -> int:
    names = sorted({f["owner"]["name"] for f in _facilities(args.path)})
    json.dump({"organizations": [{"code": owner_code(n), "name": n} for n in names]}, sys.stdout, indent=1)
    return 0


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the MFL's 0011_facilities.json")


def load_affiliations(call: LoadCall) -> LoadReport:
    facilities = _facilities(call.path)
    try:
        owners = call.lookup.identified_all("Organization", sorted({owner_code(f["owner"]["name"]) for f in facilities}),
                                            system=OWNER_SYSTEM)
        places = call.lookup.identified_all("Location", sorted({str(f["code"]) for f in facilities}))
    except AmbiguousLookup as exc:
        raise LoadError(f"an owner or facility code names several resources: {exc.diagnostics}") from exc
    rows = []
    for f in facilities:
        owner, place = owners[owner_code(f["owner"]["name"])], places[str(f["code"])]
        if owner is None:
            raise LoadError(f"facility {f['code']}: owner {f['owner']['name']!r} is no Organization: load the owners "
                            f"first (orgunit-fhir kenya-owners FILE > owners.json; load organizations owners.json)")
        if place is None:
            raise LoadError(f"facility {f['code']} is no Location this server serves")
        rows.append({"id": str(f["code"]), "organization_id": int(owner), "location_id": int(place),
                     "owner": f["owner"]["name"]})
    with call.engine.begin() as conn:
        conn.execute(delete(affiliation))
        conn.execute(insert(affiliation), rows)
    return LoadReport(inserted=len(rows), resource_type="OrganizationAffiliation")


def to_resource(row: Any) -> dict[str, Any]:
    return {"resourceType": "OrganizationAffiliation", "id": row["id"], "active": True,
            "organization": {"reference": f"Organization/{row['organization_id']}", "display": row["owner"]},
            "location": [{"reference": f"Location/{row['location_id']}"}],
            "code": [{"coding": [{"system": "http://hl7.org/fhir/organization-role", "code": "provider",
                                  "display": "Provider"}], "text": "owner"}]}


@hookimpl
def register_resource_providers(settings: Settings) -> list[ResourceProvider]:
    a = affiliation
    return [ResourceProvider(
        resource_type="OrganizationAffiliation", table=a, id_column=a.c.id, columns=tuple(a.c),
        to_resource=to_resource,
        references={"organization": "Organization", "location": "Location"},
        tenancy=Tenancy(via=Via("location", "Location")),
        search_params=(
            SearchParam("primary-organization", "reference", (ReferenceTarget(a.c.organization_id, "Organization"),),
                        "The owner", SP + "primary-organization"),
            SearchParam("location", "reference", (ReferenceTarget(a.c.location_id, "Location"),),
                        "The facility", SP + "location"),
            SearchParam("identifier", "token", (TokenTarget(a.c.id, "https://mfl.health.go.ke/facility-code"),),
                        "The facility's MFL code", SP + "identifier"),
        ),
        documentation="The owner of each facility of the Kenya MFL")]


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]


@hookimpl
def register_load_formats(settings: Settings) -> list[LoadFormat]:
    return [LoadFormat("kenya-affiliations", "the MFL's 0011_facilities.json: each facility linked to its owner",
                       load_affiliations)]


@hookimpl
def register_commands(settings: Settings) -> list[Command]:
    return [Command("kenya-owners", "print the MFL's facility owners as a `load organizations` file", _configure,
                    _owners)]
