"""Text normalization shared by search and by whoever writes searchable columns."""
from __future__ import annotations

import unicodedata


def _unaccented(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def normalize(text: str) -> str:
    """Case- and accent-insensitive form: 'Ségou', 'SEGOU' and 'ＳＥＧＯＵ' all give 'segou'. Compatibility forms are
    decomposed before case folding (so 'ℌ' folds to 'h' like 'H'), then folded forms decomposed again; runs of
    whitespace fold to one space ('St.  Mary' finds 'St. Mary')."""
    return " ".join(_unaccented(_unaccented(text).casefold()).split())


def composed(text: str) -> str:
    """Unicode NFC: how names are stored and compared exactly ('Clínica' typed with a combining accent is the
    precomposed one)."""
    return unicodedata.normalize("NFC", text)
