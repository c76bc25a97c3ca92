"""The ceiling: a bare Starlette app (uvicorn, uvloop, httptools, like ours) that answers every target of the
benchmark with bytes our server gave for a target of the same kind (status, content type, body), found by one
dict lookup. Run by bench/run.py.

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

NOT_RECORDED = (404, "text/plain", b"not recorded")


def build(recordings_path: str) -> Starlette:
    with open(recordings_path, encoding="utf-8") as fh:
        recorded = json.load(fh)
    samples = {name: [(s["status"], s["content_type"], s["body"].encode("utf-8")) for s in kept]
               for name, kept in recorded["samples"].items()}
    answers = {path: samples[name][index] for path, (name, index) in recorded["answers"].items()}

    async def answer(request: Request) -> Response:
        query = request.scope["query_string"].decode("latin-1")
        key = request.scope["raw_path"].decode("latin-1") + (f"?{query}" if query else "")
        status, content_type, body = answers.get(key, NOT_RECORDED)
        return Response(body, status_code=status, media_type=content_type)

    return Starlette(routes=[Route("/{path:path}", answer, methods=["GET"])])


if __name__ == "__main__":
    uvicorn.run(build(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), loop="uvloop", http="httptools",
                log_level="warning", access_log=False)
