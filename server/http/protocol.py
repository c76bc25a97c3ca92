"""The HTTP/1.1 protocol `serve` runs: uvicorn's httptools protocol, made to answer as a FHIR server where the parser
would answer by itself.

- Raw non-ASCII bytes in a request line (`GET /fhir/Location?name=Dédougou`, as curl sends what it is given) are
  refused by the parser (llhttp accepts only ASCII in a target). They are percent-encoded before it sees them, so
  the target reads as the UTF-8 text it is, and the request is served.
- Any request the parser still refuses gets an OperationOutcome (application/fhir+json), not uvicorn's plain
  text: 414 `too-long` for a target too long for it (about 64 KB), else 400 `invalid`.

Under another server: `uvicorn --factory server.http.asgi:create --http server.http.protocol:FhirHttpToolsProtocol`.
"""
from __future__ import annotations

import re
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from server.errors import operation_outcome

_HIGH = re.compile(rb"[\x80-\xff]")
_LEADING = b"\r\n"
LONG_TARGET = 8192  # a target the parser refused after this many bytes is too long (414), not malformed


def encode_request_line(data: bytes) -> tuple[bytes, bool]:
    """`data` with the non-ASCII bytes of its first line percent-encoded, and whether that line is complete."""
    start = len(data) - len(data.lstrip(_LEADING))
    end = data.find(b"\n", start)
    line = data[start:] if end < 0 else data[start:end]
    if _HIGH.search(line):
        line = _HIGH.sub(lambda m: b"%%%02X" % m.group()[0], line)
        data = data[:start] + line + (b"" if end < 0 else data[end:])
    return data, end >= 0


class FhirHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with UTF-8 request targets and FHIR answers to what the parser refuses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_line = True  # the next bytes start a request line

    def data_received(self, data: bytes) -> None:
        if self._request_line:
            data, complete = encode_request_line(data)
            self._request_line = not complete
        super().data_received(data)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._request_line = True  # a request pipelined in the same bytes was already fed: the parser answers it

    def send_400_response(self, msg: str) -> None:
        target = len(getattr(self, "url", b""))  # what the parser had read of the target
        status, code, diagnostics = (414, "too-long", f"the request target is too long ({target:,} bytes)") \
            if target > LONG_TARGET else \
            (400, "invalid", "the HTTP request could not be parsed (a malformed request line or header); "
                             "percent-encode the request target")
        body = orjson.dumps(operation_outcome("error", code, diagnostics))
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend([b"content-type: application/fhir+json\r\n",
                     b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                     b"connection: close\r\n\r\n", body])
        self.transport.write(b"".join(head))
        self.transport.close()
