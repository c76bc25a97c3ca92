"""The command line: `orgunit-fhir` (main.py), one module per command group, and what plugins may add to it
(extensions.py)."""
