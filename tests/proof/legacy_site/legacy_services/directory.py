"""GET [base]/$service-directory: a system-level operation, paged, of this package (no engine file knows it):
every healthcare service the caller may read, current versions, by id. It needs the read scope on
HealthcareService (a token without it is refused, naming the scope), and keeps to what the caller sees."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import func, select

from legacy_services.tables import service
from server import Forbidden, InvalidRequest, Operation, OperationCall, Page

ToResource = Callable[[Any], Mapping[str, Any]]
DEFINITION = "https://legacy-services.example.org/OperationDefinition/service-directory"


def service_directory(call: OperationCall, to_resource: ToResource) -> Page:
    if call.strict and call.parameters:
        raise InvalidRequest("$service-directory takes _count and _skip only")
    reason = call.denial("HealthcareService")
    if reason is not None:
        raise Forbidden(reason)
    visible = call.visible_to("HealthcareService")
    where = [service.c.deleted.is_(False), *([visible] if visible is not None else [])]
    total = call.connection.execute(select(func.count()).select_from(service).where(*where)).scalar_one()
    assert call.count is not None
    rows = call.connection.execute(select(*service.c).where(*where).order_by(service.c.id)
                                   .limit(call.count).offset(call.skip)).mappings().all()
    return Page([to_resource(row) for row in rows], total=total)


def directory_operation(to_resource: ToResource) -> Operation:
    return Operation("service-directory", None, "GET [base]/$service-directory: every healthcare service the caller "
                     "may read, paged (_count, _skip)", DEFINITION,
                     handler=lambda call: service_directory(call, to_resource), levels=frozenset({"system"}),
                     scope="r", paged=True)
