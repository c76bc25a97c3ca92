"""The proof package of issue 13 (tests/proof/site): a third-party provider found through its entry point."""
from __future__ import annotations

import argparse
from pathlib import Path

from server.cli.data import load_call
from server.extensions import load_extensions
from server.declare.progress import Progress
from server.settings import Settings
from server.storage.db import writing_engine

PROOF = Path(__file__).resolve().parents[1] / "proof"
SITE = PROOF / "site"  # the "installed" package and its dist-info
SERVICES = PROOF / "services.json"
SERVICES_UPDATE = PROOF / "services-update.json"  # renames service 2 (a second location), drops service 7
WORKERS = PROOF / "workers.json"  # practitioners and their roles, at facilities named by code
WORKERS_UPDATE = PROOF / "workers-update.json"  # moves role 3 from Location 3 to Location 30, drops role 5
PLUGINS = {"healthcare_services": {"enabled": True}}


def load_files(settings: Settings, name: str, *paths: Path) -> None:
    """Each file in turn, through the package's registered load format `name` (as `orgunit-fhir load NAME`)."""
    fmt = load_extensions(settings).load_formats[name]
    with writing_engine(settings) as engine:
        for path in paths:
            fmt.load(load_call(settings, engine, str(path), argparse.Namespace(), Progress(f"load {name}")))


def load_services(settings: Settings, *paths: Path) -> None:
    load_files(settings, "services-json", *paths)
