"""A small, hand-made pyramid whose every field a test can name: the org-unit plugin's sample data (its contract
samples load it, and so can a provider package's tests, for Locations of known ids: Burkina Faso 1 > regions 2, 3 >
districts 10, 11 > area 20 > facilities 30, 31; facility 32 directly under district 10; plugins/README.md section 5
lists them, checked by tests/contract/test_samples_doc.py)."""
from __future__ import annotations

from datetime import date, datetime, timezone

from sqlalchemy import Engine

from plugins.orgunits.records import TypeRecord, UnitRecord
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units

NOW = datetime(2025, 3, 4, 10, 20, 30, tzinfo=timezone.utc)
SOURCE_NAME = "Ministère de la Santé"  # the data source (Organization/1, slug ministere-de-la-sante, account default)
TYPES = (
    TypeRecord("Country", "COUNTRY", "COUNTRY", 1),
    TypeRecord("Region", "REGION", "REGION", 2),
    TypeRecord("District", "DISTRICT", "DISTRICT", 3),
    TypeRecord("Aire de santé", "AREA", "AREA", 4),
    TypeRecord("Centre de santé", "CSPS", "HF", 5),
    TypeRecord("Hôpital", "CHR", "HF", 5),
)
UUID_1 = "0b6f7c1e-4a47-4d7e-9a3e-000000000001"
UNITS = (
    UnitRecord(1, "Burkina Faso", "COUNTRY", "VALID", uuid=UUID_1, source_ref="zmSNCYjqQGj"),
    UnitRecord(2, "Boucle du Mouhoun", "REGION", "VALID", source_ref="awG7snlrjVy", parent_id=1),
    UnitRecord(3, "Hauts-Bassins", "REGION", "VALID", source_ref="HB0000000003", aliases=("HBS",), parent_id=1),
    UnitRecord(10, "DS Boromo", "DISTRICT", "VALID", source_ref="CTtB0TPRvWc", parent_id=2),
    UnitRecord(11, "DS Dédougou", "DISTRICT", "NEW", source_ref="DD0000000011", parent_id=2),
    UnitRecord(20, "Aire de Ségou", "AREA", "VALID", source_ref="AS0000000020", aliases=("Segou Nord", "ASN-20"),
               parent_id=10),
    UnitRecord(30, "CSPS Ségou", "CSPS", "VALID", source_ref="KvNOePwHFyH", parent_id=20,
               latitude=11.716788, longitude=-3.339844, altitude=300.0, opening_date=date(2001, 1, 1)),
    UnitRecord(31, "CMA Boromo 50%_x", "CHR", "REJECTED", source_ref="CM0000000031", parent_id=20,
               latitude=11.7, longitude=-3.3, closing_date=date(2020, 1, 1)),
    UnitRecord(32, "Dispensaire Kéré", "CSPS", "NEW", source_ref="DK0000000032", parent_id=10,
               closing_date=date(2999, 1, 1)),
)


def load_small_pyramid(engine: Engine) -> None:
    with engine.begin() as conn:
        ds = ensure_data_source(conn, SOURCE_NAME, now=NOW)
        version = ensure_source_version(conn, ds, 3, now=NOW)
        ensure_types(conn, TYPES)
        write_units(conn, UNITS, version, NOW)
