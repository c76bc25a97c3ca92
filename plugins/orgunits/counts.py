"""`$counts`: exact counts of the Locations a search matches, as the caller sees them, grouped (`by`):

- `type` (default): per org-unit type (its level: the type's depth), with how many are closed and how many of each
  status: the counts per level below a unit (`partof:below=12`), the types a token sees (no criterion);
- `parent`: per parent (`Location/id` and its name, as `partOf` names it), in name order (accents and case folded),
  `_count` groups from `_skip`: the list of a token whose units are not one subtree (a SMART scope
  `?type=CSPS&status=active`), grouped by the part of their path it sees;
- `below`: per matching unit (at most 100: `_id=1,2,3` or `partof=12`), how many units lie below it: the counts on
  the explorer's tree nodes (0: a leaf).

The answer is a Parameters resource: `total` (every match), then a `group` per group, each a `part` list."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal, select

from plugins.orgunits.exports import matching, selection
from plugins.orgunits.tables import org_unit, org_unit_type
from plugins.orgunits.views import PUBLISHED_FROM, parent
from server import InvalidRequest, OperationCall, normalize, path_subtree

GROUPINGS = ("type", "parent", "below")
OWN = ("by", "_count", "_skip")
MAX_BELOW = 100  # units whose subtrees `by=below` counts in one call
MAX_GROUPS = 1000  # groups of one `by=parent` answer


def _integer(mine: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = mine.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise InvalidRequest(f"{name}: a whole number from {low} to {high}, not {raw[:40]!r}")
    return int(raw)


def _int(name: str, value: int) -> dict[str, Any]:
    return {"name": name, "valueInteger": int(value)}


def by_type(call: OperationCall, where: ColumnElement[bool], closed: ColumnElement[bool], type_system: str,
            status_map: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
    shut = case((closed, 1), else_=0)
    query = (select(org_unit_type.c.short_name, org_unit_type.c.name, org_unit_type.c.depth,
                    org_unit.c.validation_status, func.count(), func.sum(shut))
             .select_from(PUBLISHED_FROM).where(where)
             .group_by(org_unit_type.c.short_name, org_unit_type.c.name, org_unit_type.c.depth,
                       org_unit.c.validation_status))
    groups: dict[tuple[Any, ...], dict[str, int]] = {}
    for code, name, depth, validation, count, closed_count in call.connection.execute(query).all():
        tally = groups.setdefault((depth if depth is not None else 1 << 30, code, name, depth), {})
        tally["count"] = tally.get("count", 0) + count
        tally["closed"] = tally.get("closed", 0) + int(closed_count or 0)
        status = status_map[validation]
        tally[status] = tally.get(status, 0) + count
    answer = []
    for (_, code, name, depth), tally in sorted(groups.items()):
        parts = [{"name": "type", "valueCoding": {"system": type_system, "code": code, "display": name}}]
        if depth is not None:
            parts.append(_int("level", depth))
        parts += [_int(k, tally.get(k, 0)) for k in ("count", "closed", "active", "suspended", "inactive")]
        answer.append({"name": "group", "part": parts})
    return sum(g["count"] for g in groups.values()), answer


def by_parent(call: OperationCall, where: ColumnElement[bool], count: int,
              skip: int) -> tuple[int, list[dict[str, Any]]]:
    query = (select(org_unit.c.parent_id, parent.c.name, func.count()).select_from(PUBLISHED_FROM).where(where)
             .group_by(org_unit.c.parent_id, parent.c.name))
    found = call.connection.execute(query).all()
    found.sort(key=lambda r: (r[0] is not None, normalize(r[1] or ""), r[0] or 0))  # the roots' group first
    answer = []
    for parent_id, name, n in found[skip:skip + count]:
        parts: list[dict[str, Any]] = []
        if parent_id is not None:
            reference = {"reference": f"Location/{parent_id}", **({"display": name} if name else {})}
            parts.append({"name": "parent", "valueReference": reference})
        parts.append(_int("count", n))
        answer.append({"name": "group", "part": parts})
    return sum(r[2] for r in found), [_int("groups", len(found)), *answer]


def by_below(call: OperationCall, where: ColumnElement[bool], everything: ColumnElement[bool]
             ) -> tuple[int, list[dict[str, Any]]]:
    units = call.connection.execute(select(org_unit.c.id, org_unit.c.path).select_from(PUBLISHED_FROM).where(where)
                                    .order_by(org_unit.c.path).limit(MAX_BELOW + 1)).all()
    if len(units) > MAX_BELOW:
        raise InvalidRequest(f"by=below counts the units below at most {MAX_BELOW} units; this search matches more "
                             "(name them: _id=1,2,3, or partof=<a parent>)")
    if not units:
        return 0, []
    below = [select(func.count()).select_from(org_unit).where(path_subtree(org_unit.c.path, path, strict=True),
                                                              everything).scalar_subquery().label(f"n{i}")
             for i, (_, path) in enumerate(units)]
    counted = call.connection.execute(select(literal(1), *below)).one()[1:]
    return len(units), [{"name": "group", "part": [{"name": "unit", "valueReference": {"reference": f"Location/{u}"}},
                                                   _int("below", n)]} for (u, _), n in zip(units, counted)]


def counter(type_system: str, status_map: dict[str, str],
            closed: ColumnElement[bool]) -> Callable[[OperationCall], dict[str, Any]]:
    def handler(call: OperationCall) -> dict[str, Any]:
        search, mine = selection(call, OWN)
        by = mine.get("by", "type")
        if by not in GROUPINGS:
            raise InvalidRequest(f"by: {', '.join(GROUPINGS)}, not {by[:40]!r}")
        if by != "parent" and ("_count" in mine or "_skip" in mine):
            raise InvalidRequest("_count and _skip page the groups of by=parent only")
        where, = matching(call, search)  # type level: one condition
        if by == "type":
            total, groups = by_type(call, where, closed, type_system, status_map)
        elif by == "parent":
            total, groups = by_parent(call, where, _integer(mine, "_count", 100, 1, MAX_GROUPS),
                                      _integer(mine, "_skip", 0, 0, 10**9))
        else:
            assert call.lookup is not None
            total, groups = by_below(call, where, call.lookup.condition("Location", [], connection=call.connection))
        return {"resourceType": "Parameters", "parameter": [_int("total", total), *groups]}

    return handler
