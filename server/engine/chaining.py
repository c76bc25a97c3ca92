"""A search's total when its chained, _has or look-up parameters cross other types: the count's cache key extended
with what the caller sees of each type crossed and its data generation (the conditions themselves are compiled by
server.engine.conditions)."""
from __future__ import annotations

from collections.abc import Hashable

from server.engine.conditions import Condition
from server.engine.counts import count
from server.storage.steps import Steps, scalar
from server.search.hops import crossed


def total(condition: Condition, up_to: int | None, *, kept_only: bool = False,
          known: int | None = None) -> Steps[int | None]:
    """The search's count up to `up_to` (None: every match; Condition.count), cached as any count (server.engine.
    counts.count) by what it selects and what the caller sees of it and, for each other type a chain crosses, what
    the caller sees of that type and its data generation; counted every time when one of them keeps no versions
    (its changes would go unseen). `kept_only`, `known`: as counts.count."""
    ctx, request, snapshot, others = condition.ctx, condition.request, condition.snapshot, condition.others
    key: Hashable = (request.key, condition.vis.key, up_to)
    crossing = crossed(ctx.registry.providers, request)
    if any(p.versioning is None for p in crossing):
        if known is not None or kept_only:
            return known
        return int((yield from scalar((yield from condition.count(up_to)), bounded=False)))
    if crossing:
        key = (key, tuple((p.resource_type, others[p.resource_type].key, snapshot.generations.get(p.resource_type))
                          for p in crossing))
    return (yield from count(ctx, condition.provider, snapshot, key, lambda: condition.count(up_to),
                             kept_only=kept_only, known=known))
