"""Structured (JSON) log lines: one object a line, with the fields a record carries in `extra={"fields": {...}}`
and the id of the request being served (a context variable the request middleware sets). Every line, JSON or
text, is redacted (server.telemetry.redact: no JWT nor Authorization value), and a caller's request id holding
one is not taken."""
from __future__ import annotations

import logging
import logging.config
import itertools
import re
import uuid
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

import orjson

from server.errors import ConfigError
from server.settings import Settings
from server.telemetry.redact import redact

AUDIT = logging.getLogger("orgunit_fhir.audit")
ACCESS = logging.getLogger("orgunit_fhir.access")
LOG_FORMATS = ("json", "text")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"

REQUEST_ID: ContextVar[str | None] = ContextVar("orgunit_fhir_request_id", default=None)
VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestIds:
    """New request ids: 32 hex digits, a random half drawn once per process (every worker and restart its own)
    and a counter (no random draw per request)."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]
        self._next = itertools.count()

    def accept(self, incoming: str | None) -> str:
        """The caller's X-Request-ID when it is safe to log and echo (at most 128 of A-Z a-z 0-9 . _ : -, and not a
        JWT), else a new one."""
        if incoming is not None and VALID_REQUEST_ID.fullmatch(incoming) and redact(incoming) == incoming:
            return incoming
        return f"{self._prefix}{next(self._next) & 0xFFFFFFFFFFFFFFFF:016x}"


class RequestIdFilter(logging.Filter):
    """Stamps every record with the current request's id ("-" outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or REQUEST_ID.get()
        if rid and rid != "-":
            out["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return redact(orjson.dumps(out, default=str).decode())


class TextFormatter(logging.Formatter):
    """Plain lines; a newline or control character from a request (a decoded path) is escaped, so a caller
    cannot forge a log line."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # the line itself; a traceback follows it
        return _CONTROL.sub(lambda m: repr(m.group())[1:-1], super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def log_fields(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={"fields": fields})


def logging_config(settings: Settings, *, level: str = "INFO") -> dict[str, Any]:
    """A dictConfig for the whole process (uvicorn applies it again in each worker it spawns): one stderr
    handler, JSON or text; uvicorn's own access log off (the request middleware writes a richer one)."""
    fmt = settings.server.log_format
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"server.log_format: expected one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    formatter: dict[str, Any] = ({"()": "server.telemetry.logs.JsonFormatter"} if fmt == "json"
                                 else {"()": "server.telemetry.logs.TextFormatter", "format": TEXT_FORMAT})
    quiet = {"level": "WARNING", "handlers": [], "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "server.telemetry.logs.RequestIdFilter"}},
        "formatters": {"default": formatter},
        "handlers": {"default": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                                 "formatter": "default", "filters": ["request_id"]}},
        "root": {"level": level, "handlers": ["default"]},
        "loggers": {
            "uvicorn": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.access": quiet,
            "alembic": quiet,
            # SQLAlchemy's pool says "Pool disposed ... Current Overflow: -5" at INFO on every engine disposed: noise
            # an operator cannot act on (issue 38); its warnings stay
            "sqlalchemy": quiet,
            "server.storage.backend.BoundedPool": quiet,  # SQLAlchemy names a pool's logger by its class
            ACCESS.name: {"level": "INFO" if settings.server.access_log else "WARNING", "handlers": [],
                          "propagate": True},
            AUDIT.name: {"level": "INFO" if settings.server.audit_log else "WARNING", "handlers": [],
                         "propagate": True},
        },
    }


def configure_logging(settings: Settings) -> dict[str, Any]:
    config = logging_config(settings)
    logging.config.dictConfig(config)
    return config
