"""orgunit-fhir: a read-only FHIR R4 engine.

This module is the whole public surface for plugins: a plugin imports from `server` and from nothing below it
(a test checks that). Everything here is a declaration, a hook marker, an error or a small helper; the engine
does the rest (parsing, SQL, paging, bundles, errors, capabilities, access control).

Each name is loaded from the module defining it at its first use (PEP 562): `import server`, `import server.errors`
or a declaration module load no engine, storage or cli module until a name of theirs is asked for (the layout test
holds the figure). `_SURFACE` is the one list of the names; the imports under TYPE_CHECKING restate it for type
checkers, and a test holds the two equal. A name whose SQL compiles differently per database comes from
server.storage (`text_index_expression` through server.storage.dialects): whoever uses it gets every database's
rendering registered, as an index declared with it must."""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# every public name: the module defining it (`module:attribute` where the name differs)
_SURFACE: dict[str, str] = {
    "AccessScope": "server.access.tenancy",
    "Principal": "server.access.tokens",
    "add_common_options": "server.cli.common:add_common",
    "Answer": "server.declare.answer",
    "FileBody": "server.declare.answer",
    "Page": "server.declare.answer",
    "PRIVATE_NO_STORE": "server.declare.answer",
    "PLUGIN_API": "server.declare.api",
    "Command": "server.declare.extensions",
    "DemoData": "server.declare.extensions",
    "LoadCall": "server.declare.extensions",
    "LoadFormat": "server.declare.extensions",
    "LoadReport": "server.declare.extensions",
    "as_utc": "server.declare.instants",
    "http_date": "server.declare.instants",
    "instant": "server.declare.instants",
    "Interaction": "server.declare.interaction",
    "Lookup": "server.declare.lookup",
    "Progress": "server.declare.progress",
    "Operation": "server.declare.provider",
    "OperationCall": "server.declare.provider",
    "Prerendered": "server.declare.provider",
    "CurrentBodies": "server.declare.provider",
    "ResourceProvider": "server.declare.provider",
    "StaticProvider": "server.declare.provider",
    "Subtree": "server.declare.provider",
    "Tenancy": "server.declare.provider",
    "VersionScope": "server.declare.provider",
    "Versioning": "server.declare.provider",
    "Via": "server.declare.provider",
    "software_version": "server.engine.capabilities",
    "AmbiguousLookup": "server.errors",
    "ConfigError": "server.errors",
    "FhirError": "server.errors",
    "Forbidden": "server.errors",
    "InternalError": "server.errors",
    "InvalidRequest": "server.errors",
    "InvalidValue": "server.errors",
    "LoadError": "server.errors",
    "RangeNotSatisfiable": "server.errors",
    "ResourceNotFound": "server.errors",
    "ServiceUnavailable": "server.errors",
    "TooManyRequests": "server.errors",
    "UnsupportedParameter": "server.errors",
    "hookimpl": "server.hookspecs",
    "WebAssets": "server.html.web",
    "WebPage": "server.html.web",
    "SearchParam": "server.params.param",
    "path_below": "server.params.paths",
    "path_of": "server.params.paths",
    "path_subtree": "server.params.paths:subtree",
    "composed": "server.params.text",
    "normalize": "server.params.text",
    "Through": "server.params.types.base",
    "text_index_expression": "server.storage.dialects",  # (defined in params) with the databases' renderings of it
    "DateTarget": "server.params.types.date",
    "NearTarget": "server.params.types.near",
    "ReferenceTarget": "server.params.types.reference",
    "StringTarget": "server.params.types.string",
    "TokenTarget": "server.params.types.token",
    "Settings": "server.settings",
    "refresh_statistics": "server.storage.backend",
    "reuses_deleted_ids": "server.storage.backend",
    "reading_engine": "server.storage.db",
    "writing_engine": "server.storage.db",
    "code_point_string": "server.storage.dialects",
    "Migrations": "server.storage.migrate",
    "begin_writing": "server.storage.writes",
}

__all__ = sorted(_SURFACE)


def __getattr__(name: str) -> Any:
    """A public name, from the module defining it (imported then, once: Python keeps it)."""
    target = _SURFACE.get(name)
    if target is None:
        raise AttributeError(f"module 'server' has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    return getattr(import_module(module), attribute or name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from server.access.tenancy import AccessScope
    from server.access.tokens import Principal
    from server.cli.common import add_common as add_common_options
    from server.declare.answer import Answer
    from server.declare.answer import FileBody
    from server.declare.answer import Page
    from server.declare.answer import PRIVATE_NO_STORE
    from server.declare.api import PLUGIN_API
    from server.declare.extensions import Command
    from server.declare.extensions import DemoData
    from server.declare.extensions import LoadCall
    from server.declare.extensions import LoadFormat
    from server.declare.extensions import LoadReport
    from server.declare.instants import as_utc
    from server.declare.instants import http_date
    from server.declare.instants import instant
    from server.declare.interaction import Interaction
    from server.declare.lookup import Lookup
    from server.declare.progress import Progress
    from server.declare.provider import Operation
    from server.declare.provider import OperationCall
    from server.declare.provider import CurrentBodies
    from server.declare.provider import Prerendered
    from server.declare.provider import ResourceProvider
    from server.declare.provider import StaticProvider
    from server.declare.provider import Subtree
    from server.declare.provider import Tenancy
    from server.declare.provider import VersionScope
    from server.declare.provider import Versioning
    from server.declare.provider import Via
    from server.engine.capabilities import software_version
    from server.errors import AmbiguousLookup
    from server.errors import ConfigError
    from server.errors import FhirError
    from server.errors import Forbidden
    from server.errors import InternalError
    from server.errors import InvalidRequest
    from server.errors import InvalidValue
    from server.errors import LoadError
    from server.errors import RangeNotSatisfiable
    from server.errors import ResourceNotFound
    from server.errors import ServiceUnavailable
    from server.errors import TooManyRequests
    from server.errors import UnsupportedParameter
    from server.hookspecs import hookimpl
    from server.html.web import WebAssets
    from server.html.web import WebPage
    from server.params.param import SearchParam
    from server.params.paths import path_below
    from server.params.paths import path_of
    from server.params.paths import subtree as path_subtree
    from server.params.text import composed
    from server.params.text import normalize
    from server.params.types.base import Through
    from server.storage.dialects import text_index_expression
    from server.params.types.date import DateTarget
    from server.params.types.near import NearTarget
    from server.params.types.reference import ReferenceTarget
    from server.params.types.string import StringTarget
    from server.params.types.token import TokenTarget
    from server.settings import Settings
    from server.storage.backend import refresh_statistics
    from server.storage.backend import reuses_deleted_ids
    from server.storage.db import reading_engine
    from server.storage.db import writing_engine
    from server.storage.dialects import code_point_string
    from server.storage.migrate import Migrations
    from server.storage.writes import begin_writing
