"""Where each request of a connection's bytes ends, found before the HTTP parser sees them (logic, no I/O).

The protocol (server.http.protocol) hands the parser one whole request at a time, so it can bound what a connection
holds: a request line longer than `max_line` is refused (414); header fields, a body and chunked trailers longer than
`max_fields` in all are refused (431) before they are read further. The parser stays the judge of what is valid: the
framer reads only the request line's end, the blank line ending the header fields, `Content-Length`,
`Transfer-Encoding: chunked`, chunk sizes and trailers, enough to find where a request ends. A request the framer
cannot frame (a malformed length or chunk size) is handed to the parser as it is, which refuses it (400).

Counted against `max_fields`: each header field line with its CRLF, the body, and for a chunked body its chunk-size
lines, chunk data, CRLFs and trailer lines; not the blank lines that end the header fields and the trailers.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    MORE = "more"            # the request is not complete yet: keep the bytes, read on
    COMPLETE = "complete"    # the request ends at `Frame.end`
    LINE_TOO_LONG = "414"
    FIELDS_TOO_LONG = "431"


@dataclass(frozen=True)
class Frame:
    verdict: Verdict
    end: int = 0  # COMPLETE: the request is buffer[:end]


_MORE = Frame(Verdict.MORE)
_LINE = Frame(Verdict.LINE_TOO_LONG)
_FIELDS = Frame(Verdict.FIELDS_TOO_LONG)
_CONTENT_LENGTH = b"content-length:"
_TRANSFER_ENCODING = b"transfer-encoding:"


class _Part(Enum):
    LINE = 1
    FIELDS = 2
    BODY = 3
    CHUNK_SIZE = 4
    CHUNK_DATA = 5
    TRAILERS = 6


class Framer:
    """Frames one request after another from the start of a buffer the caller keeps (bytes it has not handed on).

    `frame(buffer)` resumes where the previous call stopped, so a request sent a byte at a time is scanned once;
    after COMPLETE the caller removes `buffer[:end]` and calls `frame` again for the next request."""

    def __init__(self, max_line: int, max_fields: int) -> None:
        self.max_line, self.max_fields = max_line, max_fields
        self._reset()

    def _reset(self) -> None:
        self._part = _Part.LINE
        self._pos = 0          # where scanning resumes
        self._start = 0        # where the request line starts (after blank lines before it)
        self._fields_from = 0  # where what counts against max_fields starts
        self._body = 0         # Content-Length
        self._chunked = False
        self._data_end = 0     # CHUNK_DATA: where the chunk's data and its CRLF end
        self._seen = 0         # a partial line was searched up to here

    def frame(self, buf: bytes | bytearray) -> Frame:
        while True:
            part = self._part
            if part is _Part.LINE:
                while buf[self._start:self._start + 2] == b"\r\n" or buf[self._start:self._start + 1] == b"\n":
                    self._start += 2 if buf[self._start:self._start + 1] == b"\r" else 1
                    if self._start > self.max_line:  # blank lines without end count as the request line
                        return _LINE
                self._pos = max(self._pos, self._start)
                nl = buf.find(b"\n", self._pos)
                line = (len(buf) if nl < 0 else nl) - self._start
                if nl > 0 and buf[nl - 1:nl] == b"\r":
                    line -= 1
                if line > self.max_line:
                    return _LINE
                if nl < 0:
                    self._pos = len(buf)
                    return _MORE
                self._part, self._pos = _Part.FIELDS, nl + 1
                self._fields_from = nl + 1
                continue
            if self._pos - self._fields_from > self.max_fields:
                return _FIELDS
            if part is _Part.FIELDS or part is _Part.TRAILERS:
                nl = self._find_line_end(buf)
                if nl < 0:
                    return _FIELDS if len(buf) - self._fields_from > self.max_fields else _MORE
                line = bytes(buf[self._pos:nl]).rstrip(b"\r")
                if line:
                    if part is _Part.FIELDS:
                        self._field(line)
                    self._pos = nl + 1
                    continue
                if self._pos - self._fields_from > self.max_fields:
                    return _FIELDS
                if part is _Part.TRAILERS:
                    return self._complete(nl + 1)
                self._fields_from -= nl + 1 - self._pos  # the blank line does not count
                self._pos = nl + 1
                if self._chunked:
                    self._part = _Part.CHUNK_SIZE
                elif self._body:
                    self._part = _Part.BODY
                else:
                    return self._complete(self._pos)
                continue
            if part is _Part.BODY:
                end = self._pos + self._body
                if end - self._fields_from > self.max_fields:
                    return _FIELDS
                return self._complete(end) if len(buf) >= end else _MORE
            if part is _Part.CHUNK_SIZE:
                nl = self._find_line_end(buf)
                if nl < 0:
                    return _FIELDS if len(buf) - self._fields_from > self.max_fields else _MORE
                text = bytes(buf[self._pos:nl]).split(b";", 1)[0].strip()
                try:
                    size = int(text, 16)
                except ValueError:
                    return self._complete(nl + 1)  # the parser refuses it
                self._pos = nl + 1
                if size == 0:
                    self._part = _Part.TRAILERS
                    continue
                self._data_end = self._pos + size + 2
                self._part = _Part.CHUNK_DATA
                continue
            # CHUNK_DATA
            if self._data_end - self._fields_from > self.max_fields:
                return _FIELDS
            if len(buf) < self._data_end:
                return _MORE
            self._pos, self._part = self._data_end, _Part.CHUNK_SIZE

    def _find_line_end(self, buf: bytes | bytearray) -> int:
        """The end of the line at `_pos` (its b"\\n"), or -1; a partial line is not searched twice."""
        nl = buf.find(b"\n", max(self._pos, self._seen))
        self._seen = len(buf) if nl < 0 else 0
        return nl

    def _field(self, line: bytes) -> None:
        name = line[:18].lower()
        if name.startswith(_CONTENT_LENGTH):
            value = line[len(_CONTENT_LENGTH):].strip()
            self._body = int(value) if value.isdigit() and len(value) < 19 else 0  # else the parser refuses it
        elif name.startswith(_TRANSFER_ENCODING):
            self._chunked = self._chunked or b"chunked" in line[len(_TRANSFER_ENCODING):].lower()

    def _complete(self, end: int) -> Frame:
        self._reset()
        return Frame(Verdict.COMPLETE, end)
