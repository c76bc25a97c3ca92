"""Pre-rendered bodies: each version's resource rendered once, as compact FHIR JSON, into its history row.

The writer (load, demo) stores versions; `refresh` renders what is missing after it, and everything again when
the provider's fingerprint (settings, code) differs from the one the stored bodies were made with. Requests
splice a stored body when the fingerprints match and render per request otherwise: the bytes are the same.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, and_, bindparam, delete, insert, null, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite

from server.declare.provider import CurrentBodies, Prerendered, ResourceProvider, snapshot_of
from server.declare.registry import Registry
from server.storage.tables import render_state

BATCH_SIZE = 2000
log = logging.getLogger("orgunit_fhir")


def render(provider: ResourceProvider, snapshot: Any) -> bytes:
    """A version's body (its snapshot already decoded: `snapshot_of`)."""
    return orjson.dumps(provider.to_resource(snapshot))


def prerendered(registry: Registry) -> Iterator[tuple[ResourceProvider, Prerendered]]:
    for provider in registry:
        if isinstance(provider, ResourceProvider) and provider.prerendered is not None:
            yield provider, provider.prerendered


def _made_for(conn: Connection, provider: ResourceProvider, spec: Prerendered) -> bool:
    """The type's stored bodies were made with this fingerprint, and so were its current bodies kept apart (a
    release that does not know them claims the type without saying what made them: they prove nothing then)."""
    row = conn.execute(select(render_state.c.fingerprint, render_state.c.current_fingerprint)
                       .where(render_state.c.resource_type == provider.resource_type)).first()
    if row is None or row.fingerprint != spec.fingerprint:
        return False
    return spec.current is None or row.current_fingerprint == spec.fingerprint


def _claim(conn: Connection, provider: ResourceProvider, spec: Prerendered) -> bool:
    """Make the stored bodies this fingerprint's: forget them all (and the current bodies kept apart) unless this
    fingerprint made them."""
    assert provider.versioning is not None
    if _made_for(conn, provider, spec):
        return False
    conn.execute(update(provider.versioning.history).where(spec.body.is_not(None)).values({spec.body.key: None}))
    if spec.current is not None:
        conn.execute(delete(spec.current.id.table))
    conn.execute(delete(render_state).where(render_state.c.resource_type == provider.resource_type))
    conn.execute(insert(render_state).values(
        resource_type=provider.resource_type, fingerprint=spec.fingerprint,
        current_fingerprint=spec.fingerprint if spec.current is not None else None))
    return True


def render_pending(conn: Connection, provider: ResourceProvider, spec: Prerendered, *,
                   progress: Callable[[int], None] | None = None, batch_size: int = BATCH_SIZE) -> int:
    """Render every live version without a body (keyset-paged); returns how many were stored. Where the provider
    keeps its current bodies apart (Prerendered.current), each batch's current versions are written there too."""
    v = provider.versioning
    assert v is not None
    key = tuple_(v.history_id, v.history_version)
    current = (select(v.version).where(provider.id_column == v.history_id).scalar_subquery()
               if spec.current is not None else null())  # the version the resource is at
    query = (select(v.history_id, v.history_version, v.history_snapshot, current)
             .where(spec.body.is_(None), v.history_deleted.is_(False))
             .order_by(v.history_id, v.history_version).limit(batch_size))
    store = (update(v.history)
             .where(and_(v.history_id == bindparam("b_id"), v.history_version == bindparam("b_version")))
             .values({spec.body.key: bindparam("b_body")}))
    last: tuple[Any, Any] | None = None
    stored = 0
    while True:
        rows = conn.execute(query if last is None else query.where(key > tuple_(*last))).all()
        if not rows:
            return stored
        decoded = [(rid, version, snapshot_of(snapshot), at) for rid, version, snapshot, at in rows]
        rendered = [(rid, version, render(provider, snapshot), at) for rid, version, snapshot, at in decoded
                    if snapshot is not None and spec.storable(snapshot)]
        if rendered:
            conn.execute(store, [{"b_id": rid, "b_version": version, "b_body": body}
                                 for rid, version, body, _ in rendered])
        if spec.current is not None:
            _keep_current(conn, spec.current, [(rid, version, body) for rid, version, body, at in rendered
                                               if version == at])
        stored += len(rendered)
        last = (rows[-1][0], rows[-1][1])
        if progress is not None:
            progress(stored)


def _keep_current(conn: Connection, current: CurrentBodies, bodies: list[tuple[Any, Any, bytes]]) -> None:
    """Each (id, version, body) of a resource's current version, just stored: its row of the current bodies'
    table, in place of a former version's. One statement per batch, safe beside another render doing the same
    (an insert meeting the other's row updates it, waiting for it to commit) and never back to an older version
    (a render that read the resources before a write meets the row of a render that read them after)."""
    if not bodies:
        return
    table = current.id.table
    insert_into = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    statement = insert_into(table)
    statement = statement.on_conflict_do_update(
        index_elements=[current.id],
        set_={current.version.key: statement.excluded[current.version.key],
              current.body.key: statement.excluded[current.body.key]},
        where=current.version <= statement.excluded[current.version.key])
    conn.execute(statement, [{current.id.key: rid, current.version.key: version, current.body.key: body}
                             for rid, version, body in bodies])


def refresh(engine: Engine, registry: Registry, *, progress: Callable[[int], None] | None = None) -> int:
    """After a write: claim the bodies for these settings and render what is missing; returns how many."""
    total = 0
    for provider, spec in prerendered(registry):
        with engine.begin() as conn:
            if _claim(conn, provider, spec):
                log.info("%s: rendering every version for new settings or code", provider.resource_type)
            total += render_pending(conn, provider, spec, progress=progress)
    return total


def usable(conn: Connection, registry: Registry) -> frozenset[str]:
    """The resource types whose stored bodies were rendered with the fingerprint these providers have now."""
    return frozenset(provider.resource_type for provider, spec in prerendered(registry)
                     if _made_for(conn, provider, spec))
