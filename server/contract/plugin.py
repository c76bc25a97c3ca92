"""The contract suite as a pytest plugin (the distribution's pytest11 entry point `server.contract.plugin`; or
`-p server.contract.plugin`). Inert unless asked: with --fhir-contract=module[:SUBJECT],... (or
ORGUNIT_FHIR_CONTRACT_SUBJECTS) it adds the checks of server.contract.checks to the session, over those subjects;
without, it only adds its options and the `postgres` marker. Guide: "Run the contract suite" in orgunit-fhir's
plugins/README.md."""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from server.contract.options import (
    CHECKS,
    CONTEXT_ENV,
    CONTEXT_OPTION,
    DEFAULT_PREFIX,
    POSTGRES_ENV,
    POSTGRES_OPTION,
    PREFIX_ENV,
    PREFIX_OPTION,
    SUBJECTS_ENV,
    SUBJECTS_OPTION,
    requested,
)

NODE = "fhir-contract"  # the checks' module: fhir-contract::test_read[Location-sqlite], -k fhir-contract

pytest.register_assert_rewrite(CHECKS, "server.contract.answers")  # their assertions explain a failure


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fhir-contract", "orgunit-fhir provider contract")
    group.addoption(SUBJECTS_OPTION, action="append", metavar="MODULE[:SUBJECT],...",
                    help="run the provider contract suite over these subjects (server.contract.Subject; "
                         f"SUBJECT when no attribute is given), in loading order; default: ${SUBJECTS_ENV}")
    group.addoption(POSTGRES_OPTION, metavar="URL",
                    help="a PostgreSQL server (libpq URL of a database there, its user may CREATE DATABASE) to run "
                         f"the suite on too, in a scratch database; default: ${POSTGRES_ENV}, else SQLite only")
    group.addoption(CONTEXT_OPTION, action="append", metavar="MODULE[:SUBJECT],...",
                    help="subjects the checked ones need (their plugins enabled, their sample data loaded first), "
                         f"not checked: their samples are optional; default: ${CONTEXT_ENV}")
    group.addoption(PREFIX_OPTION, metavar="PREFIX",
                    help=f"the name prefix of the scratch PostgreSQL databases (default {DEFAULT_PREFIX}; "
                         f"${PREFIX_ENV}): for a role that may create only databases so named")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres: needs a PostgreSQL server (the contract suite: "
                                       f"{POSTGRES_OPTION})")


class ContractChecks(pytest.Module):
    """server.contract.checks as a module of the session, imported by its name wherever the distribution is
    installed (pytest puts none of its directories on sys.path)."""

    def _getobj(self) -> ModuleType:
        return importlib.import_module(CHECKS)


@pytest.hookimpl(tryfirst=True)  # before the -k, -m and --deselect selections, and the fixtures' reordering
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not requested(config):
        return
    checks = ContractChecks.from_parent(session, path=Path(__file__).with_name("checks.py"), name=NODE,
                                        nodeid=NODE)
    items.extend(session.genitems(checks))
