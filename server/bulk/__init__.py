"""FHIR Bulk Data Access `$export` (STU2, kick-off by GET), generic over every table-backed provider: a core plugin
on the engine's public hooks (server.plugins loads it by name, `bulk`), importing the public surface `server` and
the engine's reader protocol (server.engine.export_reader: who may export, `_typeFilter`, transactionTime, each
provider's resources as they were at transactionTime) and nothing else of the server.

plugin (its hook implementations: operations, migrations, capabilities, the worker's stop), tables (the job table
and its migration chain), parameters (the kick-off's parameters), jobs (the job rows, shared by every worker and
replica), files (NDJSON files split at `bulk.file_resources`), ranges (`Range` on a file), runner (a job's thread),
service (kick-off, status, download: plain answers the HTTP layer renders) and capability (its part of the
CapabilityStatement)."""
