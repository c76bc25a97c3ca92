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
from sqlalchemy import ColumnElement, RowMapping, and_, or_, select

from plugins.orgunits.tables import org_unit, org_unit_type
from plugins.orgunits.views import PUBLISHED_FROM, parent
from server import Answer, InvalidRequest, OperationCall, instant

CHUNK = 5000  # rows a statement reads (each its own statement timeout)
GEOJSON = "application/geo+json"
CSV = "text/csv"
OWN_PARAMETERS = ("properties", "positioned")


@dataclass(frozen=True)
class Property:
    """One exported property: its name (CSV column, GeoJSON property) and its value from a published row (None: left
    out of GeoJSON, an empty CSV cell)."""

    name: str
    value: Callable[[RowMapping], Any]
    text: bool = False  # free text from the data (a CSV cell that could start a spreadsheet formula is escaped)


def _day(value: date | str | None) -> str | None:
    return value.isoformat() if isinstance(value, date) else value


def _instant(value: datetime | str | None) -> str | None:
    return instant(datetime.fromisoformat(value) if isinstance(value, str) else value) if value else None


def properties(status_map: dict[str, str]) -> tuple[Property, ...]:
    return (
        Property("name", lambda r: r["name"], text=True),
        Property("type", lambda r: r["type_code"], text=True),
        Property("type_name", lambda r: r["type_name"], text=True),
        Property("level", lambda r: r["type_depth"]),
        Property("status", lambda r: status_map[r["validation_status"]]),
        Property("closed", lambda r: bool(r["closed"])),
        Property("opening_date", lambda r: _day(r["opening_date"])),
        Property("closing_date", lambda r: _day(r["closing_date"])),
        Property("code", lambda r: r["source_ref"], text=True),
        Property("uuid", lambda r: f"urn:uuid:{r['uuid']}" if r["uuid"] else None),
        Property("parent", lambda r: f"Location/{r['parent_id']}" if r["parent_id"] is not None else None),
        Property("parent_name", lambda r: r["parent_name"], text=True),
        Property("last_updated", lambda r: _instant(r["updated_at"])),
        Property("version", lambda r: str(r["version_id"])),
    )


def columns(closed: ColumnElement[bool]) -> tuple[ColumnElement[Any], ...]:
    return (org_unit.c.id, org_unit.c.name, org_unit.c.path, org_unit.c.uuid, org_unit.c.source_ref,
            org_unit.c.validation_status, org_unit.c.parent_id, org_unit.c.latitude, org_unit.c.longitude,
            org_unit.c.altitude, org_unit.c.opening_date, org_unit.c.closing_date, org_unit.c.updated_at,
            org_unit.c.version_id, closed.label("closed"), org_unit_type.c.short_name.label("type_code"),
            org_unit_type.c.name.label("type_name"), org_unit_type.c.depth.label("type_depth"),
            parent.c.name.label("parent_name"))


def selection(call: OperationCall, own: Sequence[str]) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The search parameters (for the look-up) and this operation's own ones (the last of each), apart."""
    search = [(k, v) for k, v in call.parameters if k not in own]
    mine = {k: v for k, v in call.parameters if k in own}
    return search, mine


def matching(call: OperationCall, search: list[tuple[str, str]]) -> ColumnElement[bool]:
    """What the call selects, as the caller sees it: the search's matches; at the instance level the unit and every
    unit below it among them."""
    assert call.lookup is not None
    conn = call.connection
    if call.id is None:
        return call.lookup.condition("Location", search, connection=conn)
    return or_(call.lookup.condition("Location", [("_id", call.id), *search], connection=conn),
               call.lookup.condition("Location", [("partof:below", call.id), *search], connection=conn))


def rows(call: OperationCall, where: ColumnElement[bool], closed: ColumnElement[bool]) -> Iterator[RowMapping]:
    """Every row `where` selects, in path order, CHUNK at a time (a keyset on the path: each row once)."""
    after: str | None = None
    while True:
        query = select(*columns(closed)).select_from(PUBLISHED_FROM).where(where)
        if after is not None:
            query = query.where(org_unit.c.path > after)
        found = call.connection.execute(query.order_by(org_unit.c.path).limit(CHUNK)).mappings().all()
        yield from found
        if len(found) < CHUNK:
            return
        after = found[-1]["path"]


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
            where = and_(where, org_unit.c.latitude.is_not(None), org_unit.c.longitude.is_not(None))
        self.rows = rows(call, where, closed)
        self.first = next(self.rows, None)

    def each(self) -> Iterator[RowMapping]:
        if self.first is not None:
            yield self.first
            yield from self.rows

    def close(self) -> None:
        self.rows.close()


def _batched(items: Iterator[bytes], size: int = 64 << 10) -> Iterator[bytes]:
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


def geojson_features(export: Export) -> Iterator[bytes]:
    """A FeatureCollection, a feature a line: its id, a Point (longitude, latitude[, altitude]) or no geometry, and
    the properties shown that have a value."""
    yield b'{"type":"FeatureCollection","features":[\n'
    first = True
    for row in export.each():
        if row["latitude"] is not None and row["longitude"] is not None:
            point = [row["longitude"], row["latitude"], *([row["altitude"]] if row["altitude"] is not None else [])]
            geometry: dict[str, Any] | None = {"type": "Point", "coordinates": point}
        else:
            geometry = None
        shown = {p.name: v for p in export.shown if (v := p.value(row)) is not None}
        feature = {"type": "Feature", "id": str(row["id"]), "geometry": geometry, "properties": shown}
        yield (b"" if first else b",\n") + orjson.dumps(feature)
        first = False
    yield b"\n]}\n"


FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_lines(export: Export) -> Iterator[bytes]:
    """UTF-8 with a byte order mark (spreadsheets then read the accents right), a header line, CRLF line ends
    (RFC 4180), the position as latitude, longitude, altitude; a text cell that a spreadsheet would take for a
    formula starts with an apostrophe."""
    header = ["id", *(p.name for p in export.shown), "latitude", "longitude", "altitude"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")

    def line(cells: list[Any]) -> bytes:
        writer.writerow(cells)
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text.encode("utf-8")

    def cell(prop: Property, row: RowMapping) -> Any:
        value = prop.value(row)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return "'" + value if prop.text and isinstance(value, str) and value.startswith(FORMULA) else value

    yield "\ufeff".encode("utf-8") + line(header)
    for row in export.each():
        yield line([row["id"], *(cell(p, row) for p in export.shown),
                    *("" if row[k] is None else row[k] for k in ("latitude", "longitude", "altitude"))])


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
