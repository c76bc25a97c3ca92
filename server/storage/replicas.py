"""Reads spread over PostgreSQL replicas (`database.read_urls`).

The serving engine stays one SQLAlchemy engine with one pool; what changes is where a new pooled connection
goes: to the next replica in turn that accepts it. A replica that refuses a connection is skipped for
`database.replica_retry_seconds`; when every replica refuses, the primary (`database.url`) serves, so reads
survive the loss of all replicas. An established connection that a replica drops fails its statement once,
which the endpoint repeats on a new connection (SQLAlchemy invalidates the pool on a disconnect)."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.pool import ConnectionPoolEntry, Pool

from server.storage.backend import BoundedPool

log = logging.getLogger("orgunit_fhir")
PRIMARY = "primary"
Observer = Callable[[str, bool], None]  # (database name, connected?) for every connection attempt


# requests use pool_size connections at most (the worker threads are limited to it); the probes (/readyz,
# /metrics) may take these few more: a worker holds at most pool_size + MAX_OVERFLOW connections per database
MAX_OVERFLOW = 2


@dataclass(frozen=True)
class Target:
    name: str   # primary, replica1, replica2, ... (what logs and metrics show: never the URL)
    url: str    # normalized (postgresql+psycopg://...)


def replica_targets(read_urls: Sequence[str], normalize: Callable[[str], str]) -> tuple[Target, ...]:
    return tuple(Target(f"replica{i}", normalize(url)) for i, url in enumerate(read_urls, 1))


class ReadRouter:
    """The `do_connect` hook of the serving engine: round robin over the replicas that are not resting."""

    def __init__(self, replicas: Sequence[Target], fallback: Target | None, connect_args: Mapping[str, Any],
                 retry_after_s: float) -> None:
        if not replicas:
            raise ValueError("a read router needs at least one replica")
        self.replicas = tuple(replicas)
        self.fallback = fallback
        self.connect_args = dict(connect_args)
        self.retry_after_s = retry_after_s
        self.observers: list[Observer] = []
        self._lock = threading.Lock()
        self._next = 0
        self._resting: dict[str, float] = {}  # name -> monotonic time until which it is skipped

    def order(self) -> list[Target]:
        """The replicas to try for the next connection, then the primary."""
        now = time.monotonic()
        with self._lock:
            start = self._next
            self._next = (self._next + 1) % len(self.replicas)
            rotated = self.replicas[start:] + self.replicas[:start]
            awake = [t for t in rotated if self._resting.get(t.name, 0.0) <= now]
        return awake + ([self.fallback] if self.fallback is not None else [])

    def status(self) -> dict[str, str]:
        now = time.monotonic()
        with self._lock:
            return {t.name: "skipped" if self._resting.get(t.name, 0.0) > now else "in rotation"
                    for t in self.replicas}

    def connect(self, dialect: Dialect, record: ConnectionPoolEntry | None, cargs: Any, cparams: Any) -> Any:
        last: Exception | None = None
        for target in self.order():
            params = {**dialect.create_connect_args(make_url(target.url))[1], **self.connect_args}
            try:
                connection = dialect.connect(**params)
            except dialect.loaded_dbapi.Error as exc:
                last = exc
                self._failed(target, exc)
                continue
            self._succeeded(target)
            if record is not None:
                record.info["database"] = target.name
            return connection
        assert last is not None
        raise last

    def _failed(self, target: Target, exc: Exception) -> None:
        for observe in self.observers:
            observe(target.name, False)
        if target.name == PRIMARY:
            return
        with self._lock:
            was_resting = self._resting.get(target.name, 0.0) > 0.0
            self._resting[target.name] = time.monotonic() + self.retry_after_s
        if not was_resting:
            log.warning("database %s refused a connection; skipped for %ss: %s", target.name,
                        self.retry_after_s, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)

    def _succeeded(self, target: Target) -> None:
        for observe in self.observers:
            observe(target.name, True)
        with self._lock:
            came_back = self._resting.pop(target.name, None) is not None
        if came_back:
            log.info("database %s accepts connections again", target.name)


RECYCLE_S = 60


class RoutedPool(BoundedPool):
    """The serving engine's pool, holding its router (a pool made again, after a dispose, keeps it)."""

    router: ReadRouter | None = None

    def recreate(self) -> Pool:
        pool = super().recreate()
        if isinstance(pool, RoutedPool):
            pool.router = self.router
        return pool


def create_read_engine(replicas: Sequence[Target], fallback: Target | None, *, pool_size: int,
                       connect_args: Mapping[str, Any], retry_after_s: float, pool_timeout: float = 30) -> Engine:
    router = ReadRouter(replicas, fallback, connect_args, retry_after_s)
    # connections are recycled after RECYCLE_S: the pool comes back to the replicas after falling back to the
    # primary (the router only chooses when a connection is made)
    engine = create_engine(replicas[0].url, poolclass=RoutedPool, pool_size=pool_size, max_overflow=MAX_OVERFLOW,
                           pool_recycle=RECYCLE_S, pool_timeout=pool_timeout, connect_args=dict(connect_args),
                           hide_parameters=True)
    event.listen(engine, "do_connect", router.connect)
    assert isinstance(engine.pool, RoutedPool)
    engine.pool.router = router
    return engine


def read_router(engine: Engine) -> ReadRouter | None:
    """The router of a serving engine (or of an engine derived from it with execution_options)."""
    pool = engine.pool
    return pool.router if isinstance(pool, RoutedPool) else None
