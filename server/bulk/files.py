"""A job's files: NDJSON, one resource a line, split at `bulk.file_resources` lines, in `<directory>/<job id>/`."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from server import Settings

JOB_ID = re.compile(r"[0-9a-f]{32}")
BUFFER = 1 << 20


def directory(settings: Settings) -> Path:
    return Path(settings.bulk.directory) if settings.bulk.directory else settings.data_path / "bulk"


def directory_problem(settings: Settings) -> str | None:
    """Why the jobs' files cannot be written (tried: the directory made if missing, a file created and removed),
    None when they can or Bulk Data is off."""
    if not settings.bulk.enabled:
        return None
    where = directory(settings)
    existing = next(p for p in (where, *where.parents) if p.exists())  # made by the first job when missing
    if not existing.is_dir():
        return f"bulk.directory {where}: {existing} is not a directory"
    try:
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".orgunit-fhir-probe-")
        try:
            os.write(handle, b"\n")
        finally:
            os.close(handle)
            os.remove(probe)
    except OSError as exc:
        return f"bulk.directory {where}: cannot write the export files there ({exc.strerror or exc})"
    return None


def job_directory(settings: Settings, job_id: str) -> Path:
    if not JOB_ID.fullmatch(job_id):
        raise ValueError(f"not a job id: {job_id!r}")
    return directory(settings) / job_id


def remove_job(settings: Settings, job_id: str) -> None:
    if JOB_ID.fullmatch(job_id):
        shutil.rmtree(directory(settings) / job_id, ignore_errors=True)


@dataclass(frozen=True)
class Written:
    type: str  # the resource type of its lines
    name: str  # the file's name in the job's directory
    count: int  # its lines


class NdjsonFiles:
    """The files of one kind of line (a resource type's resources, its deletions, the errors), opened as lines come
    and closed every `per_file` lines."""

    def __init__(self, where: Path, line_type: str, per_file: int, kind: str = "") -> None:
        self.where = where
        self.line_type = line_type
        self.per_file = per_file
        self.prefix = f"{line_type}{'-' + kind if kind else ''}"
        self.written: list[Written] = []
        self._file: BinaryIO | None = None
        self._count = 0

    @property
    def total(self) -> int:
        return sum(w.count for w in self.written) + self._count

    def write(self, lines: Iterable[bytes]) -> None:
        batch = list(lines)
        while batch:
            if self._file is None:
                self.where.mkdir(parents=True, exist_ok=True)
                self._file = (self.where / self._name()).open("wb", buffering=BUFFER)
            room = self.per_file - self._count
            taken, batch = batch[:room], batch[room:]
            self._file.write(b"\n".join(taken) + b"\n")
            self._count += len(taken)
            if self._count >= self.per_file:
                self._close()

    def _name(self) -> str:
        return f"{self.prefix}-{len(self.written) + 1}.ndjson"

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self.written.append(Written(self.line_type, self._name(), self._count))
            self._file, self._count = None, 0

    def close(self) -> list[Written]:
        self._close()
        return self.written
