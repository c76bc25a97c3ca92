"""Text normalization shared by search and by whoever writes searchable columns."""
from __future__ import annotations

import unicodedata


def _unaccented(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def normalize(text: str) -> str:
    """Case- and accent-insensitive form: 'Ségou', 'SEGOU' and 'ＳＥＧＯＵ' all give 'segou'. Compatibility forms are
    decomposed before case folding (so 'ℌ' folds to 'h' like 'H'), then folded forms decomposed again."""
    return _unaccented(_unaccented(text).casefold()).strip()
