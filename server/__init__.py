"""orgunit-fhir: a read-only FHIR R4 engine.

This module is the whole public surface for plugins: a plugin imports from `server` and from nothing below it
(a test checks that). Everything here is a declaration, a hook marker, an error or a small helper; the engine
does the rest (parsing, SQL, paging, bundles, errors, capabilities, access control)."""
from server.access.tenancy import AccessScope
from server.access.tokens import Principal
from server.cli.common import add_common as add_common_options
from server.declare.answer import Answer, FileBody, Page
from server.declare.extensions import Command, DemoData, LoadCall, LoadFormat, LoadReport
from server.declare.lookup import Lookup
from server.engine.capabilities import software_version
from server.declare.instants import as_utc, instant
from server.declare.interaction import Interaction
from server.declare.provider import (
    Operation,
    OperationCall,
    Prerendered,
    ResourceProvider,
    StaticProvider,
    Subtree,
    Tenancy,
    VersionScope,
    Versioning,
    Via,
)
from server.params.text import composed, normalize
from server.errors import (
    AmbiguousLookup,
    ConfigError,
    FhirError,
    Forbidden,
    InvalidRequest,
    InvalidValue,
    LoadError,
    ResourceNotFound,
    ServiceUnavailable,
)
from server.hookspecs import hookimpl
from server.html.web import WebAssets, WebPage
from server.declare.progress import Progress
from server.params.param import SearchParam
from server.params.paths import path_below, path_of
from server.params.paths import subtree as path_subtree
from server.params.types.base import Through, text_index_expression
from server.params.types.date import DateTarget
from server.params.types.near import NearTarget
from server.params.types.reference import ReferenceTarget
from server.params.types.string import StringTarget
from server.params.types.token import TokenTarget
from server.settings import Settings
from server.storage.backend import refresh_statistics, reuses_deleted_ids
from server.storage.db import reading_engine, writing_engine
from server.storage.dialects import code_point_string
from server.storage.migrate import Migrations
from server.storage.writes import begin_writing
from server.declare.api import PLUGIN_API

__all__ = [
    "PLUGIN_API", "AccessScope", "AmbiguousLookup", "Answer", "Command", "ConfigError", "DateTarget", "DemoData", "FhirError", "FileBody",
    "Forbidden", "Interaction",
    "InvalidRequest", "InvalidValue", "LoadCall", "LoadError", "LoadFormat", "LoadReport", "Lookup", "Migrations", "NearTarget",
    "Operation", "OperationCall", "Page", "Prerendered", "Principal", "Progress", "ReferenceTarget", "ResourceNotFound",
    "ResourceProvider",
    "SearchParam", "ServiceUnavailable", "Settings", "StaticProvider", "StringTarget", "Subtree", "Tenancy",
    "Through", "TokenTarget", "VersionScope", "Versioning", "Via", "WebAssets", "WebPage", "add_common_options", "as_utc",
    "begin_writing", "hookimpl", "instant",
    "composed", "normalize", "path_below", "path_of", "path_subtree", "software_version", "reading_engine", "writing_engine",
    "text_index_expression", "code_point_string", "refresh_statistics", "reuses_deleted_ids",
]
