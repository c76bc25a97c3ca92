"""`orgunit-fhir load services-json FILE` (each service a new version when it changed; services absent from the
file become deleted versions) and `orgunit-fhir services summary`."""
from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select, update

from legacy_services.tables import service, service_history, service_location
from server import (
    Command,
    LoadError,
    LoadFormat,
    LoadReport,
    Progress,
    Settings,
    add_common_options,
    normalize,
    reading_engine,
)

FIELDS = ("name", "active", "category", "organization_id", "location_ids")


def _record(entry: Any, line: int) -> dict[str, Any]:
    try:
        record = {"id": int(entry["id"]), "name": str(entry["name"]), "active": bool(entry.get("active", True)),
                  "category": entry.get("category"), "organization_id": entry.get("organization"),
                  "location_ids": sorted({int(i) for i in entry.get("locations", ())})}
    except (KeyError, TypeError, ValueError) as exc:
        raise LoadError(f"service #{line}: {exc!r} (needs id, name; locations a list of Location ids)") from exc
    return {**record, "name_norm": normalize(record["name"])}


def _write(conn: Connection, row: dict[str, Any], new: bool) -> None:
    conn.execute(insert(service) if new else update(service).where(service.c.id == row["id"]), row)
    conn.execute(delete(service_location).where(service_location.c.service_id == row["id"]))
    if row["location_ids"]:
        conn.execute(insert(service_location), [{"service_id": row["id"], "location_id": i} for i in row["location_ids"]])
    snapshot = None if row["deleted"] else {**row, "updated_at": row["updated_at"].isoformat()}
    conn.execute(insert(service_history), {"service_id": row["id"], "version_id": row["version_id"],
                                           "updated_at": row["updated_at"], "deleted": row["deleted"],
                                           "snapshot": snapshot})


def load_services(engine: Engine, path: str, args: argparse.Namespace, progress: Progress) -> LoadReport:
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))["services"]
        records = [_record(entry, n) for n, entry in enumerate(entries, 1)]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LoadError(f"{path}: not a services file ({exc})") from exc
    now, counts = datetime.now(UTC), {"inserted": 0, "updated": 0, "unchanged": 0, "deleted": 0}
    with engine.begin() as conn:
        current = {row["id"]: row for row in conn.execute(select(service)).mappings()}
        for n, record in enumerate(records, 1):
            old = current.pop(record["id"], None)
            if old is not None and not old["deleted"] and all(old[f] == record[f] for f in FIELDS):
                counts["unchanged"] += 1
                continue
            version = 1 if old is None else old["version_id"] + 1
            _write(conn, {**record, "version_id": version, "updated_at": now, "deleted": False}, old is None)
            counts["inserted" if old is None else "updated"] += 1
            progress(n)
        for old in current.values():  # absent from the file: a deleted version (its locations kept: its scope)
            if not old["deleted"]:
                _write(conn, {**old, "version_id": old["version_id"] + 1, "updated_at": now, "deleted": True}, False)
                counts["deleted"] += 1
    return LoadReport(**counts)


SERVICES_JSON = LoadFormat("services-json", 'a JSON file {"services": [{id, name, active, category, organization, '
                                            'locations: [Location ids]}]}', load_services)


def _configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_common_options(sub.add_parser("summary", help="services, active ones, deleted ones and location links"))


def _summary(args: argparse.Namespace, settings: Settings) -> int:
    with reading_engine(settings) as engine, engine.connect() as conn:
        live = conn.execute(select(service.c.active, func.count()).where(service.c.deleted.is_(False))
                            .group_by(service.c.active)).all()
        deleted = conn.execute(select(func.count()).where(service.c.deleted.is_(True))).scalar_one()
        links = conn.execute(select(func.count()).select_from(service_location)).scalar_one()
    active = sum(n for flag, n in live if flag)
    print(f"services: {sum(n for _, n in live)} ({active} active), {deleted} deleted, {links} location links")
    return 0


SERVICES = Command("services", "the healthcare services held (summary)", _configure, _summary)
