"""One error hierarchy (a status and an issue code each) and the one OperationOutcome renderer."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Self


class ConfigError(Exception):
    """Bad settings or a misconfigured plugin: the server refuses to start."""


class FhirError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "exception"
    severity: ClassVar[str] = "error"

    def __init__(self, diagnostics: str, *, headers: dict[str, str] | None = None,
                 expression: str | None = None) -> None:
        super().__init__(diagnostics)
        self.diagnostics = diagnostics
        self.headers = headers or {}
        self.expression = expression

    def outcome(self) -> dict[str, Any]:
        return operation_outcome(self.severity, self.code, self.diagnostics, self.expression)


class InvalidRequest(FhirError):
    status, code = 400, "invalid"


class InvalidValue(InvalidRequest):
    code = "value"


class UnsupportedParameter(InvalidRequest):
    code = "not-supported"


class AuthenticationFailed(FhirError):
    status, code = 401, "login"


class Denial(str):
    """Why an interaction is refused (a 403's diagnostics), as text; `scope`: the SMART scope the token lacks, when
    that is why (server.access.smart_scopes). A Forbidden made of one carries the scope, and its answer names it in
    `WWW-Authenticate: Bearer error="insufficient_scope", scope=...` (RFC 6750, server.http.responses), which a
    client reads to ask its authorization server for that scope."""

    scope: str | None

    def __new__(cls, text: str, scope: str | None = None) -> Self:
        made = super().__new__(cls, text)
        made.scope = scope
        return made

    @staticmethod
    def joined(reasons: Sequence[str]) -> Denial:
        """Several reasons as one (the `authorize` hook's): the first scope one of them names."""
        return Denial("; ".join(reasons), next((r.scope for r in reasons if isinstance(r, Denial) and r.scope), None))


class Forbidden(FhirError):
    """403. Made of a Denial naming a SMART scope, it is a scope error (`scope`: what the token lacks)."""

    status, code = 403, "forbidden"

    def __init__(self, diagnostics: str, *, headers: dict[str, str] | None = None,
                 expression: str | None = None) -> None:
        super().__init__(str(diagnostics), headers=headers, expression=expression)
        self.scope = diagnostics.scope if isinstance(diagnostics, Denial) else None


class ResourceNotFound(FhirError):
    status, code = 404, "not-found"


class ResourceGone(FhirError):
    status, code = 410, "deleted"


class AmbiguousLookup(FhirError):
    """A look-up meant to name one resource (server.declare.lookup.Lookup.one) matches several."""

    status, code = 412, "multiple-matches"


class ResourceTypeNotSupported(FhirError):
    status, code = 404, "not-supported"


class MethodNotAllowed(FhirError):
    status, code = 405, "not-supported"


class NotAcceptable(FhirError):
    status, code = 406, "not-supported"


class UriTooLong(FhirError):
    status, code = 414, "too-long"


class RangeNotSatisfiable(FhirError):
    status, code = 416, "value"


class TooManyRequests(FhirError):
    status, code = 429, "throttled"


class InternalError(FhirError):
    status, code = 500, "exception"


class ServiceUnavailable(FhirError):
    status, code = 503, "transient"


class TooCostly(ServiceUnavailable):
    """The database gave up on the query (statement timeout): a narrower search may succeed."""

    code = "too-costly"


class StorageError(Exception):
    """A database failure as the storage layer names it (server.storage.backend translates the driver's and
    SQLAlchemy's errors into these); what each answers over HTTP is decided in one place
    (server.defaults.translate_exception). This base: the database refused the statement (a privilege, a
    constraint, a bug)."""

    def __init__(self, message: str, *, repeatable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.repeatable = repeatable  # the connection was dropped: a read may run once more on a new one


class StorageUnavailable(StorageError):
    """The database cannot be reached, went silent, dropped the connection or has no connection free in time."""


class StorageFull(StorageUnavailable):
    """The disk (or the quota) holding the database is full: a write cannot go on until space is freed."""


class StorageBusy(StorageUnavailable):
    """Another writer held the database's write lock past the wait (SQLite's busy timeout, PostgreSQL's
    lock_timeout): the statement never ran."""


class SchemaMissing(StorageError):
    """The database lacks a table or column this server reads: its schema is behind (a plugin enabled, a release
    installed, and `orgunit-fhir migrate` not run)."""


class StatementTimedOut(StorageError):
    """The database gave up on a statement (its statement timeout): a narrower one may succeed."""


def operation_outcome(severity: str, code: str, diagnostics: str, expression: str | None = None) -> dict[str, Any]:
    issue: dict[str, Any] = {"severity": severity, "code": code, "diagnostics": diagnostics}
    if expression:
        issue["expression"] = [expression]
    return {"resourceType": "OperationOutcome", "issue": [issue]}


class LoadError(Exception):
    """Input that cannot be written as given; the message names the offending record (and line, for files).
    Commands end with it as one line on stderr and exit status 1."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AfterCommit(Exception):
    """A failure once a command's changes were committed (a step afterwards: planner statistics, pre-rendering,
    printing the report; a full disk, a broken pipe, Ctrl-C): the changes stay and are served; the message says what
    was committed and what to run. Exit status `EXIT_STATUS`, never the 1 of a command that changed nothing, nor the
    130 of an interrupt that rolled everything back."""

    EXIT_STATUS = 3

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InterruptedAfterCommit(AfterCommit):
    """Ctrl-C once a command's changes were committed."""
