"""The XML render process (server.http.apart): run as a script, it imports server/http/xml.py by its path and
fhir.resources, never the `server` package (a third of the memory). Each request on stdin: a 4-byte length, one
byte (1: pretty), the FHIR JSON; each answer on stdout: a 4-byte length, one byte (0: XML, 1: an error's message),
the bytes."""
from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import orjson

_spec = importlib.util.spec_from_file_location("orgunit_fhir_xml", Path(__file__).with_name("xml.py"))
assert _spec is not None and _spec.loader is not None
_xml = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_xml)


def _read(stream: object, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))  # type: ignore[attr-defined]
        if not chunk:
            raise SystemExit(0)  # the server closed the pipe: done
        data += chunk
    return data


def main() -> None:
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        size, pretty = struct.unpack(">IB", _read(source, 5))
        body = _read(source, size)
        try:
            answer, kind = _xml.to_xml(orjson.loads(body), bool(pretty)), 0
        except Exception as exc:  # noqa: BLE001 - told to the server, which answers 500
            answer, kind = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[:4000], 1
        sink.write(struct.pack(">IB", len(answer), kind) + answer)
        sink.flush()


if __name__ == "__main__":
    main()
