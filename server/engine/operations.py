"""Operations with their own handler: the engine checks the level and the instance (404 or 410 as a read), opens a
connection that cannot write, gives the handler the caller's scope in an OperationCall, and answers what it returns."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.engine.context import ServerContext
from server.engine.caller import Caller
from server.declare.provider import Operation, OperationCall, ResourceProvider
from server.engine.drivers import in_thread
from server.engine.instances import fetch
from server.engine.visibility import visibility
from server.errors import InternalError, ResourceNotFound
from server.params.ids import stored_id
from server.search.paging import FORMAT_PARAMS
from server.storage.backend import backend_of


def call_handler(ctx: ServerContext, caller: Caller, base: str, provider: ResourceProvider, op: Operation,
                 rid: str | None, items: Sequence[tuple[str, str]], strict: bool) -> dict[str, Any]:
    assert op.handler is not None
    if ("instance" if rid is not None else "type") not in op.levels:
        at = f"{provider.resource_type}/[id]/${op.name}" if rid is None else f"{provider.resource_type}/${op.name}"
        raise ResourceNotFound(f"${op.name} is answered at [base]/{at} only")
    stored = None
    if rid is not None:
        in_thread(ctx, fetch(ctx, provider, rid, caller))  # it must exist and be visible: 404 (or 410) otherwise
        stored = stored_id(provider, rid)
    parameters = tuple((k, v) for k, v in items if k not in FORMAT_PARAMS)
    with ctx.db.connect() as conn, backend_of(conn).read_only(conn) as reading:
        clause = visibility(ctx, reading, provider, caller).clause
        answer = op.handler(OperationCall(provider, rid, stored, parameters, strict, reading, clause, base))
    if not isinstance(answer, dict) or not isinstance(answer.get("resourceType"), str):
        raise InternalError(f"operation ${op.name} of {provider.resource_type} answered no FHIR resource")
    return answer
