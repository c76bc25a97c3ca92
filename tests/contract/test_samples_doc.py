"""plugins/README.md section 5 lists the org-unit subject's sample data a third-party sample refers to (its Locations'
ids and codes, the data source, the directory Organizations): rendered here from the samples themselves, so the
documentation cannot drift from them (trial of issue 41, finding 2). On a mismatch the message holds the block to
paste between the markers."""
from __future__ import annotations

from pathlib import Path

from plugins.orgunits.contract_samples import DIRECTORY, NS, ORGANIZATION, SOURCE
from plugins.orgunits.location import LocationConfig
from plugins.orgunits.organization import DIRECTORY_IDS
from plugins.orgunits.samples import TYPES, UNITS, SOURCE_NAME
from server import Settings, Versioning

README = Path(__file__).resolve().parents[2] / "plugins" / "README.md"
BEGIN, END = "<!-- contract-samples:begin (tests/contract/test_samples_doc.py) -->", "<!-- contract-samples:end -->"


def _locations() -> list[str]:
    names = {t.short_name: t.name for t in TYPES}
    status = LocationConfig.from_settings(Settings()).status_map  # the plugin's default, as the suite serves it
    rows = ["| Location | name | `type` (code) | `partof` | `identifier` (of `<ns>/sid/ministere-de-la-sante`) | "
            "`status` | also |", "|---|---|---|---|---|---|---|"]
    for unit in UNITS:
        also = [*(f"alias `{a}`" for a in unit.aliases),
                *([f"at {unit.latitude}, {unit.longitude}"] if unit.latitude is not None else []),
                *([f"closes {unit.closing_date.isoformat()}"] if unit.closing_date is not None else [])]
        rows.append(f"| {unit.id} | {unit.name} | `{unit.type_short_name}` ({names[unit.type_short_name]}) | "
                    f"{unit.parent_id if unit.parent_id is not None else '—'} | `{unit.source_ref}` | "
                    f"{status[unit.validation_status]} | "
                    f"{'; '.join(also) or ''} |")
    return rows


def _organizations() -> list[str]:
    ids = {entry["code"]: str(DIRECTORY_IDS + n) for n, entry in enumerate(DIRECTORY)}  # given in file order
    assert set(ids.values()) | {"1"} == ORGANIZATION.ids  # what the subject's samples say too
    rows = ["| Organization | name | `identifier` | `type` | `partof` |", "|---|---|---|---|---|",
            f"| 1 (the data source) | {SOURCE_NAME} | `<ns>/sid/data-source\\|{SOURCE}` "
            "| `govt` | — |"]
    for entry in DIRECTORY:
        kind = entry.get("type")
        shown = f"`{kind['code']}`" if kind else "—"
        rows.append(f"| {ids[entry['code']]} | {entry['name']} | `<ns>/sid/organization\\|{entry['code']}` | {shown} | "
                    f"{ids[entry['partof']] if entry.get('partof') else '—'} |")
    return rows


def rendered() -> str:
    return "\n".join([BEGIN, *_locations(), "", *_organizations(), END])


def test_the_readme_lists_the_samples_as_they_are() -> None:
    text = README.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"plugins/README.md section 5 lacks the samples block:\n{rendered()}"
    shown = text[text.index(BEGIN):text.index(END) + len(END)]
    assert shown == rendered(), f"plugins/README.md's samples block is stale; paste:\n{rendered()}"


def test_the_readme_lists_every_versioning_field() -> None:
    """Section 6's table of `Versioning` fields names each field the declaration has (finding 5)."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("**`Versioning(...)`"):text.index("**`to_resource` gets two kinds of row.**")]
    assert [f for f in Versioning.__dataclass_fields__ if f"| `{f}`" not in table] == []
