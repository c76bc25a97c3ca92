"""The org-unit domain: tables, migrations, writer, importers, demo data, served versions, CLI
commands, and the Location, Organization and canonical-resource providers."""
PLUGIN_API = "1.1"
