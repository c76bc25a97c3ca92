"""SMART on FHIR discovery, from the settings: the `.well-known/smart-configuration` document and the
CapabilityStatement's `rest.security` (the SMART-on-FHIR service and the `oauth-uris` extension). Both name only
the authorization server's public URLs; without auth.token_endpoint no authorization server is configured: no
discovery document, and `rest.security` names a plain OAuth bearer service."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from server.access.smart_scopes import scopes_supported
from server.settings import AuthSettings, Settings

SECURITY_SERVICE = "http://terminology.hl7.org/CodeSystem/restful-security-service"
OAUTH_URIS = "http://fhir-registry.smarthealthit.org/StructureDefinition/oauth-uris"
# discovery (RFC 8414) name -> oauth-uris sub-extension
OAUTH_URI_NAMES = {"token_endpoint": "token", "authorization_endpoint": "authorize",
                   "revocation_endpoint": "revoke", "introspection_endpoint": "introspect"}
ASYMMETRIC = "private_key_jwt"
SYMMETRIC = frozenset({"client_secret_basic", "client_secret_post"})


def configured(auth: AuthSettings) -> bool:
    """Whether an authorization server is configured (its token endpoint is known)."""
    return bool(auth.token_endpoint)


def capabilities(auth: AuthSettings) -> list[str]:
    found = []
    if ASYMMETRIC in auth.token_endpoint_auth_methods:
        found.append("client-confidential-asymmetric")
    if SYMMETRIC & set(auth.token_endpoint_auth_methods):
        found.append("client-confidential-symmetric")
    if auth.smart_scopes:
        found += ["permission-v1", "permission-v2"]
    return found


def smart_configuration(settings: Settings, resource_types: Iterable[str]) -> dict[str, Any] | None:
    """The discovery document (SMART App Launch 2, for Backend Services); None without an authorization server."""
    auth = settings.auth
    if not configured(auth):
        return None
    urls = auth.discovery_urls()
    document: dict[str, Any] = {}
    if auth.issuer:
        document["issuer"] = auth.issuer
    if "jwks_uri" in urls:
        document["jwks_uri"] = urls["jwks_uri"]
    if auth.authorization_endpoint:
        document["authorization_endpoint"] = auth.authorization_endpoint
    document["token_endpoint"] = auth.token_endpoint
    document["grant_types_supported"] = ["client_credentials"] + (
        ["authorization_code"] if auth.authorization_endpoint else [])
    document["token_endpoint_auth_methods_supported"] = list(auth.token_endpoint_auth_methods)
    if ASYMMETRIC in auth.token_endpoint_auth_methods:
        document["token_endpoint_auth_signing_alg_values_supported"] = list(auth.token_endpoint_auth_signing_algs)
    for name in ("revocation_endpoint", "introspection_endpoint"):
        if name in urls:
            document[name] = urls[name]
    document["scopes_supported"] = scopes_supported(resource_types, auth.permission) if auth.smart_scopes \
        else [auth.permission]
    if auth.authorization_endpoint:
        document["response_types_supported"] = ["code"]
    document["code_challenge_methods_supported"] = ["S256"]
    document["capabilities"] = capabilities(auth)
    return document


def _scope_text(auth: AuthSettings) -> str:
    if not auth.smart_scopes:
        return ""
    return (" SMART system scopes in the " + " or ".join(f"'{c}'" for c in auth.scope_claims) + " claim narrow a "
            "token per resource type and interaction: v1 system/Location.read, v2 system/Location.rs (r: read, vread, "
            "history, $export; s: search, other operations), system/*.rs for every type; a v2 scope with a query "
            "(system/Location.rs?partof:below=Location/12) grants its letters on that search's matches only, and one "
            "the server cannot apply as a filter refuses the token; so does a scope claim or scope the server cannot "
            "read (mis-cased, encoded, malformed), never ignored.")


def security(settings: Settings) -> dict[str, Any]:
    """CapabilityStatement.rest.security."""
    auth = settings.auth
    block: dict[str, Any] = {}
    if configured(auth):
        urls = auth.discovery_urls()
        block["extension"] = [{"url": OAUTH_URIS, "extension": [
            {"url": sub, "valueUri": urls[name]} for name, sub in OAUTH_URI_NAMES.items() if name in urls]}]
        service = {"coding": [{"system": SECURITY_SERVICE, "code": "SMART-on-FHIR", "display": "SMART-on-FHIR"}],
                   "text": "OAuth2 using the SMART-on-FHIR profile (Backend Services: client credentials); see "
                           "[base]/.well-known/smart-configuration"}
    else:
        service = {"coding": [{"system": SECURITY_SERVICE, "code": "OAuth", "display": "OAuth"}],
                   "text": "Bearer JWT"}
    block["cors"] = bool(settings.server.cors_origins)
    block["service"] = [service]
    block["description"] = (
        "Send 'Authorization: Bearer <JWT>'. The token must carry the permission "
        f"'{auth.permission}' in the '{auth.permission_claim}' claim or as a scope. Missing or invalid tokens get "
        "401, tokens without the permission (or the scope an interaction needs) 403 (a missing scope named in "
        "WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"...\")." + _scope_text(auth) +
        f" Every answer is limited to the account named by the '{auth.account_claim}' claim and to the subtrees whose "
        f"roots are listed in the '{auth.roots_claim}' claim, if any; ids outside them are answered as unknown ids "
        "(404).")
    return block
