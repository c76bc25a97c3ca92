"""FHIR Bulk Data Access `$export` (STU2, kick-off by GET), generic over every table-backed provider.

parameters (the kick-off's parameters), jobs (the job table, shared by every worker and replica), settle (waiting for
the writes begun before transactionTime), snapshot (each provider's resources as they were at transactionTime),
files (NDJSON files split at `bulk.file_resources`), runner (a job's thread), service (kick-off, status, download)
and endpoints (the routes, through the request pipeline)."""
