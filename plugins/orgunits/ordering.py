"""Records ordered parents first (each parent written before its children, or already stored in the same
account), refusing duplicates, dangling parents and cycles (each record is checked on its own by
plugins.orgunits.validation)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from sqlalchemy import Connection, select

from plugins.orgunits.records import UnitRecord, describe, refuse_cycles
from plugins.orgunits.tables import data_source, org_unit, source_version
from server import LoadError

_ID_CHUNK = 2000


def parents_first(conn: Connection, records: Iterable[UnitRecord], check_every: int,
                   source_version_id: int) -> Iterator[UnitRecord]:
    """Yield records so that each one's parent was yielded before it or already exists in the database.

    Records whose parent has not been seen yet wait; their parents are looked up in the database in chunks,
    so a stream that is already parents-first (or whose parents are stored) holds little in memory.
    """
    seen: set[int] = set()
    available: set[int] = set()
    waiting: dict[int, list[UnitRecord]] = {}
    unchecked: set[int] = set()
    absent: set[int] = set()

    def release(record: UnitRecord) -> Iterator[UnitRecord]:
        stack = [record]
        while stack:
            current = stack.pop()
            available.add(current.id)
            unchecked.discard(current.id)
            absent.discard(current.id)
            yield current
            stack.extend(reversed(waiting.pop(current.id, ())))

    def release_stored() -> Iterator[UnitRecord]:
        stored = _existing_ids(conn, unchecked, source_version_id)
        absent.update(unchecked - stored)
        unchecked.clear()
        available.update(stored)
        for parent_id in stored:
            for child in waiting.pop(parent_id, ()):
                yield from release(child)

    for record in records:
        if record.id in seen:
            raise LoadError(f"{describe(record)} appears twice")
        seen.add(record.id)
        parent_id = record.parent_id
        if parent_id is None or parent_id in available:
            yield from release(record)
            continue
        if parent_id == record.id:
            raise LoadError(f"{describe(record)} is its own parent")
        waiting.setdefault(parent_id, []).append(record)
        if parent_id not in absent:
            unchecked.add(parent_id)
            if len(unchecked) >= check_every:
                yield from release_stored()
    yield from release_stored()
    if waiting:
        raise _unresolved(waiting, seen)


def _unresolved(waiting: dict[int, list[UnitRecord]], seen: set[int]) -> LoadError:
    for parent_id, children in waiting.items():
        if parent_id not in seen:
            return LoadError(f"{describe(children[0])}: parent {parent_id} does not exist")
    by_id = {child.id: child for children in waiting.values() for child in children}
    refuse_cycles({child.id: child.parent_id for child in by_id.values()}, lambda i: describe(by_id[i]))
    return LoadError(f"{describe(next(iter(by_id.values())))}: its parents never resolve")


def _existing_ids(conn: Connection, ids: Iterable[int], source_version_id: int) -> set[int]:
    """The ids among `ids` of units of the same account as `source_version_id`: a parent is never another
    account's unit (an account sees its own pyramid only)."""
    pending = list(ids)
    found: set[int] = set()
    owner = select(data_source.c.account).join(source_version).where(source_version.c.id == source_version_id)
    same_account = (select(source_version.c.id).join(data_source)
                    .where(data_source.c.account == owner.scalar_subquery()))
    for start in range(0, len(pending), _ID_CHUNK):
        chunk = pending[start:start + _ID_CHUNK]
        found.update(conn.execute(select(org_unit.c.id).where(
            org_unit.c.id.in_(chunk), org_unit.c.source_version_id.in_(same_account))).scalars())
    return found
