"""The plans of the statements a chained search runs (tests.support.plans explains them): a database large enough
for the planners to prefer indexes where they should (a demo pyramid with the real data beside it, analyzed), and
the large tables some statement reads whole."""
from __future__ import annotations

from pathlib import Path

from plugins.orgunits.demo import generate_demo
from server.engine.context import ServerContext
from server.engine.caller import TRUSTED, Caller
from tests.support.chained import real_context, search
from tests.support.clock import hold
from tests.support.plans import Statement, captured, full_scans

LARGE = ("org_unit", "org_unit_name", "org_unit_history")  # what grows with the pyramid


def plan_context(url: str, var: Path, size: int = 3000) -> ServerContext:
    """A demo pyramid of `size` units, then Iaso and DHIS2 Sierra Leone, analyzed."""
    ctx = real_context(url, var, before=lambda engine: generate_demo(engine, size, 42))
    with ctx.db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE" if conn.dialect.name == "postgresql" else "ANALYZE")
    hold(ctx.freshness)  # no snapshot re-read in the middle of a captured search
    return ctx


def statements(ctx: ServerContext, rtype: str, query: str, caller: Caller = TRUSTED, *,
               counted: bool = False, cold: bool = False) -> list[Statement]:
    """What a search runs once its caller's scope and counts are known (it is run once before); `counted`: its
    count too (as the first request after a load runs it); `cold`: its chains' conditions built again, with their
    look-ups (as the first request after a load builds them)."""
    search(ctx, rtype, query, caller)
    if counted:
        ctx.counts.clear()
    if cold:
        ctx.conditions.clear()
    with captured(ctx.db) as seen:
        search(ctx, rtype, query, caller)
    return list(seen)


def scanned(ctx: ServerContext, ran: list[Statement]) -> set[str]:
    """The large tables some statement reads whole (a scan, or a walk of an index without a condition on it)."""
    return {table for statement in ran for table in LARGE if full_scans(ctx.db, statement, table)}
