"""Errors raised while loading org units into the store."""
from __future__ import annotations


class LoadError(Exception):
    """Input that cannot be written as given; the message names the offending record (and line, for files)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
