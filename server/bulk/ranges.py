"""`Range` on a file (RFC 9110 section 14), decided here once: a unit other than `bytes` is ignored (the whole
file, 200); a malformed bytes range is 400; a set of ranges none of which is satisfiable (or more than
MAX_RANGES) is 416 with `Content-Range: bytes */<size>`; else the satisfiable ranges, each clamped to the file,
as the `Range` the file response then serves (206)."""
from __future__ import annotations

import re

from server import InvalidRequest, RangeNotSatisfiable

MAX_RANGES = 16
_SPEC = re.compile(r"(\d*)-(\d*)")


def byte_ranges(header: str | None, size: int) -> str | None:
    """The `Range` to serve (`bytes=a-b,...`, inclusive and within the file), or None to serve the whole file."""
    if header is None:
        return None
    unit, equals, specs = header.partition("=")
    if not equals or unit.strip().lower() != "bytes":
        return None  # an unknown unit (or none): ignored
    parts = [part.strip() for part in specs.split(",")]
    if len(parts) > MAX_RANGES:
        raise _unsatisfiable(size, f"more than {MAX_RANGES} ranges")
    served: list[str] = []
    for part in parts:
        match = _SPEC.fullmatch(part)
        if match is None or not (match[1] or match[2]) or (match[1] and match[2] and int(match[2]) < int(match[1])):
            raise InvalidRequest(f"the Range header {header[:100]!r} is not a valid bytes range (first-last, first- "
                                 "or -suffix, with last at least first)", expression="Range")
        first, last = match[1], match[2]
        if not first:  # the last N bytes
            start, end = max(size - int(last), 0), size - 1
            if int(last) == 0:
                continue
        else:
            start, end = int(first), min(int(last), size - 1) if last else size - 1
        if start < size:
            served.append(f"{start}-{end}")
    if not served:
        raise _unsatisfiable(size, "no range of it starts within the file")
    return "bytes=" + ",".join(served)


def _unsatisfiable(size: int, why: str) -> RangeNotSatisfiable:
    return RangeNotSatisfiable(f"the Range cannot be served: {why} ({size:,} bytes)",
                               headers={"Content-Range": f"bytes */{size}"})
