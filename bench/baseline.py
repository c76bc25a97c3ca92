"""The physical ceiling: a bare Starlette app that answers each recorded request with the exact bytes
(status, content type, body) our server gave for it. Run by bench/run.py with the same uvicorn flags.

    python bench/baseline.py RECORDINGS.json PORT
"""
from __future__ import annotations

import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def build(recordings_path: str) -> Starlette:
    with open(recordings_path, encoding="utf-8") as fh:
        recorded = json.load(fh)
    answers = {key: (value["status"], value["content_type"], value["body"].encode("utf-8"))
               for key, value in recorded.items()}

    async def answer(request: Request) -> Response:
        key = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        status, content_type, body = answers.get(key, (404, "text/plain", b"not recorded"))
        return Response(body, status_code=status, media_type=content_type)

    return Starlette(routes=[Route("/{path:path}", answer, methods=["GET"])])


if __name__ == "__main__":
    uvicorn.run(build(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), loop="uvloop", http="httptools",
                log_level="warning", access_log=False)
