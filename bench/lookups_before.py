"""The workforce load as it ran before the look-up API (bench/lookups.py's baseline): the proof package's loader
(healthcare_services.workers.load_resolving) resolving its facility codes with SQL on the org-unit plugin's table,
as packages did then. A variant of the bench, not of the package.

    python bench/lookups_before.py load workers-json FILE --settings S   # `orgunit-fhir load ...`, this loader

Run as a command it is `orgunit-fhir` with the format's loader swapped, importing no more than the command does:
the end-to-end baseline."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "proof" / "site")]

from sqlalchemy import bindparam, select  # noqa: E402

from healthcare_services.workers import load_resolving  # noqa: E402
from plugins.orgunits.tables import org_unit  # noqa: E402
from server.declare.extensions import LoadCall, LoadReport  # noqa: E402


def raw_sql(call: LoadCall, codes: list[str]) -> dict[str, str | None]:
    """The facility codes resolved as the package did before the look-up API: SQL on the org-unit plugin's table."""
    with call.engine.connect() as conn:
        query = select(org_unit.c.source_ref, org_unit.c.id).where(
            org_unit.c.source_ref.in_(bindparam("codes", expanding=True)))
        found = dict(conn.execute(query, {"codes": codes}).all())
    return {code: str(found[code]) if code in found else None for code in codes}


def before_lookups(call: LoadCall) -> LoadReport:
    """`load workers-json` as it ran before the look-up API (the same loader, its codes resolved by `raw_sql`)."""
    return load_resolving(call, raw_sql)


def main(argv: list[str]) -> int:
    import healthcare_services.provider as provider
    from server.cli.main import main as cli

    provider.WORKERS_JSON = replace(provider.WORKERS_JSON, load=before_lookups)
    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
