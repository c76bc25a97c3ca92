"""The mapping file of `orgunit-fhir load mapped` (YAML): which field of a registry's export is each org-unit field,
for the units of the file and for the levels above them (read from their own files, or from columns of the units'
file). Parsed and checked whole before any record is read; every error names the key at fault."""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from plugins.orgunits.importers.tabular import FORMATS, Record, Source, field_value, has_field
from plugins.orgunits.records import KEEPABLE, slugify
from server import LoadError

SINGLE = ("id", "name", "type", "parent", "status", "uuid", "latitude", "longitude", "altitude", "opening_date",
          "closing_date")
LISTS = ("aliases", "identifiers")
READING = ("format", "records", "delimiter", "encoding")
SECTION_KEYS = frozenset({*SINGLE, *LISTS, *READING, "category", "prefix"})
LEVEL_KEYS = SECTION_KEYS | {"file", "identifier_system"}
TOP_KEYS = frozenset({"data_source", "identifier_system", "date_format", "root", "levels", "units"})
_CARRIES = {"status": "validation_status", "uuid": "uuid", "latitude": "latitude", "longitude": "longitude",
            "altitude": "altitude", "opening_date": "opening_date", "closing_date": "closing_date"}


class Unmapped(Exception):
    """A value that the field's `map` does not list."""


@dataclass(frozen=True)
class FieldSpec:
    """A field of the record (`path`, dotted), or a constant (`value`); `mapping` translates the values, `default`
    stands for an empty one."""
    key: str  # where it is in the mapping file: "units.status"
    path: str | None = None
    value: Any = None
    mapping: Mapping[str, Any] | None = None
    default: Any = None

    def get(self, fields: Mapping[str, Any]) -> Any:
        raw = field_value(fields, self.path) if self.path is not None else self.value
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return self.default
        if self.mapping is None:
            return raw
        text = str(raw).strip()
        if text in self.mapping:
            return self.mapping[text]
        folded = {str(k).casefold(): v for k, v in self.mapping.items()}
        if text.casefold() in folded:
            return folded[text.casefold()]
        raise Unmapped(text)

    def describe(self) -> str:
        return f"field {self.path!r}" if self.path is not None else f"constant {self.value!r}"


@dataclass(frozen=True)
class Section:
    """How to read the units of one file (the units, or a level above them)."""
    key: str  # "units", "levels[0]"
    fields: Mapping[str, FieldSpec]
    aliases: tuple[FieldSpec, ...]
    identifiers: tuple[FieldSpec, ...]
    source: Source
    prefix: str  # source reference = prefix + id
    category: str | None
    file: Path | None = None  # a level read from its own file; None: the units' file (a level from its columns)
    identifier_system: str | None = None  # the system of this level's source references; None: the mapping's

    def spec(self, name: str) -> FieldSpec | None:
        return self.fields.get(name)

    @property
    def kept(self) -> frozenset[str]:
        """The fields this section does not carry: a stored unit keeps them."""
        carried = {_CARRIES[name] for name in self.fields if name in _CARRIES}
        if self.aliases or self.identifiers:
            carried.add("aliases")
        return KEEPABLE - carried


@dataclass(frozen=True)
class Root:
    id: str
    name: str
    type: str
    category: str = "COUNTRY"


@dataclass(frozen=True)
class UnitMapping:
    path: Path
    data_source: str
    identifier_system: str | None
    date_format: str | None
    root: Root | None
    levels: tuple[Section, ...]
    units: Section

    def identifier_system_of(self, section: str) -> str | None:
        """The system of the source references of a section's units ("levels[0]"): its own; None: the data
        source's (the top-level `identifier_system`, else the default)."""
        return next((level.identifier_system for level in self.levels if level.key == section), None)


def read_mapping(path: str | Path) -> UnitMapping:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LoadError(f"mapping {path}: cannot read the file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise LoadError(f"mapping {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise LoadError(f"mapping {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return parse_mapping(raw, path)


def parse_mapping(raw: Any, path: Path) -> UnitMapping:
    where = f"mapping {path.name}"
    top = _mapping(raw, where, TOP_KEYS)
    if "units" not in top:
        raise LoadError(f"{where}: 'units' is required: the fields of the units of the file (id, name, type, ...)")
    levels_raw = top.get("levels") or []
    if not isinstance(levels_raw, list):
        raise LoadError(f"{where}: levels: expected a list of levels, top first")
    levels = tuple(_section(item, f"levels[{i}]", where, path.parent, level=i) for i, item in enumerate(levels_raw))
    units = _section(top["units"], "units", where, path.parent, level=None)
    _check_chain(levels, units, where)
    for section in (*levels, units):
        _check_axes(section, where)
    return UnitMapping(path, _text(top.get("data_source"), "data_source", where) or path.stem,
                       _system(top.get("identifier_system"), "identifier_system", where),
                       _text(top.get("date_format"), "date_format", where), _root(top.get("root"), where),
                       levels, units)


def _check_chain(levels: tuple[Section, ...], units: Section, where: str) -> None:
    """Levels read from files come first; a section below a level read from a file names its parent field."""
    derived = False
    for index, section in enumerate((*levels, units)):
        if section.file is not None and derived:
            raise LoadError(f"{where}: {section.key} has a file below a level read from the units' columns; list "
                            "the levels with their own file first")
        derived = derived or (section.file is None and section is not units)
        above = levels[index - 1] if index > 0 else None
        if above is not None and above.file is not None and section.spec("parent") is None:
            raise LoadError(f"{where}: {section.key}.parent is required: the field holding the id of its parent in "
                            f"{above.key} (read from {above.file.name})")


_LATITUDE = re.compile(r"(?:^|[^a-z])(?:lat|latitude|y)(?:[^a-z]|$)")
_LONGITUDE = re.compile(r"(?:^|[^a-z])(?:lon|lng|long|longitude|x)(?:[^a-z]|$)")


def _check_axes(section: Section, where: str) -> None:
    """A section whose `latitude` names a longitude field and `longitude` a latitude one has them swapped (issue 38:
    every point published in the sea or on another continent)."""
    lat, lon = section.spec("latitude"), section.spec("longitude")
    if lat is None or lon is None or lat.path is None or lon.path is None:
        return
    if _LONGITUDE.search(lat.path.lower()) and _LATITUDE.search(lon.path.lower()):
        raise LoadError(f"{where}: {section.key}.latitude names the field {lat.path!r} and {section.key}.longitude "
                        f"the field {lon.path!r}: latitude and longitude look swapped; swap them in the mapping")


def _root(raw: Any, where: str) -> Root | None:
    if raw is None:
        return None
    fields = _mapping(raw, f"{where}: root", frozenset({"id", "name", "type", "category"}))
    values = {key: _text(fields.get(key), f"root.{key}", where) for key in ("id", "name", "type", "category")}
    if not values["id"] or not values["name"]:
        raise LoadError(f"{where}: root needs an id and a name (a unit above the top level: the country)")
    return Root(values["id"], values["name"], values["type"] or "Country", (values["category"] or "COUNTRY").upper())


def _section(raw: Any, key: str, where: str, base: Path, *, level: int | None) -> Section:
    """The units (`level` None) or the level of that index."""
    fields = _mapping(raw, f"{where}: {key}", SECTION_KEYS if level is None else LEVEL_KEYS)
    for required in ("id", "name", "type"):
        if required not in fields:
            raise LoadError(f"{where}: {key}.{required} is required (a field name, or {{value: ...}} for a constant)")
    specs = {name: _spec(fields[name], f"{key}.{name}", where) for name in SINGLE if name in fields}
    fmt = _text(fields.get("format"), f"{key}.format", where)
    if fmt is not None and fmt not in FORMATS:
        raise LoadError(f"{where}: {key}.format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    delimiter = _text(fields.get("delimiter"), f"{key}.delimiter", where) or ","
    if len(delimiter) != 1:
        raise LoadError(f"{where}: {key}.delimiter: expected one character, got {delimiter!r}")
    source = Source(fmt, delimiter, _text(fields.get("encoding"), f"{key}.encoding", where) or "utf-8-sig",
                    _text(fields.get("records"), f"{key}.records", where))
    file_name = _text(fields.get("file"), f"{key}.file", where)
    type_spec = specs["type"]
    prefix = fields.get("prefix")
    if prefix is None:
        prefix = "" if level is None else (f"{slugify(str(type_spec.value))}-" if type_spec.path is None else
                                           f"level{level + 1}-")
    return Section(key, specs, _list(fields.get("aliases"), f"{key}.aliases", where),
                   _list(fields.get("identifiers"), f"{key}.identifiers", where), source, str(prefix),
                   (_text(fields.get("category"), f"{key}.category", where) or "").upper() or None,
                   (base / file_name) if file_name else None,
                   _system(fields.get("identifier_system"), f"{key}.identifier_system", where))


def _spec(raw: Any, key: str, where: str) -> FieldSpec:
    if isinstance(raw, str) and raw.strip():
        return FieldSpec(key, path=raw.strip())
    if isinstance(raw, dict) and set(raw) <= {"field", "value", "map", "default"} and \
            ("field" in raw) != ("value" in raw):
        mapping = raw.get("map")
        if mapping is not None and not isinstance(mapping, dict):
            raise LoadError(f"{where}: {key}.map: expected a mapping of source value -> value")
        path = raw.get("field")
        if path is not None and (not isinstance(path, str) or not path.strip()):
            raise LoadError(f"{where}: {key}.field: expected a field name")
        return FieldSpec(key, path.strip() if path else None, raw.get("value"),
                         {str(k): v for k, v in mapping.items()} if mapping else None, raw.get("default"))
    raise LoadError(f"{where}: {key}: expected a field name, {{field: NAME, map: {{...}}, default: ...}} or "
                    f"{{value: CONSTANT}}, got {raw!r}")


def _list(raw: Any, key: str, where: str) -> tuple[FieldSpec, ...]:
    if raw is None:
        return ()
    items = raw if isinstance(raw, list) else [raw]
    return tuple(_spec(item, f"{key}[{i}]", where) for i, item in enumerate(items))


def _mapping(raw: Any, where: str, known: frozenset[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise LoadError(f"{where}: expected a mapping of keys ({', '.join(sorted(known))}), got {type(raw).__name__}")
    unknown = sorted(set(map(str, raw)) - known)
    if unknown:
        raise LoadError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return raw


# a URL with a host (https://registry.example.org/ward) or a URN (urn:oid:...), no blank: a bare host name or a
# typo'd scheme would publish a system no consumer can resolve
_ABSOLUTE_URI = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#]+|urn:[A-Za-z0-9][^\s]*:)[^\s]*")


def _system(raw: Any, key: str, where: str) -> str | None:
    """An identifier system: an absolute URI (`https://registry.example.org/ward`, `urn:oid:...`)."""
    system = _text(raw, key, where)
    if system is not None and not _ABSOLUTE_URI.fullmatch(system):
        raise LoadError(f"{where}: {key}: expected an absolute URI (https://... or urn:...), got {system!r}")
    return system


def _text(raw: Any, key: str, where: str) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise LoadError(f"{where}: {key}: expected text, got {raw!r}")
    return str(raw).strip() or None


_SAMPLED = 1000  # records whose nested objects suggest a close match


def check_fields(section: Section, records: list[Record], path: Path, read_by: Section | None = None) -> None:
    """Every field the section names is in at least one record (a CSV: its header), before anything is read: a
    typo'd `parent` or `id` would otherwise hang every unit from the root, silently. `read_by`: the section whose
    reading options read the file (the units', for a level read from their columns)."""
    reader = read_by or section
    for spec in (*section.fields.values(), *section.aliases, *section.identifiers):
        if spec.path is None or any(has_field(record.fields, spec.path) for record in records):
            continue
        names = sorted({str(name) for record in records for name in record.fields})
        nested = {f"{name}.{inner}" for record in records[:_SAMPLED] for name, value in record.fields.items()
                  if isinstance(value, dict) for inner in value}  # `ward.code` for a typo'd `ward.cod`
        close = difflib.get_close_matches(spec.path, [*names, *sorted(nested)], n=1, cutoff=0.6)
        other = next((c for c in ";\t|," if len(names) == 1 and c in names[0] and c != reader.source.delimiter), None)
        hint = (f"; the header is one field holding {other!r}: the file's delimiter is likely {other!r} (set "
                f"{reader.key}.delimiter: {other!r} in the mapping)" if other else "")
        raise LoadError(f"mapping: {spec.key}: no record of {path.name} has the field {spec.path!r}"
                        f"{f' (did you mean {close[0]!r}?)' if close else ''}; its fields: {', '.join(names)}{hint}")
