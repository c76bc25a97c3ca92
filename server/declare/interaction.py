"""What a request asks of a resource type, as hooks (authorize, translate_exception) and scopes see it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

InteractionKind = Literal["read", "vread", "search-type", "history-instance", "history-type", "operation",
                          "capabilities"]


@dataclass(frozen=True)
class Interaction:
    kind: InteractionKind
    resource_type: str | None = None
    id: str | None = None
    operation: str | None = None
    scope: Literal["r", "s"] | None = None  # the SMART letter an operation declares it needs (None: its kind's)
