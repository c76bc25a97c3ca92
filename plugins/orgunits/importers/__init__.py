"""Importers of org unit files (Iaso CSV and GeoPackage, DHIS2 JSON, FHIR Bundle, any export through a mapping
file); all write through `transaction.import_units` in one transaction. `formats.FORMATS` / `formats.load_file` and
`mapped.load_mapped` are what the CLI uses."""
