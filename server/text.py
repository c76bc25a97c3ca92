"""Text normalization shared by search and by whoever writes searchable columns."""
from __future__ import annotations

import unicodedata


def normalize(text: str) -> str:
    """Case- and accent-insensitive form: 'Ségou' and 'SEGOU' both give 'segou'."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c)).strip()
