"""`orgunit-fhir load organizations FILE --data-source NAME`: Organizations that are not data sources (a facility's
owner, a network, a partner) into a data source's directory, which the Organization provider serves beside the data
sources (organization.py), seen by that data source's account.

The file: `{"organizations": [{"code", "name", "type": {"system", "code", "display"}, "partof": code}]}`; `code`
is the Organization's identifier (of `--system`), `partof` the code of another Organization of the file. Each one
changed is a new version; one the directory holds and the file leaves out stays as it was (counted missing), or with
`--delete-missing` becomes a deleted version, as the unit loads do: several files (packages) may feed one data
source's directory. Ids are given from organization.DIRECTORY_IDS up and kept by code."""
from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datetime import datetime

from sqlalchemy import Connection, delete, func, insert, select, update

from plugins.orgunits.organization import DIRECTORY_IDS
from plugins.orgunits.tables import (
    data_source,
    directory_organization,
    directory_organization_history,
    orgunit_setting,
)
from plugins.orgunits.writer import stamp, transaction

from server import LoadCall, LoadError, LoadFormat, LoadReport, normalize

SAMPLE = 5  # left-out Organizations named in the report
FIELDS = ("name", "identifier_system", "type_system", "type_code", "type_display", "part_of")
ERASED = "directory_organization_erased"  # orgunit_setting: the highest id a purge erased (never given again)


@dataclass(frozen=True)
class Entry:
    code: str
    name: str
    type: Mapping[str, str] | None
    partof: str | None


def _entries(path: str) -> list[Entry]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))["organizations"]
        assert isinstance(raw, list)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise LoadError(f"{path}: not an organizations file ({exc!r}: a JSON object with a list `organizations`)")
    entries: list[Entry] = []
    for n, item in enumerate(raw, 1):
        where = f"organization #{n}"
        if not isinstance(item, dict):
            raise LoadError(f"{where}: not an object")
        code, name = item.get("code"), item.get("name")
        if not isinstance(code, str) or not code.strip() or not isinstance(name, str) or not name.strip():
            raise LoadError(f"{where}: needs a code and a name (non-empty text), got {code!r}, {name!r}")
        kind, partof = item.get("type"), item.get("partof")
        if kind is not None and not (isinstance(kind, dict) and {"system", "code"} <= set(kind)
                                     and set(kind) <= {"system", "code", "display"}
                                     and all(isinstance(v, str) and v for v in kind.values())):
            raise LoadError(f"{where} ({code!r}): type must be a Coding {{system, code, display}}")
        if partof is not None and (not isinstance(partof, str) or not partof.strip()):
            raise LoadError(f"{where} ({code!r}): partof must be the code of another organization of the file")
        entries.append(Entry(code.strip(), " ".join(name.split()), kind, partof))
    seen: dict[str, int] = {}
    for n, entry in enumerate(entries, 1):
        if entry.code in seen:
            raise LoadError(f"organization #{n}: code {entry.code!r} is also organization #{seen[entry.code]}'s")
        seen[entry.code] = n
    for entry in entries:
        if entry.partof is not None and entry.partof not in seen:
            raise LoadError(f"organization {entry.code!r}: partof {entry.partof!r} names no organization of the file")
    parents = {e.code: e.partof for e in entries}
    for entry in entries:  # no cycle: walking up ends
        walked, at = {entry.code}, entry.partof
        while at is not None:
            if at in walked:
                raise LoadError(f"organization {entry.code!r}: its partof chain comes back to {at!r} (a cycle)")
            walked.add(at)
            at = parents[at]
    return entries


def _data_source(conn: Connection, name: str, account: str) -> int:
    found = conn.execute(select(data_source.c.id).where(
        data_source.c.account == account, data_source.c.removed_at.is_(None),
        (data_source.c.name == name) | (data_source.c.slug == name))).scalar()
    if found is None:
        raise LoadError(f"--data-source {name!r}: no data source of account {account!r} has that name or slug "
                        "(`orgunit-fhir data-sources list`)")
    return int(found)


def _write(conn: Connection, row: dict[str, Any], new: bool) -> None:
    d = directory_organization
    conn.execute(insert(d) if new else update(d).where(d.c.id == row["id"]), row)
    snapshot = None if row["deleted"] else {**{k: row[k] for k in ("id", "code", *FIELDS)}, "kind": "directory",
                                            "version_id": row["version_id"], "updated_at": row["updated_at"].isoformat()}
    conn.execute(insert(directory_organization_history), {
        "organization_id": row["id"], "version_id": row["version_id"], "updated_at": row["updated_at"],
        "deleted": row["deleted"], "data_source_id": row["data_source_id"], "snapshot": snapshot})


def load_organizations(call: LoadCall) -> LoadReport:
    args = call.args
    entries = _entries(call.path)
    system = args.system or f"{call.settings.fhir.extension_namespace}/fhir/sid/organization"
    delete_missing = bool(getattr(args, "delete_missing", False))
    counts = {"inserted": 0, "updated": 0, "unchanged": 0, "deleted": 0, "missing": 0}
    left_out: list[dict[str, Any]] = []
    d = directory_organization
    with transaction(call.engine, dry_run=bool(getattr(args, "dry_run", False))) as conn:
        source = _data_source(conn, args.data_source, args.account)
        now = stamp(conn)
        current = {row["code"]: dict(row) for row in conn.execute(select(d).where(d.c.data_source_id == source))
                   .mappings()}
        erased = conn.execute(select(orgunit_setting.c.value).where(orgunit_setting.c.name == ERASED)).scalar()
        following = max(DIRECTORY_IDS - 1, conn.execute(select(func.max(d.c.id))).scalar() or 0,
                        int(erased or 0)) + 1
        ids: dict[str, int] = {}
        for entry in entries:
            if entry.code in current:
                ids[entry.code] = current[entry.code]["id"]
            else:
                ids[entry.code], following = following, following + 1
        for n, entry in enumerate(entries, 1):
            kind = entry.type or {}
            row = {"id": ids[entry.code], "data_source_id": source, "code": entry.code, "identifier_system": system,
                   "name": entry.name, "name_norm": normalize(entry.name), "type_system": kind.get("system"),
                   "type_code": kind.get("code"), "type_display": kind.get("display"),
                   "part_of": ids[entry.partof] if entry.partof is not None else None,
                   "updated_at": now, "deleted": False}
            old = current.pop(entry.code, None)
            if old is not None and not old["deleted"] and all(old[f] == row[f] for f in FIELDS):
                counts["unchanged"] += 1
                continue
            _write(conn, {**row, "version_id": 1 if old is None else old["version_id"] + 1}, old is None)
            counts["inserted" if old is None else "updated"] += 1
            call.progress(n)
        left_out = sorted((old for old in current.values() if not old["deleted"]), key=lambda old: old["id"])
        for old in left_out if delete_missing else ():  # left out of the file: a deleted version
            _write(conn, {**old, "version_id": old["version_id"] + 1, "updated_at": now, "deleted": True}, False)
        counts["deleted" if delete_missing else "missing"] = len(left_out)
    ids_out = tuple(str(old["id"]) for old in left_out[:SAMPLE])
    named_out = tuple(f"{old['code']} {old['name']!r} (id {old['id']})" for old in left_out[:SAMPLE])
    notes = () if delete_missing or not left_out else (
        f"{len(left_out):,} Organization{'s' if len(left_out) != 1 else ''} of the directory of {args.account}/"
        f"{args.data_source} {'are' if len(left_out) != 1 else 'is'} not in the file (first: {', '.join(named_out)}): "
        "kept as before (another file may publish them); load with --delete-missing to record them as deleted",)
    return LoadReport(**counts, notes=notes, resource_type="Organization",
                      deleted_ids=ids_out if delete_missing else (), missing_ids=() if delete_missing else ids_out,
                      deleted_named=named_out if delete_missing else (),
                      missing_named=() if delete_missing else named_out,
                      about={"data_source": args.data_source, "account": args.account})


def withdraw(conn: Connection, source_ids: list[int], now: datetime) -> int:
    """The directory Organizations of removed data sources: each live one a deleted version stamped `now` (410, a
    DELETE in `_history` for the account that saw it). Returns how many."""
    d = directory_organization
    live = [dict(row) for row in conn.execute(select(d).where(d.c.data_source_id.in_(source_ids),
                                                              d.c.deleted.is_(False))).mappings()]
    for old in live:
        _write(conn, {**old, "version_id": old["version_id"] + 1, "updated_at": now, "deleted": True}, False)
    return len(live)


def erase(conn: Connection, source_ids: list[int]) -> None:
    """The directory Organizations of purged data sources, erased with every version; their highest id is kept
    (ERASED) so that none is given again."""
    d = directory_organization
    highest = conn.execute(select(func.max(d.c.id)).where(d.c.data_source_id.in_(source_ids))).scalar()
    if highest is None:
        return
    kept = conn.execute(select(orgunit_setting.c.value).where(orgunit_setting.c.name == ERASED)).scalar()
    if kept is None:
        conn.execute(insert(orgunit_setting).values(name=ERASED, value=str(highest)))
    elif int(kept) < highest:
        conn.execute(update(orgunit_setting).where(orgunit_setting.c.name == ERASED).values(value=str(highest)))
    ids = select(d.c.id).where(d.c.data_source_id.in_(source_ids))
    conn.execute(delete(directory_organization_history).where(directory_organization_history.c.organization_id
                                                              .in_(ids)))
    conn.execute(delete(d).where(d.c.data_source_id.in_(source_ids)))


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-source", required=True, help="the data source (name or slug) whose directory the "
                                                             "file is: its account sees the Organizations")
    parser.add_argument("--account", default="default", help="the data source's account (default: default)")
    parser.add_argument("--system", help="the identifier system of the codes (default: "
                                         "<fhir.extension_namespace>/fhir/sid/organization)")
    parser.add_argument("--delete-missing", action="store_true",
                        help="Organizations of the data source's directory absent from the file become deleted "
                             "versions (without it they stay as they were and the report counts them as missing: "
                             "several files, of several packages, may feed one directory)")


ORGANIZATIONS = LoadFormat(
    "organizations", 'Organizations that are not data sources (owners, networks, partners): a JSON file '
                     '{"organizations": [{code, name, type: {system, code, display}, partof: code}]}',
    load_organizations, _configure, dry_run=True)
