"""Counting the costly turns requests take (server.search.cost.CostlyGate)."""
from __future__ import annotations

from typing import Any

import pytest

from server.search.cost import CostlyGate


def counted_turns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that grows by one each time a request takes a costly turn (the gate works as before)."""
    turns: list[str] = []
    original = CostlyGate.turn

    def turn(self: CostlyGate) -> Any:
        turns.append("turn")
        return original(self)

    monkeypatch.setattr(CostlyGate, "turn", turn)
    return turns
