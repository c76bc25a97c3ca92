"""The audit line: one JSON object per request on the `orgunit_fhir.audit` logger (server.ops.logs formats it).
Who asked (subject, account), what (interaction, type, ids), what they got (status, ids read or number
returned) and how long it took. Tokens never appear: no header is logged, and query values of parameters
named like a token are masked."""
from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request

from server.access.tokens import Principal
from server.engine.interaction import Interaction
from server.ops.logs import AUDIT, log_fields

MAX_QUERY = 1000
SECRET_WORDS = ("token", "secret", "password", "key")


def _query(raw: str) -> str | None:
    if not raw:
        return None
    pairs = parse_qsl(raw[:MAX_QUERY * 2], keep_blank_values=True)
    if any(w in k.lower() for k, _ in pairs for w in SECRET_WORDS):
        pairs = [(k, "***" if any(w in k.lower() for w in SECRET_WORDS) else v) for k, v in pairs]
        raw = urlencode(pairs)
    return raw[:MAX_QUERY]


def _returned(body: Any) -> int | None:
    if isinstance(body, dict) and body.get("resourceType") == "Bundle":
        return sum(1 for e in body.get("entry", ()) if e.get("search", {}).get("mode", "match") == "match")
    return None


def audit(request: Request, interaction: Interaction | None, principal: Principal | None, account: str | None,
          status: int, started: float, body: Any = None) -> None:
    if not AUDIT.isEnabledFor(20) or not request.app.state.ctx.settings.server.audit_log:
        return
    fields: dict[str, Any] = {
        "request_id": getattr(request.state, "request_id", None),
        "method": request.method,
        "path": request.url.path,
        "query": _query(request.url.query),
        "client": request.client.host if request.client else None,
        "subject": principal.subject if principal else None,
        "account": account,
        "interaction": interaction.kind if interaction else None,
        "resource_type": interaction.resource_type if interaction else None,
        "status": status,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
    }
    if interaction is not None and interaction.operation:
        fields["operation"] = interaction.operation
    if interaction is not None and interaction.id is not None:
        fields["ids"] = [interaction.id]
    returned = _returned(body) if status == 200 else None
    if returned is not None:
        fields["returned"] = returned
    log_fields(AUDIT, "request", **{k: v for k, v in fields.items() if v is not None})
