"""Prometheus metrics: requests by interaction, resource type and status, latency, database pool use and the
data generation served.

One registry per app; under `serve --workers N` every worker writes its values to the directory named by
$PROMETHEUS_MULTIPROC_DIR (set by `serve` before the workers start) and /metrics, whichever worker answers it,
adds up every worker's."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from sqlalchemy import Engine, event
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

from server.storage.replicas import PRIMARY, read_router

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class Metrics:
    registry: CollectorRegistry
    multiprocess_dir: str | None
    requests: Counter
    latency: Histogram
    in_flight: Gauge
    pool_size: Gauge
    checked_out: Gauge
    checkouts: Counter
    connects: Counter
    data_generation: Gauge
    _children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = field(default_factory=dict, repr=False)

    @classmethod
    def create(cls, multiprocess_dir: str | None = None) -> Metrics:
        path = multiprocess_dir if multiprocess_dir is not None else os.environ.get(MULTIPROC_ENV)
        registry = CollectorRegistry(auto_describe=True)
        return cls(
            registry=registry,
            multiprocess_dir=path or None,
            requests=Counter("orgunit_fhir_http_requests", "HTTP requests answered, by FHIR interaction, "
                             "resource type and status", ("interaction", "resource_type", "status"),
                             registry=registry),
            latency=Histogram("orgunit_fhir_http_request_duration_seconds", "Time to answer a request, by FHIR "
                              "interaction and resource type", ("interaction", "resource_type"),
                              buckets=LATENCY_BUCKETS, registry=registry),
            in_flight=Gauge("orgunit_fhir_http_requests_in_flight", "Requests being answered",
                            registry=registry, multiprocess_mode="livesum"),
            pool_size=Gauge("orgunit_fhir_db_pool_size", "Configured database pool size (all workers)",
                            registry=registry, multiprocess_mode="livesum"),
            checked_out=Gauge("orgunit_fhir_db_connections_checked_out", "Pooled database connections in use, "
                              "by database (primary, replica1, ...)", ("database",), registry=registry,
                              multiprocess_mode="livesum"),
            checkouts=Counter("orgunit_fhir_db_checkouts", "Connections taken from the pool, by database",
                              ("database",), registry=registry),
            connects=Counter("orgunit_fhir_db_connects", "New database connections, by database and outcome",
                             ("database", "outcome"), registry=registry),
            data_generation=Gauge("orgunit_fhir_data_generation_timestamp_seconds", "Time of the newest version "
                                  "served (the last load that changed data), by resource type",
                                  ("resource_type",), registry=registry, multiprocess_mode="mostrecent"),
        )

    def observe(self, interaction: str, resource_type: str, status: int, seconds: float) -> None:
        key = (interaction, resource_type, status)
        children = self._children.get(key)
        if children is None:  # labels() costs a lock and checks: once per label set
            children = self._children.setdefault(key, (self.requests.labels(interaction, resource_type, str(status)),
                                                       self.latency.labels(interaction, resource_type)))
        children[0].inc()
        children[1].observe(seconds)

    def exposition(self) -> bytes:
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        _forget_dead_workers(self.multiprocess_dir)
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=self.multiprocess_dir)
        return generate_latest(merged)

    def watch_pool(self, engine: Engine, pool_size: int) -> Callable[[], None]:
        """Count the engine's checkouts and connections until the returned function is called."""
        pool = engine.pool
        self.pool_size.set(pool_size)
        counted = f"orgunit_fhir_metrics_{id(self)}"  # in a pool entry's record_info: the database counted, by us

        def checkout(_dbapi: Any, record: ConnectionPoolEntry, _proxy: PoolProxiedConnection) -> None:
            database = record.info.get("database", PRIMARY)
            record.record_info[counted] = database
            self.checked_out.labels(database).inc()
            self.checkouts.labels(database).inc()

        def checkin(_dbapi: Any, record: ConnectionPoolEntry) -> None:
            database = record.record_info.pop(counted, None)
            if database is not None:
                self.checked_out.labels(database).dec()

        def connected(_dbapi: Any, record: ConnectionPoolEntry) -> None:
            if router is None:
                self.connects.labels(PRIMARY, "ok").inc()

        def attempted(database: str, ok: bool) -> None:
            self.connects.labels(database, "ok" if ok else "failed").inc()

        router = read_router(engine)
        event.listen(pool, "checkout", checkout)
        event.listen(pool, "checkin", checkin)
        event.listen(pool, "connect", connected)
        if router is not None:
            router.observers.append(attempted)

        def unwatch() -> None:
            event.remove(pool, "checkout", checkout)
            event.remove(pool, "checkin", checkin)
            event.remove(pool, "connect", connected)
            if router is not None:
                router.observers.remove(attempted)
            self.pool_size.set(0)

        return unwatch

    def process_exit(self) -> None:
        """A worker that stops takes its live gauges (in flight, pool) out of the sum."""
        if self.multiprocess_dir is not None:
            multiprocess.mark_process_dead(os.getpid(), self.multiprocess_dir)


_LIVE_FILE = re.compile(r"gauge_live\w*?_(\d+)\.db")


def _forget_dead_workers(directory: str) -> None:
    """A worker killed without its shutdown (SIGKILL, out of memory) leaves its live gauges behind: drop them,
    so the sums count the living workers only."""
    for name in os.listdir(directory):
        match = _LIVE_FILE.fullmatch(name)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, directory)
        except PermissionError:
            pass  # alive, under another user
