"""Bulk Data as a core plugin (server.plugins loads it by name, `bulk`; settings.yaml `plugins: {bulk: false}`
blocks it): on the engine's public hooks only, reading through the engine's reader protocol
(server.engine.export_reader). Its operations: the kick-off `[base]/$export` and `[base]/[type]/$export` (the SMART
read scope, `r`, checked by the pipeline), the job's status `[base]/$export-status/[job]` and its files
`[base]/$export-file/[job]/[name]`; its table and migration chain; its part of the CapabilityStatement; and its
worker's jobs, stopped when the worker stops. GET and HEAD only: a job is not cancelled by DELETE (405, as every
other method on this read-only server); it ends, and its files go, when it expires (`bulk.expire_seconds`)."""
from __future__ import annotations

import threading
from typing import Any

from server import Answer, Migrations, Operation, OperationCall, Settings, hookimpl
from server.bulk.capability import EXPORT, add_bulk, documentation
from server.bulk.parameters import OUTPUT_FORMATS
from server.bulk.service import FILE_PATH, STATUS_PATH, BulkService
from server.bulk.tables import MIGRATIONS
from server.engine.export_reader import ExportReader, Registry, ServerContext

NDJSON_ACCEPTED = frozenset({*OUTPUT_FORMATS, "application/x-ndjson"})  # a file is NDJSON, a manifest JSON


class BulkData:
    """One per plugin manager: the export service of each server context it serves (made at its first call)."""

    def __init__(self) -> None:
        self._services: dict[int, tuple[ServerContext, BulkService]] = {}
        self._lock = threading.Lock()

    def service(self, server: ServerContext) -> BulkService:
        with self._lock:
            known = self._services.get(id(server))
            if known is None or known[0] is not server:
                known = self._services[id(server)] = (server, BulkService(ExportReader(server)))
            return known[1]

    def _kickoff(self, call: OperationCall) -> Answer:
        return self.service(call.server).kickoff(call)

    def _status(self, call: OperationCall) -> Answer:
        return self.service(call.server).status(call)

    def _download(self, call: OperationCall) -> Answer:
        return self.service(call.server).download(call)

    @hookimpl(trylast=True)
    def register_operations(self, settings: Settings) -> list[Operation]:
        if not settings.bulk.enabled:
            return []
        return [
            Operation("export", None, documentation(settings), EXPORT, handler=self._kickoff,
                      levels=frozenset({"system", "type"}), scope="r"),
            Operation(STATUS_PATH.removeprefix("$"), None, "The status of an export job, then its manifest",
                      EXPORT, handler=self._status, levels=frozenset({"system"}), path=("job",),
                      media_types=NDJSON_ACCEPTED),
            Operation(FILE_PATH.removeprefix("$"), None, "A file of an export job (NDJSON; Range honoured)",
                      EXPORT, handler=self._download, levels=frozenset({"system"}), path=("job", "name"),
                      media_types=NDJSON_ACCEPTED),
        ]

    @hookimpl(trylast=True)
    def register_migrations(self, settings: Settings) -> list[Migrations]:
        return [MIGRATIONS]

    @hookimpl(trylast=True)
    def update_capability_statement(self, statement: dict[str, Any], settings: Settings, registry: Registry) -> None:
        add_bulk(statement, registry, settings)  # trylast: after the plugins, which may set instantiates

    @hookimpl(trylast=True)
    def stop_worker(self, server: ServerContext) -> None:
        """This worker's export jobs stop (each is marked failed); the next call starts a new service."""
        with self._lock:
            known = self._services.pop(id(server), None)
        if known is not None:
            known[1].close()
