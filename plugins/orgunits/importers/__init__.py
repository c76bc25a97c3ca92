"""Importers of org unit files (Iaso CSV and GeoPackage, DHIS2 JSON, FHIR Bundle); all write through
`common.import_units` in one transaction. `common.FORMATS` / `common.load_file` are what the CLI uses."""
