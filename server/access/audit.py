"""The audit line: one JSON object per FHIR request on the `orgunit_fhir.audit` logger (server.telemetry.logs formats
it; server.http.observe writes it with the access line and the metrics). Who asked (subject, and the access scope
that was applied: account and subtree roots, as the `access_scope` hook gave them, and the SMART scopes granted),
what (interaction, type, ids), what they got (status, number returned) and how long it took. Tokens never appear:
no header is logged, query values of parameters named like a credential are masked, and any JWT or Authorization
value wherever it stands (server.telemetry.redact: here before the query is cut, in the recorder for every field)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.types import Scope

from server.access.tenancy import AccessScope
from server.access.tokens import Principal
from server.declare.interaction import Interaction
from server.telemetry.redact import MASK, redact

MAX_QUERY = 1000
SECRET_WORDS = ("token", "secret", "passw", "key", "authoriz", "bearer", "credential", "assertion", "jwt", "session",
                "cookie")
SERVED = "fhir_served"  # the key of the scope's state under which the FHIR pipeline leaves its Served


@dataclass(frozen=True)
class Served:
    """What the FHIR pipeline answered, for the record: the interaction asked (None: no such endpoint), the
    verified token (None: none was), the access scope applied (None: none was) and, for a searchset, how many
    matches it returned."""
    interaction: Interaction | None
    principal: Principal | None = None
    scope: AccessScope | None = None
    returned: int | None = None


def returned(body: Any) -> int | None:
    """The matches of a searchset or history Bundle (not its included resources nor outcomes)."""
    if isinstance(body, dict) and body.get("resourceType") == "Bundle":
        return sum(1 for e in body.get("entry", ()) if e.get("search", {}).get("mode", "match") == "match")
    return None


def _secret(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


def _query(raw: str) -> str | None:
    """The query with the values of parameters named like a credential masked, then every JWT and Authorization
    value (before it is cut: a JWT cut in two would no longer look like one)."""
    if not raw:
        return None
    pairs = parse_qsl(raw, keep_blank_values=True)
    if any(_secret(name) for name, _ in pairs):
        raw = urlencode([(name, MASK if _secret(name) else value) for name, value in pairs])
    return redact(raw)[:MAX_QUERY]


def audit_fields(scope: Scope, served: Served, request_id: str, status: int, seconds: float) -> dict[str, Any]:
    interaction, principal, applied = served.interaction, served.principal, served.scope
    client = scope.get("client")
    fields: dict[str, Any] = {
        "request_id": request_id,
        "method": scope["method"],
        "path": scope["path"].replace("?", "%3F").replace("#", "%23").replace("\\", "%5C"),
        "query": _query(scope.get("query_string", b"").decode("utf-8", "replace")),
        "client": client[0] if client else None,
        "subject": principal.subject if principal is not None else None,
        "account": applied.account if applied is not None else None,
        "roots": [str(r) for r in applied.roots] if applied is not None and applied.roots is not None else None,
        "smart_scopes": principal.scopes.names() if principal is not None and principal.scopes is not None else None,
        "interaction": interaction.kind if interaction else None,
        "resource_type": interaction.resource_type if interaction else None,
        "status": status,
        "duration_ms": round(seconds * 1000, 3),
    }
    if interaction is not None and interaction.operation:
        fields["operation"] = interaction.operation
    if interaction is not None and interaction.id is not None:
        fields["ids"] = [interaction.id]
    if served.returned is not None and status == 200:
        fields["returned"] = served.returned
    return {k: v for k, v in fields.items() if v is not None}
