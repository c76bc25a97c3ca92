"""Records of a registry export, whatever its shape: CSV rows, the objects of a JSON document (found by a dotted path,
`*` for each element of a list) or of a JSON-lines file; and the value of a dotted field path in one record (a
JSON object held in a string, as some exports nest their attributes, is read through)."""
from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.orgunits.importers.parsers import read_json
from server import LoadError

FORMATS = ("csv", "json", "jsonl")
_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}


@dataclass(frozen=True, slots=True)
class Record:
    label: str  # where it is: "line 12", "records[3]"
    fields: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Source:
    """How to read one file: its format (None: by its suffix), the CSV dialect, where the JSON records are."""
    format: str | None = None
    delimiter: str = ","
    encoding: str = "utf-8-sig"
    records: str | None = None  # dotted path to the list of records in a JSON document; None: the document


def file_format(path: Path, source: Source) -> str:
    fmt = source.format or _SUFFIXES.get(path.suffix.lower())
    if fmt not in FORMATS:
        raise LoadError(f"{path}: cannot tell the format from the name; set format: csv, json or jsonl in the "
                        "mapping")
    return fmt


def read_records(path: Path, source: Source, key: str = "units") -> list[Record]:
    """Every record of the file; `key` is the mapping section reading it (an error says what to set there)."""
    read = _READERS[file_format(path, source)]
    try:
        return list(read(path, source))
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise LoadError(_undecodable(path, source.encoding, key, exc)) from None
    except csv.Error as exc:
        raise LoadError(f"{path}: not a readable CSV file ({exc})") from None


def _undecodable(path: Path, encoding: str, key: str, exc: UnicodeDecodeError) -> str:
    """Where the file stops being `encoding` text (its line and bytes), and what to set."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            try:
                line.decode(encoding)
            except UnicodeDecodeError as found:
                bad = line[found.start:found.end]
                shown = line[max(0, found.start - 20):found.end + 20].decode(encoding, errors="replace").strip()
                return (f"{path} line {number}: not {encoding} text (byte {bad.hex(' ')} in {shown!r}); a Windows "
                        f"export is often cp1252 (a Latin-1 one latin-1): set {key}.encoding: cp1252 in the mapping "
                        "(the file's own encoding)")
    return f"{path}: not {encoding} text ({exc})"


def _csv(path: Path, source: Source) -> Iterator[Record]:
    with path.open(encoding=source.encoding, newline="") as handle:
        reader = csv.reader(handle, delimiter=source.delimiter)
        header = next(reader, None)
        if header is None:
            raise LoadError(f"{path}: the file is empty")
        names = [name.strip() for name in header]
        for cells in reader:
            if not any(cell.strip() for cell in cells):
                continue
            if len(cells) < len(names):
                raise LoadError(f"{path} line {reader.line_num} has {len(cells)} fields but the header has "
                                f"{len(names)}: the row is cut short (a quoted field left open, or a line break "
                                "inside a field?); fix the line or export the file again")
            if any(cell.strip() for cell in cells[len(names):]):  # empty trailing cells are an export's habit
                raise LoadError(f"{path} line {reader.line_num} has {len(cells)} fields but the header has "
                                f"{len(names)}: a field holds the delimiter {source.delimiter!r} unquoted (a comma in "
                                "a name, a decimal comma?), which shifts every field after it; quote the field or "
                                "export the file again")
            fields: dict[str, Any] = {}
            for name, cell in zip(names, cells):
                fields.setdefault(name, cell)
            yield Record(f"{path.name} line {reader.line_num}", fields)


def _jsonl(path: Path, source: Source) -> Iterator[Record]:
    with path.open(encoding=source.encoding) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LoadError(f"{path} line {number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
            if not isinstance(value, dict):
                raise LoadError(f"{path} line {number}: expected a JSON object, got {type(value).__name__}")
            yield Record(f"{path.name} line {number}", value)


def _json(path: Path, source: Source) -> list[Record]:
    records = source.records
    document = read_json(path)
    found = _select(document, records.split(".") if records else [], path.name)
    if not isinstance(found, list):
        keys = f" with keys {', '.join(map(str, document))}" if isinstance(document, dict) else ""
        raise LoadError(f"{path}: {'the document' if not records else repr(records)} is not a list of records "
                        f"(the document is a {type(document).__name__}{keys}); set records: in the mapping to the "
                        "dotted path of the list, '*' for each element of a list (e.g. '*.records')")
    out: list[Record] = []
    for index, item in enumerate(found):
        if not isinstance(item, dict):
            raise LoadError(f"{path} records[{index}]: expected a JSON object, got {type(item).__name__}")
        out.append(Record(f"{path.name} records[{index}]", item))
    return out


def _select(value: Any, steps: list[str], where: str) -> Any:
    if not steps:
        return value
    step, rest = steps[0], steps[1:]
    if step == "*":
        if not isinstance(value, list):
            raise LoadError(f"{where}: '*' expects a list, found {type(value).__name__}")
        out: list[Any] = []
        for item in value:
            selected = _select(item, rest, where)
            out.extend(selected if isinstance(selected, list) else [selected])
        return out
    if isinstance(value, dict) and step in value:
        return _select(value[step], rest, where)
    raise LoadError(f"{where}: no {step!r} in the document (keys: "
                    f"{', '.join(map(str, value)) if isinstance(value, dict) else type(value).__name__})")


def field_value(fields: Mapping[str, Any], path: str) -> Any:
    """The value at `path`: the field of that exact name, else the dotted path through objects (a string holding
    a JSON object is read as one; a number steps into a list). None when absent."""
    value = _lookup(fields, path)
    return None if value is _ABSENT else value


def has_field(fields: Mapping[str, Any], path: str) -> bool:
    """Whether the record has the field at `path` (its value may be empty): a mapping naming a field no record
    has is a typo."""
    return _lookup(fields, path) is not _ABSENT


_ABSENT = object()


def _lookup(fields: Mapping[str, Any], path: str) -> Any:
    if path in fields:
        return fields[path]
    current: Any = fields
    for step in path.split("."):
        if isinstance(current, str) and current.lstrip().startswith("{"):
            try:
                current = json.loads(current)
            except json.JSONDecodeError:
                return _ABSENT
        if isinstance(current, Mapping) and step in current:
            current = current[step]
        elif isinstance(current, list) and step.isdigit() and int(step) < len(current):
            current = current[int(step)]
        else:
            return _ABSENT
    return current


_READERS: dict[str, Callable[[Path, Source], Iterable[Record]]] = {"csv": _csv, "json": _json, "jsonl": _jsonl}
