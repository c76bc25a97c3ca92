"""A two-account universe for access-control tests, and two small providers scoped through a reference to
Location (a plugin of the tests, declared with `from server import ...` only).

Account `alpha` holds the small pyramid (ids 1-32, data source "Ministère de la Santé"); account `beta` holds
"DHIS2" with version 1 (ids 101-103) and version 2 (ids 201-203, served: the newest), and unit 204 of version 2,
deleted. `Device` refers to one Location (a column of its own rows) and has no partition of its own: the
Location decides alone. `Schedule` refers to several Locations (a side table) and belongs to an account too."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Engine, ForeignKey, Integer, MetaData, String, Table, literal, select

from plugins.orgunits.admin import rename_account
from plugins.orgunits.history import delete_missing
from plugins.orgunits.records import TypeRecord, UnitRecord
from plugins.orgunits.tables import DEFAULT_ACCOUNT
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units
from server import ReferenceTarget, ResourceProvider, SearchParam, Settings, Tenancy, Through, Via, hookimpl
from server.engine.context import ServerContext, create_context
from server.storage.prerender import refresh
from tests.support.contexts import SECRET, make_settings
from tests.support.data import NOW, UNITS, load_small_pyramid

ALPHA = frozenset(u.id for u in UNITS)
BETA_V1 = frozenset({101, 102, 103})
BETA_V2 = frozenset({201, 202, 203})
DELETED = 204
NS = "https://orgunit-fhir.example.org"
IDENTIFIER_3 = f"{NS}/fhir/sid/ministere-de-la-sante|HB0000000003"  # the source reference of Location 3


def _beta_units(offset: int) -> tuple[UnitRecord, ...]:
    return (UnitRecord(offset + 1, "Sierra Leone", "COUNTRY", "VALID", source_ref=f"SL{offset}"),
            UnitRecord(offset + 2, "Bo", "SL-2", "VALID", source_ref=f"BO{offset}", parent_id=offset + 1),
            UnitRecord(offset + 3, "Bo Clinic", "SL-3", "VALID", source_ref=f"BC{offset}", parent_id=offset + 2,
                       latitude=7.96, longitude=-11.74))


def load_alpha(engine: Engine) -> None:
    """The small pyramid (loaded before) belongs to account alpha (`accounts rename default alpha`: tokens without an
    account claim keep seeing it)."""
    with engine.begin() as conn:
        rename_account(conn, DEFAULT_ACCOUNT, "alpha")


def load_beta(engine: Engine) -> None:
    with engine.begin() as conn:
        ds = ensure_data_source(conn, "DHIS2", now=NOW, account="beta")
        ensure_types(conn, (TypeRecord("Pays", "COUNTRY", "COUNTRY", 1), TypeRecord("District", "SL-2", "DISTRICT", 2),
                            TypeRecord("Clinic", "SL-3", "HF", 3)), account="beta")
        write_units(conn, _beta_units(100), ensure_source_version(conn, ds, 1, now=NOW), NOW)
        v2 = ensure_source_version(conn, ds, 2, now=NOW)
        write_units(conn, (*_beta_units(200), UnitRecord(DELETED, "Gone", "SL-3", "VALID", parent_id=202)), v2, NOW)
        delete_missing(conn, data_source_id=ds, seen_ids=BETA_V1 | BETA_V2, now=NOW + timedelta(days=1))


# ------------------------------------------------------------------ providers scoped through a reference

metadata = MetaData()
device = Table("scoping_device", metadata, Column("id", Integer, primary_key=True, autoincrement=False),
               Column("name", String, nullable=False), Column("location_id", Integer))
schedule = Table("scoping_schedule", metadata, Column("id", Integer, primary_key=True, autoincrement=False),
                 Column("account", String, nullable=False))
schedule_location = Table("scoping_schedule_location", metadata,
                          Column("schedule_id", Integer, ForeignKey("scoping_schedule.id"), primary_key=True),
                          Column("location_id", Integer, primary_key=True))

DEVICES = {  # id -> the Location it is at
    1: 30,  # alpha, in the subtree of 10
    2: 3,  # alpha, outside it
    3: 201,  # beta, served version
    4: 101,  # beta, a version not served
    5: None,  # nowhere
    6: 999_999,  # an unknown Location
}
SCHEDULES = {  # id -> (its account, the Locations it names)
    1: ("alpha", (30, 3)),
    2: ("alpha", (3,)),
    3: ("beta", (201, 30)),  # names a Location of alpha too: its own account still decides
    4: ("alpha", ()),
}


def _device(row: Any) -> dict[str, Any]:
    resource = {"resourceType": "Device", "id": str(row["id"]), "deviceName": [{"name": row["name"], "type": "other"}]}
    if row["location_id"] is not None:
        resource["location"] = {"reference": f"Location/{row['location_id']}"}
    return resource


def _schedule(row: Any) -> dict[str, Any]:
    return {"resourceType": "Schedule", "id": str(row["id"])}


class ScopedThroughLocation:
    """The plugin: Device (single-valued reference, no partition) and Schedule (multi-valued, own account)."""

    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        at = SearchParam("location", "reference", (ReferenceTarget(device.c.location_id, "Location"),),
                         "Where the device is")
        actors = Through(schedule_location, schedule_location.c.schedule_id)
        actor = SearchParam("actor", "reference",
                            (ReferenceTarget(schedule_location.c.location_id, "Location", through=actors),),
                            "The Locations of the schedule")
        accounts = select(schedule.c.account, schedule.c.account, literal(True)).distinct()
        return [
            ResourceProvider("Device", device, device.c.id, tuple(device.c), _device, search_params=(at,),
                             tenancy=Tenancy(via=Via("location", "Location"))),
            ResourceProvider("Schedule", schedule, schedule.c.id, tuple(schedule.c), _schedule, search_params=(actor,),
                             tenancy=Tenancy(schedule.c.account, accounts, via=Via("actor", "Location"))),
        ]


def load_scoped(engine: Engine) -> None:
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(device.insert(), [{"id": i, "name": f"Device {i}", "location_id": loc}
                                       for i, loc in DEVICES.items()])
        conn.execute(schedule.insert(), [{"id": i, "account": acct} for i, (acct, _) in SCHEDULES.items()])
        links = [{"schedule_id": i, "location_id": loc} for i, (_, locs) in SCHEDULES.items() for loc in locs]
        conn.execute(schedule_location.insert(), links)


def universe_context(url: str, var: Path, plugins: Sequence[tuple[str, object]] = (),
                     loads: Sequence[Callable[[Engine], None]] = ()) -> ServerContext:
    """alpha and beta, with Device and Schedule (then the test's own `plugins`, their data written by `loads`),
    bodies pre-rendered."""
    ctx = create_context(make_settings(url, var, auth={"secret": SECRET}),
                         [("scoped", ScopedThroughLocation()), *plugins])
    ctx.extensions.schema.upgrade(ctx.db)
    for load in (load_small_pyramid, load_alpha, load_beta, load_scoped, *loads):
        load(ctx.db)
    refresh(ctx.db, ctx.registry)
    return ctx
