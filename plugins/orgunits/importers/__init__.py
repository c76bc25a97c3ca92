"""Importers of org unit files (Iaso CSV and GeoPackage, DHIS2 JSON, FHIR Bundle, any export through a mapping
file); all write through `transaction.import_units` in one transaction. Each importer module declares its format
(`FORMAT`, a `declaration.ImportFormat`); `formats.DECLARED` collects them for the CLI, `formats.load_file` loads a
path in one of them."""
