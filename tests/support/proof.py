"""The proof package of issue 13 (tests/proof/site): a third-party provider found through its entry point."""
from __future__ import annotations

from pathlib import Path

from server.contract import load_files
from server.settings import Settings

PROOF = Path(__file__).resolve().parents[1] / "proof"
SITE = PROOF / "site"  # the "installed" package and its dist-info
SERVICES = PROOF / "services.json"
SERVICES_UPDATE = PROOF / "services-update.json"  # renames service 2 (a second location), drops service 7
WORKERS = PROOF / "workers.json"  # practitioners and their roles, at facilities named by code
WORKERS_UPDATE = PROOF / "workers-update.json"  # moves role 3 from Location 3 to Location 30, drops role 5, and
# practitioner 5 with its one role 6 (a deletion with its referrers)
PLUGINS = {"healthcare_services": {"enabled": True}}


def load_services(settings: Settings, *paths: Path) -> None:
    """Each file in turn, through the package's registered load format (as `orgunit-fhir load services-json`)."""
    load_files(settings, "services-json", *paths)
