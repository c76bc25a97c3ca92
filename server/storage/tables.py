"""The engine's own tables (no provider's): which settings and code rendered each type's stored bodies (and its
current bodies kept apart). (The Bulk
Data export jobs are the bulk plugin's: server.bulk.tables.)"""
from __future__ import annotations

from sqlalchemy import Column, MetaData, String, Table

metadata = MetaData()

render_state = Table(
    "render_state", metadata,
    Column("resource_type", String, primary_key=True),
    Column("fingerprint", String, nullable=False),
    # what made the type's current bodies kept apart (Prerendered.current); NULL: none kept, or a release that does
    # not know them claimed the type, leaving the kept rows unproven
    Column("current_fingerprint", String, nullable=True),
)
