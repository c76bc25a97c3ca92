"""The data lifecycle end to end through the CLI: load, change the source, reload, sync the changes."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from server.app import create_app
from server.access.mint import mint_token
from server.settings import load_settings
from tests.support.contexts import IASO_CSV
from tests.support.commands import run_cli
from tests.support.validators import assert_valid


def rewrite(rows: list[dict[str, str]], header: list[str], path: Path) -> None:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in rows:
        writer.writerow(row["__cells__"])
    path.write_text(out.getvalue(), encoding="utf-8")


def read_csv() -> tuple[list[str], list[dict[str, Any]]]:
    reader = csv.reader(io.StringIO(IASO_CSV.read_text(encoding="utf-8-sig")))
    header = next(reader)
    rows = [{"__cells__": cells, **dict(zip(header, cells))} for cells in reader]
    return header, rows


def _looks_again(client: Any) -> None:
    """What the server does within a second of a load (it looks for new versions once a second: a load that
    finished within that second of its last look is not seen yet, and the history's sync point excludes it)."""
    client.app.state.ctx.freshness.expire()


def test_load_change_reload_sync_delete(database_url: str, tmp_path: Path, closing_client: Any) -> None:
    settings_path = tmp_path / "settings.yaml"
    settings_path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n")
    run_cli("load", "iaso-csv", str(IASO_CSV), settings=settings_path, database=database_url)
    settings = load_settings(settings_path, database_url)
    client = closing_client(create_app(settings))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"

    header, rows = read_csv()
    by_ref = {r["Référence externe"]: r for r in rows}
    district = by_ref["CTtB0TPRvWc"]  # DS Boromo
    facility = next(r for r in rows if r["Type"].endswith("- HF") and r["Ref Ext parent 2"] == "CTtB0TPRvWc")
    new_area = next(r for r in rows if r["Type"].endswith("- AREA") and r["Référence externe"] != facility["Ref Ext parent 1"])
    children = client.get(f"/fhir/Location/{district['ID']}/$children?_count=100").json()
    child_ids = {e["resource"]["id"] for e in children["entry"]}
    assert child_ids

    district["__cells__"][header.index("Nom")] = "DS Boromo (renommé)"
    facility["__cells__"][header.index("Ref Ext parent 1")] = new_area["Référence externe"]
    facility["__cells__"][header.index("parent 1")] = new_area["Nom"]
    changed = tmp_path / "changed.csv"
    rewrite(rows, header, changed)

    _looks_again(client)
    before = client.get("/fhir/Location?_count=0").json()["meta"]["lastUpdated"]  # the sync point: after the first load
    run_cli("load", "iaso-csv", str(changed), settings=settings_path, database=database_url)
    _looks_again(client)

    history = client.get(f"/fhir/Location/_history?_since={before}&_count=100").json()
    assert_valid(history)
    got = {(e["resource"]["id"], e["resource"]["meta"]["versionId"]) for e in history["entry"]}
    expected = {(i, "2") for i in {district["ID"], facility["ID"], *child_ids}}
    assert got == expected and history["total"] == len(expected)
    assert client.get(f"/fhir/Location/{district['ID']}/_history/1").json()["name"] == "DS Boromo"
    assert client.get(f"/fhir/Location/{district['ID']}").json()["name"] == "DS Boromo (renommé)"
    moved = client.get(f"/fhir/Location/{facility['ID']}").json()
    assert moved["partOf"]["reference"] == f"Location/{new_area['ID']}"

    # the same changed file again: nothing new
    run_cli("load", "iaso-csv", str(changed), settings=settings_path, database=database_url)
    _looks_again(client)
    assert client.get(f"/fhir/Location/_history?_since={before}").json()["total"] == len(expected)

    # drop a leaf facility and reload with --delete-missing
    leaf = next(r for r in rows if r["Type"].endswith("- HF") and r is not facility)
    rewrite([r for r in rows if r is not leaf], header, tmp_path / "fewer.csv")
    run_cli("load", "iaso-csv", str(tmp_path / "fewer.csv"), "--delete-missing", settings=settings_path,
            database=database_url)
    _looks_again(client)
    gone = client.get(f"/fhir/Location/{leaf['ID']}")
    assert gone.status_code == 410
    assert client.get("/fhir/Location?_count=0").json()["total"] == len(rows) - 1
    last = client.get(f"/fhir/Location/{leaf['ID']}/_history").json()["entry"][0]
    assert last["request"]["method"] == "DELETE" and "resource" not in last
