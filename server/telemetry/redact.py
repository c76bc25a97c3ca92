"""Credentials never written to a log line: `redact` masks, wherever they stand in a text, every JWT-shaped value
(three or more base64url segments separated by dots whose first decodes to a JSON object: a JWS, a JWE), also when
it is percent-encoded (to any depth), and the credentials of an Authorization value (`Bearer ...`, `DPoP ...`, `Basic`
and its user:password). The access and audit lines (server.telemetry.records) and every other line
(server.telemetry.logs) pass through it."""
from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import unquote

MASK = "***"
# Every pattern below is one character class or a fixed-length pattern, and what is split is split in Python: the
# work is linear in the text, whatever a request sends (a run of 8,000 `C`s or `=`s took a second and more when a
# pattern could backtrack over it).
# a run of base64url characters, dots, percent-escapes and `=` (a JWT, encoded or not, stands in one); it is then
# cut at each `=` that is no padding before a dot (`name=<token>`: the name stays, `hdr=.payload.sig` is one piece,
# which a reader turns back into the token)
_RUN = re.compile(r"[A-Za-z0-9_.%=-]+")
_RUN_LENGTH = 8
_EQUALS = re.compile(r"=+")
# base64url characters, padding and dots: a JWT's segments, decoded, stand in one such run
_DOTTED = re.compile(r"[A-Za-z0-9_=.-]+")
# where base64url of `{` may start, or of the white space JSON allows before it (tab, line feed: C; carriage
# return: D; space: I)
_OBJECT_START = re.compile(r"e[w-z0-9_-]|[CDI]")
# an Authorization value: the scheme, its separator (raw, `+` or percent-encoded in a query) and the credentials
_SCHEME = re.compile(r"(?i)(?<![A-Za-z0-9])(bearer|dpop|basic)((?:\s|\+|%20|%09)+)([A-Za-z0-9._~+/=%-]+)")


def _decoded(text: str) -> str:
    for _ in range(8):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def _header(segment: str) -> bool:
    """Whether a base64url segment decodes to the start of a JSON object (`{"` or `{}`, white space allowed)."""
    head = segment[:64].rstrip("=")
    head = head[:-1] if len(head) % 4 == 1 else head + "=" * (-len(head) % 4)
    try:
        raw = base64.urlsafe_b64decode(head)
    except (binascii.Error, ValueError):
        return False
    start = raw.lstrip(b" \t\r\n")
    return start[:1] == b"{" and start[1:].lstrip(b" \t\r\n")[:1] in (b'"', b"}")


def holds_jwt(text: str) -> bool:
    """Whether the text, percent-decoded to any depth, holds a JWT: a segment followed by two more (the second not
    empty), a tail of which decodes to the start of a JSON object (a header glued to what precedes it counts)."""
    decoded = _decoded(text)
    if decoded.count(".") < 2 or not _OBJECT_START.search(decoded):  # no segments, or nowhere a header starts
        return False
    for run in _DOTTED.finditer(decoded):
        segments = run.group(0).split(".")
        for first, second in zip(segments[:-2], segments[1:-1]):
            if second.strip("=") and any(_header(first[m.start():]) for m in _OBJECT_START.finditer(first)):
                return True
    return False


def _pieces(run: str) -> list[str]:
    """The run cut at each `=` that is no padding before a dot (raw or `%2E`), the `=`s a piece of their own."""
    pieces, start = [], 0
    for equals in _EQUALS.finditer(run):
        after = run[equals.end():equals.end() + 3]
        if not (after.startswith(".") or after.lower() == "%2e"):
            pieces += [run[start:equals.start()], equals.group(0)]
            start = equals.end()
    return [*pieces, run[start:]]


def _masked(run: str) -> str:
    if len(run) < _RUN_LENGTH:
        return run
    decoded = _decoded(run) if "%" in run else run
    if decoded.count(".") < 2 or not _OBJECT_START.search(decoded):  # no segments, or nowhere a header starts
        return run
    return "".join(MASK if len(piece) >= _RUN_LENGTH and holds_jwt(piece) else piece for piece in _pieces(run))


def _credentials(match: re.Match[str]) -> str:
    scheme, separator, value = match.groups()
    if scheme.lower() == "basic":  # a word in a name ("Basic health unit") unless it is base64 of user:password
        try:
            if b":" not in base64.b64decode(_decoded(value) + "=" * (-len(_decoded(value)) % 4), validate=True):
                return match.group(0)
        except (binascii.Error, ValueError):
            return match.group(0)
    return f"{scheme}{separator}{MASK}"


def redact(text: str) -> str:
    """The text with every JWT-shaped value (the whole run of characters holding it) and every Authorization
    value's credentials replaced by ***."""
    # no JWT without its dots and where a header may start, unless percent-encoded
    if "%" in text or "." in text and _OBJECT_START.search(text):
        text = _RUN.sub(lambda m: _masked(m.group(0)), text)
    low = text.lower()
    return _SCHEME.sub(_credentials, text) if "bearer" in low or "dpop" in low or "basic" in low else text
