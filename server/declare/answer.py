"""A plain answer an operation may give instead of a FHIR resource, rendered by the HTTP layer: a status, its
headers, and a JSON body, a file (a part of it, when the request's `Range` asks), a body streamed as it is made (an
export) or nothing (Bulk Data's 202s, its manifest and its NDJSON files)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Sequence

# answers depend on the caller's token (its account and subtree): no shared cache may serve them to another
PRIVATE: Mapping[str, str] = {"Cache-Control": "private", "Vary": "Accept, Authorization"}
# ...and those that change with each poll (a job's status, its files) are stored by no cache at all
PRIVATE_NO_STORE: Mapping[str, str] = {**PRIVATE, "Cache-Control": "private, no-store"}


@dataclass(frozen=True)
class FileBody:
    """A file to send: `served_range` is the request's `Range` as decided (None: the whole file)."""

    path: Path
    media_type: str
    served_range: str | None = None


@dataclass(frozen=True)
class Answer:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    json: Mapping[str, Any] | None = None  # a JSON body (application/json), else
    file: FileBody | None = None  # a file, else
    # a body sent chunk by chunk as it is made (its Content-Type in `headers`), else no body. An operation's handler
    # returns it unstarted: the engine keeps the call's read-only connection open until the stream ends (or the client
    # goes away), iterating it in worker threads (each chunk read with call.connection, one snapshot on PostgreSQL);
    # it is closed (`close()`) whether read or not (HEAD). A failure past the first chunk cuts the body short: the
    # client sees a truncated transfer, never a complete-looking one.
    stream: Iterator[bytes] | None = None



@dataclass(frozen=True)
class Page:
    """One page of a paged operation's matches (OperationCall.count and .skip): the engine makes the searchset
    Bundle of it, with its self/first/previous/next/last links. `has_next` None: known from the total."""

    resources: Sequence[Mapping[str, Any]]
    total: int | None = None
    has_next: bool | None = None
