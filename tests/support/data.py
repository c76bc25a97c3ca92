"""A small, hand-made pyramid whose every field a test can name."""
from __future__ import annotations

from typing import Any

from plugins.orgunits.samples import NOW, TYPES, UNITS, UUID_1, load_small_pyramid

__all__ = ["NOW", "TYPES", "UNITS", "UUID_1", "counts", "first_load", "load_small_pyramid"]


def first_load(data_source: str, account: str = "default") -> tuple[str, ...]:
    """The note of the first load into an empty database: it created the account and the data source."""
    return (f"created account {account!r} and its data source {data_source!r}: the first of this database, which "
            "tokens without an account claim see",)


def counts(report: Any) -> dict[str, int]:
    """The non-zero figures of a load's report (inserted, updated, unchanged, deleted, missing)."""
    names = ("inserted", "updated", "unchanged", "deleted", "missing")
    return {name: getattr(report, name) for name in names if getattr(report, name)}
