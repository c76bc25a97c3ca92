"""GET [base]/.well-known/smart-configuration (and at the server root): SMART discovery, public (no token: it names
only the authorization server's public URLs); 404 when no authorization server is configured."""
from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from server.access.smart import smart_configuration
from server.errors import ResourceNotFound

HEADERS = {"Cache-Control": "public, max-age=3600"}


async def smart_configuration_endpoint(request: Request) -> Response:
    state = request.app.state
    if not hasattr(state, "smart_configuration"):  # the settings and providers of an app do not change: once
        ctx = state.ctx
        document = smart_configuration(ctx.settings, ctx.registry.providers)
        state.smart_configuration = orjson.dumps(document) if document is not None else None
    if state.smart_configuration is None:
        return request.app.state.pipeline.unserved(request.scope, ResourceNotFound(
            "no authorization server is configured (auth.token_endpoint): this server publishes no SMART "
            "configuration"))
    return Response(state.smart_configuration, media_type="application/json", headers=HEADERS)
