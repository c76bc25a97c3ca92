"""Core hook implementations, registered `trylast` so that any plugin can override them."""
from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from server.auth import Principal
from server.errors import FhirError, InternalError, ServiceUnavailable
from server.hookspecs import hookimpl
from server.interaction import Interaction
from server.settings import Settings

log = logging.getLogger("orgunit_fhir")


@hookimpl(trylast=True)
def authorize(principal: Principal, interaction: Interaction, settings: Settings) -> str | None:
    if settings.auth.permission in principal.permissions:
        return None
    return f"the token lacks the permission {settings.auth.permission!r}"


@hookimpl(trylast=True)
def translate_exception(exception: BaseException, interaction: Interaction | None) -> FhirError | None:
    if isinstance(exception, (OperationalError, PoolTimeout)) or (
        isinstance(exception, DBAPIError) and exception.connection_invalidated
    ):
        return ServiceUnavailable("the database is unavailable or too slow; try again shortly",
                                  headers={"Retry-After": "5"})
    return InternalError("internal server error")
