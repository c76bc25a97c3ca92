"""Which endpoint answers a path under the mount (server.http.routes.resolve): found from the path's segments,
first match as the former list of Starlette patterns decided it, each path with and without one trailing slash."""
from __future__ import annotations

import pytest
from starlette._utils import get_route_path

from server.http.routes import (
    base,
    history_instance,
    history_type,
    metadata,
    operation,
    read,
    resolve,
    route_path,
    search,
    smart_configuration,
    system_operation,
    vread,
)

CASES = [
    # (id, path after the mount, endpoint, segments it takes)
    ("base", "", base, ()),
    ("base-slash", "/", base, ()),
    ("metadata", "/metadata", metadata, ()),
    ("type-metadata", "/Location/metadata", metadata, ("Location",)),
    ("unknown-type-metadata", "/location/metadata", metadata, ("location",)),
    ("search", "/Location", search, ("Location",)),
    ("search-any-name", "/location", search, ("location",)),
    ("read", "/Location/42", read, ("Location", "42")),
    ("read-odd-id", "/Location/a_b", read, ("Location", "a_b")),
    ("read-any-type", "/location/42", read, ("location", "42")),
    ("history-type", "/Location/_history", history_type, ("Location", "_history")),
    ("type-operation", "/Location/$validate", operation, ("Location", "validate")),
    ("instance-operation", "/Location/42/$children", operation, ("Location", "42", "$children")),
    ("instance-operation-bare", "/Location/42/children", operation, ("Location", "42", "children")),
    ("metadata-is-no-id", "/Location/metadata/$x", operation, ("Location", "metadata", "$x")),
    ("history-instance", "/Location/42/_history", history_instance, ("Location", "42", "_history")),
    ("vread", "/Location/42/_history/3", vread, ("Location", "42", "_history", "3")),
    ("system-operation", "/$export", system_operation, ("$export",)),
    ("system-operation-segments", "/$export/job/file.ndjson", system_operation, ("$export", "job", "file.ndjson")),
    ("system-operation-empty-segment", "/$export/a//b", system_operation, ("$export", "a", "", "b")),
    ("system-operation-history", "/$export/_history", system_operation, ("$export", "_history")),
    ("system-operation-metadata", "/$export/metadata", metadata, ("$export",)),
    ("capital-dollar-is-a-type", "/$Export", search, ("$Export",)),
    ("smart-under-mount", "/.well-known/smart-configuration", smart_configuration, ()),
]
NONE = [
    ("empty-segment", "/Location//42"),
    ("double-slash", "/Location//"),
    ("five-segments", "/Location/42/_history/3/x"),
    ("four-not-history", "/Location/42/x/3"),
    ("no-slash-after-mount", "x/Location"),
]


@pytest.mark.parametrize(("path", "endpoint", "segments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_endpoint_of_each_path(path: str, endpoint: object, segments: tuple[str, ...]) -> None:
    assert resolve(path) == (endpoint, segments)
    if path not in ("", "/") and not path.endswith("/"):
        found = resolve(path + "/")
        assert found is not None and found[0] is endpoint  # and with one trailing slash


@pytest.mark.parametrize("path", [c[1] for c in NONE], ids=[c[0] for c in NONE])
def test_no_endpoint(path: str) -> None:
    assert resolve(path) is None


@pytest.mark.parametrize("path, root, matched", [
    pytest.param("/fhir/Location", "", "/fhir/Location", id="no-root"),
    pytest.param("/api/fhir/Location", "/api", "/fhir/Location", id="under-the-root"),
    pytest.param("/api", "/api", "", id="the-root-itself"),
    pytest.param("/api/", "/api", "/", id="the-root-and-a-slash"),
    pytest.param("/apiary/fhir", "/api", "/apiary/fhir", id="a-longer-name-is-not-under-it"),
    pytest.param("/fhir/Location", "/api", "/fhir/Location", id="a-server-leaving-the-root-out"),
])
def test_the_path_the_routes_match(path: str, root: str, matched: str) -> None:
    """Without the app's root_path, as Starlette's other routes (the probes, the pages) read it."""
    scope = {"type": "http", "path": path, "root_path": root}
    assert route_path(scope) == matched == get_route_path(scope)  # type: ignore[arg-type]
