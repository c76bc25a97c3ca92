"""server.http.framing: where a request ends in a connection's bytes, and which cap it passes first (no I/O)."""
from __future__ import annotations

import pytest

from server.http.framing import Framer, Verdict

LINE, FIELDS = 40, 100
GET = b"GET /healthz HTTP/1.1\r\n"
CHUNKED = GET + b"Transfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("data, verdict, end", [
    pytest.param(GET + b"Host: a\r\n\r\n", Verdict.COMPLETE, len(GET) + 11, id="get"),
    pytest.param(GET + b"Host: a\r\n\r\nGET /", Verdict.COMPLETE, len(GET) + 11, id="pipelined-next-not-taken"),
    pytest.param(b"\r\n" + GET + b"\r\n", Verdict.COMPLETE, 2 + len(GET) + 2, id="blank-line-before"),
    pytest.param(GET + b"Host: a\r\n", Verdict.MORE, 0, id="headers-incomplete"),
    pytest.param(GET + b"Content-Length: 3\r\n\r\nabcGET", Verdict.COMPLETE, len(GET) + 24, id="body"),
    pytest.param(GET + b"content-length: 3\r\n\r\nab", Verdict.MORE, 0, id="body-incomplete"),
    pytest.param(CHUNKED + b"3\r\nabc\r\n0\r\n\r\nGET", Verdict.COMPLETE, len(CHUNKED) + 13, id="chunked"),
    pytest.param(CHUNKED + b"3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n", Verdict.COMPLETE, len(CHUNKED) + 23,
                 id="chunk-extension-and-trailer"),
    pytest.param(CHUNKED + b"0\r\nT: v\r\n", Verdict.MORE, 0, id="trailers-incomplete"),
    pytest.param(CHUNKED + b"zz\r\n", Verdict.COMPLETE, len(CHUNKED) + 4, id="bad-chunk-size-to-the-parser"),
    pytest.param(b"GET /" + b"a" * 40, Verdict.LINE_TOO_LONG, 0, id="line-without-end"),
    pytest.param(b"\r\n" * 21, Verdict.LINE_TOO_LONG, 0, id="blank-lines-without-end"),
    pytest.param(b"\r\n" * 20, Verdict.MORE, 0, id="blank-lines-within-the-line-cap"),
    pytest.param(b"GET /" + b"a" * 26 + b" HTTP/1.1\r\n\r\n", Verdict.COMPLETE, 44, id="line-at-the-cap"),
    pytest.param(b"GET /" + b"a" * 27 + b" HTTP/1.1\r\n\r\n", Verdict.LINE_TOO_LONG, 0, id="line-one-past"),
    pytest.param(GET + b"X: " + b"v" * 95 + b"\r\n\r\n", Verdict.COMPLETE, len(GET) + 102, id="fields-at-the-cap"),
    pytest.param(GET + b"X: " + b"v" * 96 + b"\r\n\r\n", Verdict.FIELDS_TOO_LONG, 0, id="fields-one-past"),
    pytest.param(GET + b"X: " + b"v" * 200, Verdict.FIELDS_TOO_LONG, 0, id="endless-field"),
    pytest.param(GET + b"Content-Length: 90\r\n\r\n", Verdict.FIELDS_TOO_LONG, 0, id="body-past-the-cap-unread"),
    pytest.param(CHUNKED + b"0\r\n" + b"T: v\r\n" * 20, Verdict.FIELDS_TOO_LONG, 0, id="trailers-past-the-cap"),
    pytest.param(CHUNKED + b"0;" + b"e" * 100, Verdict.FIELDS_TOO_LONG, 0, id="endless-chunk-size-line"),
    pytest.param(CHUNKED + b"ff\r\n", Verdict.FIELDS_TOO_LONG, 0, id="chunk-past-the-cap-unread"),
])
def test_frame(data: bytes, verdict: Verdict, end: int) -> None:
    frame = Framer(LINE, FIELDS).frame(data)
    assert (frame.verdict, frame.end) == (verdict, end)


@pytest.mark.parametrize("data", [
    pytest.param(GET + b"Host: a\r\n\r\n", id="get"),
    pytest.param(CHUNKED + b"3\r\nabc\r\n0\r\nT: v\r\n\r\n", id="chunked"),
    pytest.param(GET + b"Content-Length: 3\r\n\r\nabc", id="body"),
])
def test_a_request_sent_byte_by_byte_completes_at_its_last_byte(data: bytes) -> None:
    framer, verdicts = Framer(LINE, FIELDS), []
    for i in range(1, len(data) + 1):
        verdicts.append(framer.frame(data[:i]).verdict)
    assert verdicts == [Verdict.MORE] * (len(data) - 1) + [Verdict.COMPLETE]


def test_requests_one_after_another() -> None:
    framer, buf, ends = Framer(LINE, FIELDS), bytearray((GET + b"\r\n") * 3), []
    while buf:
        frame = framer.frame(buf)
        assert frame.verdict is Verdict.COMPLETE
        ends.append(frame.end)
        del buf[:frame.end]
    assert ends == [len(GET) + 2] * 3
