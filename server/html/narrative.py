"""A resource's narrative (text.div, XHTML from the data) made safe to show: the text escaped, a short list of
formatting elements kept without any attribute, everything else (script, style, img, links, handlers) dropped."""
from __future__ import annotations

from html import escape
from html.parser import HTMLParser

ALLOWED = frozenset({"div", "p", "span", "b", "i", "em", "strong", "u", "br", "hr", "ul", "ol", "li", "dl", "dt",
                     "dd", "table", "thead", "tbody", "tr", "th", "td", "caption", "h1", "h2", "h3", "h4", "h5", "h6",
                     "pre", "code", "blockquote", "sub", "sup", "small"})
_VOID = frozenset({"br", "hr"})
_DROPPED_WITH_CONTENT = frozenset({"script", "style", "iframe", "object", "embed", "template", "svg", "math"})


class _Sanitizer(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.open: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROPPED_WITH_CONTENT:
            self.skipping += 1
        elif not self.skipping and tag in ALLOWED:
            self.out.append(f"<{tag}>")
            if tag not in _VOID:
                self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self.skipping and tag in _VOID:
            self.out.append(f"<{tag}>")

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROPPED_WITH_CONTENT:
            self.skipping = max(0, self.skipping - 1)
        elif not self.skipping and tag in self.open:
            while self.open:
                last = self.open.pop()
                self.out.append(f"</{last}>")
                if last == tag:
                    break

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.out.append(escape(data))


def sanitize(xhtml: str) -> str:
    parser = _Sanitizer()
    parser.feed(xhtml)
    parser.close()
    return "".join(parser.out) + "".join(f"</{tag}>" for tag in reversed(parser.open))
