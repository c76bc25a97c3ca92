"""The provider contract over the shipped subjects: the org-unit package's Location, Organization and canonical
resources, then the proof package's (tests/proof). The checks are the distribution's (server/contract/checks.py),
run here as a module of this tree, on SQLite and on the local PostgreSQL; README.md here says how a provider
package runs them from its own repository."""
from __future__ import annotations

import pytest

from server.contract.checks import *  # the checks, their fixtures and their cases
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support import pg

FHIR_CONTRACT_SUBJECTS = (ORGUNITS, PROOF)


@pytest.fixture(scope="session")
def contract_postgres() -> str:
    """The tests' PostgreSQL server (started when it is down)."""
    pg.ensure_running()
    return pg.ADMIN_URL
