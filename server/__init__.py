"""orgunit-fhir: a read-only FHIR R4 engine. The public plugin API is re-exported here."""
from server.errors import (
    ConfigError,
    FhirError,
    Forbidden,
    InvalidRequest,
    InvalidValue,
    ResourceNotFound,
    ServiceUnavailable,
)
from server.hookspecs import hookimpl
from server.provider import (
    Operation,
    ReferenceTarget,
    ResourceProvider,
    SearchParam,
    StringTarget,
    Tenancy,
    Through,
    TokenTarget,
)

__all__ = [
    "ConfigError", "FhirError", "Forbidden", "InvalidRequest", "InvalidValue", "Operation", "ReferenceTarget",
    "ResourceNotFound", "ResourceProvider", "SearchParam", "ServiceUnavailable", "StringTarget", "Tenancy", "Through",
    "TokenTarget", "hookimpl",
]
