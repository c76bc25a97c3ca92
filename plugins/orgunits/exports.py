"""The explorer's exports, which also draw its maps: `$geojson` and `$csv`, every Location a search matches (type
level: `Location/$csv?type=CSPS`) or a unit and every unit below it (instance level: `Location/12/$geojson`), the
caller's scope applied, streamed in chunks of the materialized path's order (parents before children) from the
call's read-only connection (one snapshot on PostgreSQL).

Each row is read once with the columns below, as the Location provider publishes them (its status map, its closing
rule); `properties` keeps only the named properties (the map asks for four), `positioned=true` only the units with
a position (the points of a map)."""
from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import orjson
from sqlalchemy import ColumnElement, Row, and_, case, select

from plugins.orgunits.tables import org_unit, org_unit_type
from plugins.orgunits.views import PUBLISHED_FROM, parent
from server import Answer, InvalidRequest, OperationCall, instant

CHUNK = 5000  # rows a statement reads (each its own statement timeout)
GEOJSON = "application/geo+json"
CSV = "text/csv"
OWN_PARAMETERS = ("properties", "positioned")


@dataclass(frozen=True)
class Property:
    """One exported property: its name (CSV column, GeoJSON property), the column it reads (COLUMNS) and its value
    from that column's (never called with None: no value, left out of GeoJSON, an empty CSV cell)."""

    name: str
    column: str
    value: Callable[[Any], Any] = lambda v: v
    text: bool = False  # free text from the data (a CSV cell that could start a spreadsheet formula is escaped)


def _day(value: date | str) -> str:
    return value.isoformat() if isinstance(value, date) else value


def _instant(value: datetime | str) -> str:
    return instant(datetime.fromisoformat(value) if isinstance(value, str) else value)


def properties(status_map: dict[str, str]) -> tuple[Property, ...]:
    return (
        Property("name", "name", text=True),
        Property("type", "type_code", text=True),
        Property("type_name", "type_name", text=True),
        Property("level", "type_depth"),
        Property("status", "validation_status", status_map.__getitem__),
        Property("closed", "closed", bool),
        Property("opening_date", "opening_date", _day),
        Property("closing_date", "closing_date", _day),
        Property("code", "source_ref", text=True),
        Property("uuid", "uuid", lambda v: f"urn:uuid:{v}"),
        Property("parent", "parent_id", lambda v: f"Location/{v}"),
        Property("parent_name", "parent_name", text=True),
        Property("last_updated", "updated_at", _instant),
        Property("version", "version_id", str),
    )


POSITION = ("id", "path", "latitude", "longitude", "altitude")  # the first columns of every row, in this order


def columns(closed: ColumnElement[bool], needed: Sequence[str]) -> list[ColumnElement[Any]]:
    """The columns read: the position and the path (the order) always, then what the properties shown need (fewer
    columns, fewer joins: the country's points are read in a fraction of the time)."""
    named: dict[str, ColumnElement[Any]] = {
        "name": org_unit.c.name, "uuid": org_unit.c.uuid, "source_ref": org_unit.c.source_ref,
        "validation_status": org_unit.c.validation_status, "parent_id": org_unit.c.parent_id,
        "opening_date": org_unit.c.opening_date, "closing_date": org_unit.c.closing_date,
        "updated_at": org_unit.c.updated_at, "version_id": org_unit.c.version_id, "closed": case((closed, 1), else_=0).label("closed"),
        "type_code": org_unit_type.c.short_name.label("type_code"), "type_name": org_unit_type.c.name.label("type_name"),
        "type_depth": org_unit_type.c.depth.label("type_depth"), "parent_name": parent.c.name.label("parent_name")}
    return [org_unit.c.id, org_unit.c.path, org_unit.c.latitude, org_unit.c.longitude, org_unit.c.altitude,
            *(named[key] for key in dict.fromkeys(needed))]


def selection(call: OperationCall, own: Sequence[str]) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The search parameters (for the look-up) and this operation's own ones (the last of each), apart."""
    search = [(k, v) for k, v in call.parameters if k not in own]
    mine = {k: v for k, v in call.parameters if k in own}
    return search, mine


def matching(call: OperationCall, search: list[tuple[str, str]]) -> list[ColumnElement[bool]]:
    """What the call selects, as the caller sees it, in turn: the search's matches; at the instance level the unit
    (among them), then every unit below it among them (its path sorts before theirs: one path order). Apart, each
    one index range: an OR of the two would be sorted whole for every chunk."""
    assert call.lookup is not None
    conn = call.connection
    if call.id is None:
        return [call.lookup.condition("Location", search, connection=conn)]
    return [call.lookup.condition("Location", [("_id", call.id), *search], connection=conn),
            call.lookup.condition("Location", [("partof:below", call.id), *search], connection=conn)]


def chunks(call: OperationCall, conditions: Sequence[ColumnElement[bool]], shown: Sequence[ColumnElement[Any]]
           ) -> Iterator[Sequence[Row[Any]]]:
    """Every row each condition selects, in turn, in path order, CHUNK at a time (a keyset on the path: each row
    once)."""
    for where in conditions:
        yield from _chunks(call, where, shown)


def _chunks(call: OperationCall, where: ColumnElement[bool], shown: Sequence[ColumnElement[Any]]
            ) -> Iterator[Sequence[Row[Any]]]:
    after: str | None = None
    while True:
        query = select(*shown).select_from(PUBLISHED_FROM).where(where)
        if after is not None:
            query = query.where(org_unit.c.path > after)
        found = call.connection.execute(query.order_by(org_unit.c.path).limit(CHUNK)).all()
        if found:
            yield found
        if len(found) < CHUNK:
            return
        after = found[-1][1]


def chosen(available: tuple[Property, ...], asked: str | None) -> tuple[Property, ...]:
    if asked is None:
        return available
    names = [n.strip() for n in asked.split(",") if n.strip()]
    known = {p.name: p for p in available}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise InvalidRequest(f"properties: {', '.join(unknown) or 'none named'}; the properties are "
                             f"{', '.join(known)}")
    return tuple(known[n] for n in dict.fromkeys(names))


def positioned(mine: dict[str, str]) -> bool:
    value = mine.get("positioned", "false")
    if value not in ("true", "false"):
        raise InvalidRequest(f"positioned: true or false, not {value[:40]!r}")
    return value == "true"


class Export:
    """One call's export: what it selects and shows, its first chunk read before the answer starts (an error there is
    an OperationOutcome; past it a cut-short body)."""

    def __init__(self, call: OperationCall, status_map: dict[str, str], closed: ColumnElement[bool]) -> None:
        search, mine = selection(call, OWN_PARAMETERS)
        self.shown = chosen(properties(status_map), mine.get("properties"))
        where = matching(call, search)
        if positioned(mine):
            where = [and_(w, org_unit.c.latitude.is_not(None), org_unit.c.longitude.is_not(None)) for w in where]
        read = list(dict.fromkeys(p.column for p in self.shown))
        # each property shown: its name, the position of its column in a row, its value
        self.plan = [(p.name, len(POSITION) + read.index(p.column), p.value) for p in self.shown]
        self.chunks = chunks(call, where, columns(closed, read))
        self.first = next(self.chunks, None)

    def each(self) -> Iterator[Sequence[Row[Any]]]:
        if self.first is not None:
            yield self.first
            yield from self.chunks

    def close(self) -> None:
        self.chunks.close()


def _batched(items: Iterator[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """Small pieces joined into chunks of about `size` bytes (fewer thread hops and sends)."""
    pending: list[bytes] = []
    held = 0
    for item in items:
        pending.append(item)
        held += len(item)
        if held >= size:
            yield b"".join(pending)
            pending, held = [], 0
    if pending:
        yield b"".join(pending)


def _feature(row: Row[Any], plan: Sequence[tuple[str, int, Callable[[Any], Any]]]) -> bytes:
    """One Feature (its id an integer), written as bytes around its serialized parts: a third of the time of a dict
    per feature (the country's 96,000 points)."""
    longitude, latitude, altitude = row[3], row[2], row[4]
    shown = orjson.dumps({name: value(row[i]) for name, i, value in plan if row[i] is not None})
    if latitude is None or longitude is None:
        return b'{"type":"Feature","id":"%d","geometry":null,"properties":%b}' % (row[0], shown)
    point = orjson.dumps((longitude, latitude) if altitude is None else (longitude, latitude, altitude))
    return b'{"type":"Feature","id":"%d","geometry":{"type":"Point","coordinates":%b},"properties":%b}' % (
        row[0], point, shown)


def geojson_features(export: Export) -> Iterator[bytes]:
    """A FeatureCollection, a feature a line: its id, a Point (longitude, latitude[, altitude]) or no geometry, and
    the properties shown that have a value."""
    yield b'{"type":"FeatureCollection","features":[\n'
    first = True
    for chunk in export.each():
        yield (b"" if first else b",\n") + b",\n".join([_feature(row, export.plan) for row in chunk])
        first = False
    yield b"\n]}\n"


FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_lines(export: Export) -> Iterator[bytes]:
    """UTF-8 with a byte order mark (spreadsheets then read the accents right), a header line, CRLF line ends
    (RFC 4180), the position as latitude, longitude, altitude; a text cell that a spreadsheet would take for a
    formula starts with an apostrophe."""
    header = ["id", *(p.name for p in export.shown), "latitude", "longitude", "altitude"]
    texts = {p.name for p in export.shown if p.text}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")

    def cell(name: str, value: Any) -> Any:
        if isinstance(value, bool):
            return "true" if value else "false"
        return "'" + value if name in texts and isinstance(value, str) and value.startswith(FORMULA) else value

    writer.writerow(header)
    yield "\ufeff".encode("utf-8") + buffer.getvalue().encode("utf-8")
    for chunk in export.each():
        buffer.seek(0)
        buffer.truncate()
        writer.writerows([row[0], *("" if row[i] is None else cell(name, value(row[i])) for name, i, value in export.plan),
                          *("" if v is None else v for v in (row[2], row[3], row[4]))] for row in chunk)
        yield buffer.getvalue().encode("utf-8")


class Streamed:
    """The answer's body: the export's bytes in chunks; closing it stops the reading."""

    def __init__(self, export: Export, body: Iterator[bytes]) -> None:
        self.export, self.body = export, _batched(body)

    def __iter__(self) -> Streamed:
        return self

    def __next__(self) -> bytes:
        return next(self.body)

    def close(self) -> None:
        self.body.close()
        self.export.close()


def file_name(call: OperationCall, extension: str) -> str:
    return f"locations-{call.id}.{extension}" if call.id is not None else f"locations.{extension}"


# answers depend on the caller's token: no shared cache stores them
PRIVATE = {"Cache-Control": "private, no-store", "Vary": "Accept, Authorization"}


def exporter(status_map: dict[str, str], closed: ColumnElement[bool],
             kind: str) -> Callable[[OperationCall], Answer]:
    """The handler of `$geojson` (kind "geojson") or `$csv` ("csv")."""
    media, body, extension = ((GEOJSON, geojson_features, "geojson") if kind == "geojson" else
                              (f"{CSV}; charset=utf-8; header=present", csv_lines, "csv"))

    def handler(call: OperationCall) -> Answer:
        export = Export(call, status_map, closed)
        return Answer(200, {"Content-Type": media, **PRIVATE,
                            "Content-Disposition": f'attachment; filename="{file_name(call, extension)}"'},
                      stream=Streamed(export, body(export)))

    return handler
