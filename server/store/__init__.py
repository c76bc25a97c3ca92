"""The org-unit store: SQLModel tables, database engines, demo data and importers."""
