"""What every importer shares (besides the write path, `transaction.import_units`): id allocation for sources whose
ids are strings, parent lookups among stored units, cycle and depth checks (together: `resolve_hierarchy`), and
per-level org unit types."""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, select

from plugins.orgunits.purged import next_unit_id
from plugins.orgunits.records import TypeRecord, refuse_cycles, slugify
from plugins.orgunits.tables import data_source, org_unit, org_unit_type, source_version
from plugins.orgunits.views import SOURCE_HOLDS, types_of
from server import LoadError

K = TypeVar("K", bound=Hashable)
CHUNK = 2000
MAX_DEPTH = 256


# --- ids and stored units -----------------------------------------------------------------------------------

def allocate_ids(conn: Connection, data_source_id: int, source_refs: Iterable[str]) -> dict[str, int]:
    """Integer id per source ref (for sources whose ids are strings): the id of the stored unit with that
    source_ref in that data source (one it holds before one it deleted, then the lowest id), else a new id above
    every id ever given (purged ones too: plugins.orgunits.purged), in the order of `source_refs`. The same refs
    always map to the same ids."""
    wanted = list(dict.fromkeys(source_refs))
    ids: dict[str, int] = {}
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start:start + CHUNK]
        query = (select(org_unit.c.source_ref, org_unit.c.id)
                 .join(source_version, source_version.c.id == org_unit.c.source_version_id)
                 .where(source_version.c.data_source_id == data_source_id, org_unit.c.source_ref.in_(chunk))
                 .order_by(SOURCE_HOLDS.desc(), org_unit.c.id))
        for ref, unit_id in conn.execute(query):
            ids.setdefault(ref, int(unit_id))
    next_id = next_unit_id(conn)  # never an id given before, purged or not
    for ref in wanted:
        if ref not in ids:
            ids[ref] = next_id
            next_id += 1
    return ids


def stored_by(conn: Connection, column: Any, values: Iterable[str], data_source_id: int) -> dict[str, list[int]]:
    """Ids of the stored units the data source holds (live or withdrawn) whose `column` (source_ref, name...) is one
    of `values`: where parents outside the file are looked up."""
    found: dict[str, list[int]] = defaultdict(list)
    pending = sorted(set(values))
    for start in range(0, len(pending), CHUNK):
        chunk = pending[start:start + CHUNK]
        query = (select(column, org_unit.c.id)
                 .join(source_version, source_version.c.id == org_unit.c.source_version_id)
                 .where(source_version.c.data_source_id == data_source_id, column.in_(chunk), SOURCE_HOLDS)
                 .order_by(org_unit.c.id))
        for key, unit_id in conn.execute(query):
            found[key].append(int(unit_id))
    return found


def data_source_slug(conn: Connection, data_source_id: int) -> str:
    return str(conn.execute(select(data_source.c.slug).where(data_source.c.id == data_source_id)).scalar_one())


def stored_depths(conn: Connection, ids: Iterable[int]) -> dict[int, int]:
    """Depth (1 = root) of stored units, by walking their parents."""
    depths: dict[int, int] = {}
    pending = sorted(set(ids))
    for start in range(0, len(pending), CHUNK):
        chunk = pending[start:start + CHUNK]
        current = {unit_id: unit_id for unit_id in chunk}  # start -> ancestor reached so far
        for depth in range(1, MAX_DEPTH + 1):
            rows = dict(conn.execute(select(org_unit.c.id, org_unit.c.parent_id)
                                     .where(org_unit.c.id.in_(set(current.values())))).all())
            following = {}
            for origin, ancestor in current.items():
                parent = rows.get(ancestor)
                if parent is None:
                    depths[origin] = depth
                else:
                    following[origin] = parent
            current = following
            if not current:
                break
        else:
            raise LoadError(f"stored org unit {next(iter(current))} is more than {MAX_DEPTH} levels deep")
    return depths


# --- structure checks ---------------------------------------------------------------------------------------

def compute_depths(parents: Mapping[K, K | None], outside: Mapping[K, int], stored: Mapping[int, int],
                   known: Mapping[K, int] | None = None) -> dict[K, int]:
    """Depth of each key (1 = root): `known[key]` when given, else one deeper than its parent in the file, or than
    `stored[outside[key]]` when its parent is the stored unit `outside[key]`. Cycles must have been refused."""
    depths: dict[K, int] = dict(known or {})
    for key in parents:
        chain: list[K] = []
        current: K | None = key
        base = 0
        while current is not None and current not in depths:
            chain.append(current)
            if current in outside:
                base = stored[outside[current]]
                current = None
            else:
                current = parents[current]
        if current is not None:
            base = depths[current]
        for item in reversed(chain):
            base += 1
            depths[item] = base
    return depths


# --- the hierarchy of a file whose ids are strings (DHIS2, FHIR) ----------------------------------------------

@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where the units of a file stand, by source ref: their integer id, the integer id of their parent (in the
    file or stored; None for a root) and their depth (1 = root)."""
    ids: dict[str, int]
    parent_ids: dict[str, int | None]
    depths: dict[str, int]


def resolve_hierarchy(conn: Connection, data_source_id: int, parents: Mapping[str, str | None], *,
                      label: Callable[[str], str], reference: Callable[[str], str], not_found: str,
                      source_name: str, known_depths: Mapping[str, int] | None = None) -> Hierarchy:
    """The hierarchy of the units `parents` (source ref -> parent source ref or None, in file order).

    Ids are allocated by source ref (`allocate_ids`). A parent is looked up in the file, then among the live
    stored units of the data source (by source_ref); one found nowhere is refused with the LoadError
    "<label(ref)>: <reference(parent)> matches <not_found>", one matching several stored units as ambiguous,
    and so are parent cycles. Depths are `known_depths` where given, else computed from the parents."""
    ids = allocate_ids(conn, data_source_id, parents)
    outside = {parent for parent in parents.values() if parent is not None and parent not in parents}
    stored = stored_by(conn, org_unit.c.source_ref, outside, data_source_id)
    in_file: dict[str, str | None] = {}
    stored_parent: dict[str, int] = {}
    for key, parent in parents.items():
        if parent is None or parent in parents:
            in_file[key] = parent
            continue
        matches = stored.get(parent, [])
        if not matches:
            raise LoadError(f"{label(key)}: {reference(parent)} matches {not_found}")
        if len(matches) > 1:
            raise LoadError(f"{label(key)}: {reference(parent)} is ambiguous, it matches stored org units "
                            f"{', '.join(map(str, matches))} of data source {source_name!r}")
        in_file[key] = None
        stored_parent[key] = matches[0]
    refuse_cycles(in_file, label)
    parent_ids = {key: ids[parent] if parent is not None else stored_parent.get(key)
                  for key, parent in in_file.items()}
    depths = dict(known_depths or {})
    if len(depths) < len(parents):
        depths = compute_depths(in_file, stored_parent, stored_depths(conn, stored_parent.values()), depths)
    return Hierarchy(ids, parent_ids, depths)


# --- per-level types (sources without their own types: DHIS2, FHIR) ----------------------------------------------

_FIXED_CATEGORIES = {1: "COUNTRY", 2: "REGION", 3: "DISTRICT"}


def level_short_name(slug: str, depth: int) -> str:
    """Type short names are unique across data sources, hence prefixed by the data source slug: 'dhis2-l1'."""
    return f"{slug}-l{depth}"


def level_category(depth: int, deepest: int, name: str) -> str:
    """1 COUNTRY, 2 REGION, 3 DISTRICT, the deepest level HF (when deeper than 1), others the slugged name."""
    if depth == deepest and depth > 1:
        return "HF"
    return _FIXED_CATEGORIES.get(depth) or slugify(name).upper()


def level_types(conn: Connection, data_source_id: int, depths: Iterable[int], names: Mapping[int, str] | None = None,
                deepest: int | None = None) -> dict[int, TypeRecord]:
    """One type per depth, named from `names`, else as already stored, else 'Level N'. The deepest level is the
    deepest of `depths`, `deepest` and the levels already stored for this data source, so that a partial file
    does not relabel the types."""
    slug = data_source_slug(conn, data_source_id)
    pattern = re.compile(re.escape(slug) + r"-l(\d+)")
    stored = {int(match.group(1)): row.name for row in conn.execute(
        select(org_unit_type.c.short_name, org_unit_type.c.name).where(types_of(data_source_id)))
              if (match := pattern.fullmatch(row.short_name))}
    wanted = sorted(set(depths))
    bottom = max([*wanted, *stored, deepest or 0], default=0)
    types = {}
    for depth in wanted:
        name = (names or {}).get(depth) or stored.get(depth) or f"Level {depth}"
        types[depth] = TypeRecord(name, level_short_name(slug, depth), level_category(depth, bottom, name), depth)
    return types
