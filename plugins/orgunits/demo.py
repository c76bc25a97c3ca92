"""A deterministic synthetic 5-level health pyramid (country > regions > districts > areas > facilities)."""
from __future__ import annotations

import math
import random
import string
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from sqlalchemy import Engine

from plugins.orgunits.demo_boundaries import outlines, with_boundaries
from plugins.orgunits.importers.transaction import import_units
from plugins.orgunits.changes import Allowed
from plugins.orgunits.records import TypeRecord, UnitRecord
from server import LoadError, normalize

LEVELS = 5
DATA_SOURCE = "Demo"
SOURCE_VERSION = 1
LAT_RANGE = (9.4, 15.0)
LON_RANGE = (-5.4, 2.3)
_MARGIN = 0.8

COUNTRY = TypeRecord("Pays", "COUNTRY", "COUNTRY", 1)
REGION = TypeRecord("Région sanitaire", "REGION", "REGION", 2)
DISTRICT = TypeRecord("District sanitaire", "DISTRICT", "DISTRICT", 3)
AREA = TypeRecord("Aire de santé", "HEALTH_AREA", "AREA", 4)
CSPS = TypeRecord("Centre de santé et de promotion sociale", "CSPS", "HF", 5)
CMA = TypeRecord("Centre médical avec antenne chirurgicale", "CMA", "HF", 5)
CHR = TypeRecord("Centre hospitalier régional", "CHR", "HF", 5)
DISPENSAIRE = TypeRecord("Dispensaire", "DISPENSAIRE", "HF", 5)
CLINIQUE = TypeRecord("Clinique privée", "CLINIQUE", "HF", 5)
FACILITY_TYPES = (CSPS, DISPENSAIRE, CLINIQUE, CMA, CHR)
FACILITY_WEIGHTS = (66, 14, 12, 6, 2)
DEMO_TYPES = (COUNTRY, REGION, DISTRICT, AREA, *FACILITY_TYPES)

_SYLLABLES = ("ba", "bo", "bou", "da", "dé", "di", "dio", "dou", "fa", "fo", "ga", "gou", "ka", "ké", "kou",
              "la", "lé", "lo", "ma", "mé", "mou", "na", "né", "ni", "nou", "ou", "sa", "sé", "si", "so", "sou",
              "ta", "té", "ti", "tio", "tou", "wa", "ya", "yé", "za", "zi", "dia", "gna", "kpa", "gbé", "sso")
_ENDINGS = ("gou", "dougou", "ra", "ni", "so", "la", "ba", "ko", "ma", "ré", "sso", "lasso", "go", "na", "bé",
            "kro", "dé", "mbo", "nga", "ya")
_REGION_PATTERNS = ("{}", "Hauts-{}", "Plateau {}", "Boucle du {}", "{}-Nord", "{}-Sud", "{}-Est", "{}-Centre",
                    "Cascades du {}")
_CLINIC_NAMES = ("Sainte-Marie", "Notre-Dame", "Espérance", "La Grâce", "Providence", "Le Bon Samaritain",
                 "Saint-Camille", "Al Nour", "Les Flamboyants")
_UID_FIRST = string.ascii_letters
_UID_REST = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class _Node:
    id: int
    place: str
    latitude: float
    longitude: float


def level_counts(size: int) -> tuple[int, ...]:
    """Units per level, growing by a common ratio r (1 + r + r² + r³ + r⁴ ≈ size); facilities take the rest."""
    if size < LEVELS:
        raise ValueError(f"a demo pyramid needs at least {LEVELS} units, got {size}")
    low, high = 1.0, float(size)
    for _ in range(80):
        middle = (low + high) / 2
        low, high = (middle, high) if sum(middle ** k for k in range(LEVELS)) < size else (low, middle)
    inner = [max(1, math.floor(low ** k)) for k in range(1, LEVELS - 1)]
    return (1, *inner, size - 1 - sum(inner))


def generate_demo(engine: Engine, size: int = 2000, seed: int = 42,
                  progress: Callable[[int], None] | None = None) -> int:
    """Write (or refresh) the "Demo" data source's `size` units (ids 1..size) through the importers' write path:
    one transaction, the ids of another data source refused, this write's own time as lastUpdated of what changes
    (a new version each, seen by counts and `_history?_since=`). Returns the number of units written."""
    counts = level_counts(size)
    epoch = datetime(2018, 1, 1, tzinfo=timezone.utc) + timedelta(days=seed % 1000)  # the units' own dates only

    def pyramid() -> Iterator[UnitRecord]:  # the same records each time (the same seed)
        return _Pyramid(random.Random(seed), epoch).records(counts)

    upper = frozenset(kind.short_name for kind in (COUNTRY, REGION, DISTRICT))
    records = with_boundaries(pyramid(), outlines(pyramid(), upper))  # the upper levels' boundaries
    try:
        report = import_units(engine, data_source=DATA_SOURCE, version=SOURCE_VERSION, types=DEMO_TYPES,
                              records=records, progress=progress, fmt="demo",
                              allow=RESHAPED)
    except LoadError as exc:
        raise LoadError(f"demo (ids 1..{size:,}): {exc.message}; nothing written: write the demo into its own "
                        "database (--database)") from None
    return report.total


# another size or seed reshapes the pyramid: its moves are intended
RESHAPED = Allowed(reparent=True, reclassify=True)


class _Pyramid:
    def __init__(self, rng: random.Random, epoch: datetime) -> None:
        self.rng = rng
        self.epoch = epoch
        self.next_id = 1

    def records(self, counts: tuple[int, ...]) -> Iterator[UnitRecord]:
        rng = self.rng
        country_place = self.place()
        country = _Node(self._take_id(), country_place, sum(LAT_RANGE) / 2, sum(LON_RANGE) / 2)
        yield self.unit(country, f"République du {country_place}", COUNTRY, None, aliases=(country_place,))
        parents = [country]
        spreads = (0.0, 0.0, 0.6, 0.18, 0.05)
        for depth in range(2, LEVELS + 1):
            children: list[_Node] = []
            for parent, fan_out in zip(parents, self.fan_out(len(parents), counts[depth - 1])):
                for index in range(fan_out):
                    if depth == 2:
                        node = self.node(rng.uniform(LAT_RANGE[0] + _MARGIN, LAT_RANGE[1] - _MARGIN),
                                         rng.uniform(LON_RANGE[0] + _MARGIN, LON_RANGE[1] - _MARGIN))
                    else:
                        node = self.node(parent.latitude + rng.gauss(0, spreads[depth - 1]),
                                         parent.longitude + rng.gauss(0, spreads[depth - 1]))
                    yield self.level_unit(depth, node, parent, index)
                    if depth < LEVELS:
                        children.append(node)
            parents = children

    def level_unit(self, depth: int, node: _Node, parent: _Node, index: int) -> UnitRecord:
        rng = self.rng
        if depth == 2:
            name = rng.choice(_REGION_PATTERNS).format(node.place)
            return self.unit(node, name, REGION, parent, aliases=self.maybe((f"Région sanitaire {name}",), 0.3))
        if depth == 3:
            return self.unit(node, f"DS {node.place}", DISTRICT, parent,
                             aliases=self.maybe((f"District sanitaire de {node.place}",), 0.4))
        if depth == 4:
            gps = rng.random() < 0.3
            return self.unit(node, node.place, AREA, parent, gps=gps,
                             aliases=self.maybe((f"Aire de santé de {node.place}",), 0.15))
        kind = rng.choices(FACILITY_TYPES, FACILITY_WEIGHTS)[0]
        place = parent.place if index == 0 else node.place
        name, long_name = self.facility_names(kind, place)
        aliases: tuple[str, ...] = ()
        if rng.random() < 0.2:
            aliases = (long_name,) if rng.random() < 0.6 else (long_name, normalize(name).upper())
        return self.unit(node, name, kind, parent, gps=True, aliases=aliases,
                         altitude=round(rng.uniform(150, 700), 1) if rng.random() < 0.5 else None)

    def facility_names(self, kind: TypeRecord, place: str) -> tuple[str, str]:
        if kind is CSPS:
            return f"CSPS {place}", f"Centre de santé et de promotion sociale de {place}"
        if kind is DISPENSAIRE:
            return f"Dispensaire de {place}", f"Dispensaire isolé de {place}"
        if kind is CLINIQUE:
            label = self.rng.choice(_CLINIC_NAMES) if self.rng.random() < 0.6 else place
            return f"Clinique {label}", f"Clinique privée {label} ({place})"
        if kind is CMA:
            return f"CMA {place}", f"Centre médical avec antenne chirurgicale de {place}"
        return f"CHR {place}", f"Centre hospitalier régional de {place}"

    def unit(self, node: _Node, name: str, kind: TypeRecord, parent: _Node | None, *, gps: bool = False,
             aliases: tuple[str, ...] = (), altitude: float | None = None) -> UnitRecord:
        rng = self.rng
        created = self.epoch + timedelta(seconds=rng.randrange(2 * 365 * 86400))
        updated = created if rng.random() < 0.4 else created + timedelta(seconds=rng.randrange(365 * 86400))
        opening = closing = None
        if (kind.depth or 0) >= 4 and rng.random() < 0.4:
            opening = date(1960, 1, 1) + timedelta(days=rng.randrange(55 * 365))
        if (kind.depth or 0) >= 3 and rng.random() < 0.03:
            first = max(opening or date(2005, 1, 1), date(2005, 1, 1))
            closing = first + timedelta(days=1 + rng.randrange(max(1, (self.epoch.date() - first).days - 1)))
        status = "VALID"
        if (kind.depth or 0) >= 3:
            draw = rng.random()
            status = "NEW" if draw < 0.05 else "REJECTED" if draw < 0.07 else "VALID"
        return UnitRecord(
            id=node.id,
            name=name,
            type_short_name=kind.short_name,
            validation_status=status,
            uuid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            source_ref=self.uid(),
            aliases=aliases,
            parent_id=parent.id if parent else None,
            latitude=node.latitude if gps else None,
            longitude=node.longitude if gps else None,
            altitude=altitude,
            opening_date=opening,
            closing_date=closing,
            created_at=created,
            updated_at=updated,
        )

    def node(self, latitude: float, longitude: float) -> _Node:
        return _Node(self._take_id(), self.place(), round(_clamp(latitude, LAT_RANGE), 6),
                     round(_clamp(longitude, LON_RANGE), 6))

    def fan_out(self, parents: int, children: int) -> list[int]:
        """Children per parent: at least one each when possible, the rest spread unevenly."""
        rng = self.rng
        counts = [1 if children >= parents else 0] * parents
        weights = [rng.uniform(0.3, 1.7) for _ in range(parents)]
        for index in rng.choices(range(parents), weights, k=children - sum(counts)):
            counts[index] += 1
        return counts

    def place(self) -> str:
        rng = self.rng
        word = rng.choice(_SYLLABLES) + (rng.choice(_SYLLABLES) if rng.random() < 0.6 else "") + rng.choice(_ENDINGS)
        word = word[0].upper() + word[1:]
        if rng.random() < 0.12:
            other = rng.choice(_SYLLABLES) + rng.choice(_ENDINGS)
            word = f"{word}-{other[0].upper()}{other[1:]}"
        return word

    def maybe(self, aliases: tuple[str, ...], probability: float) -> tuple[str, ...]:
        return aliases if self.rng.random() < probability else ()

    def uid(self) -> str:
        rng = self.rng
        return rng.choice(_UID_FIRST) + "".join(rng.choices(_UID_REST, k=10))

    def _take_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])
