"""IHE mCSD health workers: FHIR R4 Practitioner and PractitionerRole, and `orgunit-fhir load workers-json FILE`.

A role is held at one or more Locations, which the file names by their facility codes: the loader finds each
through the engine's look-up (`call.lookup.identified_all("Location", codes)`), as a search of Location by identifier
would, with the org-unit plugin's own rules (the versions it serves, its identifier systems): it reads none of that
plugin's tables. A caller sees a role when it sees one of its Locations, each kept version by the Locations that
version was held at, and a practitioner when it sees one of the practitioner's live roles."""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Table, bindparam, delete, insert, select, update
from sqlalchemy.engine import RowMapping

from healthcare_services.tables import (
    practitioner,
    practitioner_history,
    role,
    role_history,
    role_history_location,
    role_location,
)
from server import (
    AmbiguousLookup,
    InvalidRequest,
    LoadCall,
    LoadError,
    LoadFormat,
    LoadReport,
    Operation,
    OperationCall,
    ReferenceTarget,
    ResourceProvider,
    SearchParam,
    StringTarget,
    Tenancy,
    Through,
    TokenTarget,
    Versioning,
    Via,
    instant,
    normalize,
)

HL7_SP = "http://hl7.org/fhir/SearchParameter/"
ROLE_FIELDS = ("practitioner_id", "active", "location_ids")


def practitioner_resource(row: RowMapping) -> dict[str, Any]:
    return {"resourceType": "Practitioner", "id": str(row["id"]),
            "meta": {"versionId": str(row["version_id"]), "lastUpdated": instant(row["updated_at"])},
            "name": [{"text": row["name"]}]}


def role_resource(row: RowMapping) -> dict[str, Any]:
    resource: dict[str, Any] = {
        "resourceType": "PractitionerRole", "id": str(row["id"]),
        "meta": {"versionId": str(row["version_id"]), "lastUpdated": instant(row["updated_at"])},
        "active": row["active"], "practitioner": {"reference": f"Practitioner/{row['practitioner_id']}"}}
    if row["location_ids"]:
        resource["location"] = [{"reference": f"Location/{i}"} for i in row["location_ids"]]
    return resource


def facilities(call: OperationCall) -> dict[str, Any]:
    """GET [base]/PractitionerRole/[id]/$facilities: the Locations where the role is held, as the caller sees them
    (found through the engine's look-up, as a search of Location would: a district's token gets its own only)."""
    if call.strict and call.parameters:
        raise InvalidRequest("$facilities takes no parameter")
    assert call.lookup is not None and call.id is not None
    role_ = call.lookup.one("PractitionerRole", {"_id": call.id})
    held = [ref["reference"].rsplit("/", 1)[-1] for ref in (role_ or {}).get("location", ())]
    found = call.lookup.search("Location", {"_id": ",".join(held)}) if held else []
    return {"resourceType": "Bundle", "type": "collection", **({"entry": [
        {"fullUrl": f"{call.base}/Location/{r['id']}", "resource": r} for r in found]} if found else {})}


FACILITIES = Operation("facilities", None, "GET [base]/PractitionerRole/[id]/$facilities: a collection Bundle of the "
                       "Locations where the role is held that the caller may see",
                       "https://healthcare-services.example.org/OperationDefinition/PractitionerRole-facilities",
                       handler=facilities)

HELD_AT = Through(role_location, role_location.c.role_id)
# each version's Locations, keyed by (role, version): what scopes that version
HELD_AT_VERSION = Through(role_history_location, role_history_location.c.role_id,
                          version=role_history_location.c.version_id)

PRACTITIONER = ResourceProvider(
    resource_type="Practitioner",
    table=practitioner,
    id_column=practitioner.c.id,
    columns=tuple(practitioner.c),
    to_resource=practitioner_resource,
    search_params=(SearchParam("name", "string", (StringTarget(practitioner.c.name_norm, practitioner.c.name),),
                               "Name starts with the value, ignoring case and accents", HL7_SP + "Practitioner-name"),),
    # FHIR's Practitioner refers to no Location: it is seen through its roles (a chain: role -> location); its
    # versions are not scoped each (no version records its roles): a caller narrowed to a district sees the current
    # version alone (the engine's rule for what it cannot prove)
    tenancy=Tenancy(via=Via("practitioner", "PractitionerRole", reverse=True)),
    versioning=Versioning(
        version=practitioner.c.version_id, last_updated=practitioner.c.updated_at, deleted=practitioner.c.deleted,
        history=practitioner_history, history_id=practitioner_history.c.practitioner_id,
        history_version=practitioner_history.c.version_id, history_updated=practitioner_history.c.updated_at,
        history_deleted=practitioner_history.c.deleted, history_snapshot=practitioner_history.c.snapshot),
    documentation="Health workers, seen by whoever sees one of their roles",
)

ROLE = ResourceProvider(
    resource_type="PractitionerRole",
    table=role,
    id_column=role.c.id,
    columns=tuple(role.c),
    to_resource=role_resource,
    search_params=(
        SearchParam("practitioner", "reference", (ReferenceTarget(role.c.practitioner_id, "Practitioner"),),
                    "The practitioner holding the role", HL7_SP + "PractitionerRole-practitioner"),
        SearchParam("location", "reference",
                    (ReferenceTarget(role_location.c.location_id, "Location", through=HELD_AT),),
                    "One of the Locations where the role is held; :below a Location: held there or below it",
                    HL7_SP + "PractitionerRole-location"),
        SearchParam("active", "token", (TokenTarget(role.c.active, codes={"true": (True,), "false": (False,)}),),
                    "true or false", HL7_SP + "PractitionerRole-active"),
    ),
    operations=(FACILITIES,),
    references={"practitioner": "Practitioner"},
    tenancy=Tenancy(via=Via("location", "Location",
                            versions=ReferenceTarget(role_history_location.c.location_id, "Location",
                                                     through=HELD_AT_VERSION))),
    versioning=Versioning(
        version=role.c.version_id, last_updated=role.c.updated_at, deleted=role.c.deleted,
        history=role_history, history_id=role_history.c.role_id, history_version=role_history.c.version_id,
        history_updated=role_history.c.updated_at, history_deleted=role_history.c.deleted,
        history_snapshot=role_history.c.snapshot),
    documentation="The roles of health workers at facilities",
)


Resolve = Callable[[LoadCall, list[str]], Mapping[str, str | None]]  # facility codes -> Location ids


def locations_of(call: LoadCall, codes: list[str]) -> dict[str, str | None]:
    """The id of the Location whose identifier is each facility code of the file, as the Location provider serves
    it: one batch of look-ups for every code (`identified_all`: a few statements, not one per code)."""
    try:
        return call.lookup.identified_all("Location", codes)
    except AmbiguousLookup as exc:
        raise LoadError(f"facility codes naming several Locations: {exc.diagnostics}") from exc


def _roles(call: LoadCall, entries: list[Any], resolve: Resolve) -> list[dict[str, Any]]:
    codes = {str(code) for entry in entries if isinstance(entry, dict)
             and isinstance(entry.get("facilities"), list) for code in entry["facilities"]}
    found = resolve(call, sorted(codes))
    roles = []
    for n, entry in enumerate(entries, 1):
        try:
            rid, holder, codes = int(entry["id"]), int(entry["practitioner"]), list(entry["facilities"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LoadError(f"role #{n}: {exc!r} (needs id, practitioner and facilities, a list of codes)") from exc
        missing = [code for code in codes if found.get(str(code)) is None]
        if missing:
            raise LoadError(f"role #{n}: facility code {missing[0]!r} names no Location this server serves")
        roles.append({"id": rid, "practitioner_id": holder, "active": bool(entry.get("active", True)),
                      "location_ids": sorted({int(str(found[str(code)])) for code in codes})})
    return roles


BATCH = 1000  # ids in one `IN` (under every database's bind limit)


def _write_versions(conn: Connection, table: Table, history: Table, history_key: str,
                    rows: list[tuple[dict[str, Any], bool]], locations: tuple[Table, Table] | None = None) -> None:
    """The new versions `rows` (each: the row, whether it is new) of `table` in a few statements whatever their
    number (the new rows inserted, the others updated, a history row each; a role's Locations replaced, each
    version's kept): a statement per row was 20,000 round trips for 3,000 roles, most of a PostgreSQL load."""
    if not rows:
        return
    fresh = [row for row, new in rows if new]
    changed = [row for row, new in rows if not new]
    if fresh:
        conn.execute(insert(table), fresh)
    if changed:  # the columns every row gives (a row read back gives them all; a record of the file, its own)
        given = [c.key for c in table.c if c.key != "id" and all(c.key in row for row in changed)]
        conn.execute(update(table).where(table.c.id == bindparam("b_id"))
                     .values({k: bindparam(f"b_{k}") for k in given}),
                     [{f"b_{k}": row[k] for k in ("id", *given)} for row in changed])
    conn.execute(insert(history), [{history_key: row["id"], "version_id": row["version_id"],
                                    "updated_at": row["updated_at"], "deleted": row["deleted"],
                                    "snapshot": None if row["deleted"] else
                                    {**row, "updated_at": row["updated_at"].isoformat()}} for row, _ in rows])
    if locations is None:
        return
    current, per_version = locations
    ids = [row["id"] for row in changed]
    for start in range(0, len(ids), BATCH):
        conn.execute(delete(current).where(current.c.role_id.in_(ids[start:start + BATCH])))
    held = [row for row, _ in rows if row["location_ids"]]
    if held:  # a deletion keeps the Locations of the version it deletes: who saw it sees it go
        conn.execute(insert(current), [{"role_id": row["id"], "location_id": i}
                                       for row in held for i in row["location_ids"]])
        conn.execute(insert(per_version), [{"role_id": row["id"], "version_id": row["version_id"], "location_id": i}
                                           for row in held for i in row["location_ids"]])


def _write_people(conn: Connection, people: list[dict[str, Any]], now: datetime) -> None:
    """Each practitioner a new version when its name changed; one absent from the file a deleted version."""
    current = {row["id"]: row for row in conn.execute(select(practitioner)).mappings()}
    written: list[tuple[dict[str, Any], bool]] = []
    for person in people:
        old = current.pop(person["id"], None)
        if old is not None and not old["deleted"] and old["name"] == person["name"]:
            continue
        version = 1 if old is None else old["version_id"] + 1
        written.append(({**person, "version_id": version, "updated_at": now, "deleted": False}, old is None))
    written += [({**old, "version_id": old["version_id"] + 1, "updated_at": now, "deleted": True}, False)
                for old in current.values() if not old["deleted"]]
    _write_versions(conn, practitioner, practitioner_history, "practitioner_id", written)


def load_workers(call: LoadCall) -> LoadReport:
    return load_resolving(call, locations_of)


def load_resolving(call: LoadCall, resolve: Resolve) -> LoadReport:
    """`load workers-json`, its facility codes resolved by `resolve` (the look-up: `locations_of`; bench/lookups.py
    times it against the SQL on the org-unit plugin's tables it replaced)."""
    try:
        data = json.loads(Path(call.path).read_text(encoding="utf-8"))
        people = [{"id": int(p["id"]), "name": str(p["name"]), "name_norm": normalize(str(p["name"]))}
                  for p in data["practitioners"]]
        entries = list(data["roles"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LoadError(f"{call.path}: not a workers file ({exc})") from exc
    roles = _roles(call, entries, resolve)  # every facility code resolved before anything is written
    now, counts = datetime.now(UTC), {"inserted": 0, "updated": 0, "unchanged": 0, "deleted": 0}
    written: list[tuple[dict[str, Any], bool]] = []
    with call.engine.begin() as conn:
        _write_people(conn, people, now)
        current = {row["id"]: row for row in conn.execute(select(role)).mappings()}
        for n, record in enumerate(roles, 1):
            old = current.pop(record["id"], None)
            if old is not None and not old["deleted"] and all(old[f] == record[f] for f in ROLE_FIELDS):
                counts["unchanged"] += 1
                continue
            version = 1 if old is None else old["version_id"] + 1
            written.append(({**record, "version_id": version, "updated_at": now, "deleted": False}, old is None))
            counts["inserted" if old is None else "updated"] += 1
            call.progress(n)
        for old in current.values():  # absent from the file: a deleted version
            if not old["deleted"]:
                written.append(({**old, "version_id": old["version_id"] + 1, "updated_at": now, "deleted": True},
                                False))
                counts["deleted"] += 1
        _write_versions(conn, role, role_history, "role_id", written, (role_location, role_history_location))
    return LoadReport(**counts)


WORKERS_JSON = LoadFormat("workers-json", 'a JSON file {"practitioners": [{id, name}], "roles": [{id, practitioner, '
                                          'active, facilities: [facility codes]}]}', load_workers)
