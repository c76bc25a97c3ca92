"""How a test run asks for the contract suite: which subjects (the --fhir-contract option, its environment
variable, or the FHIR_CONTRACT_SUBJECTS of a test module that imports the checks) and which PostgreSQL server."""
from __future__ import annotations

import os
import re
from types import ModuleType

import pytest

from server.contract.samples import Subject, load_subjects

SUBJECTS_OPTION = "--fhir-contract"
SUBJECTS_ENV = "ORGUNIT_FHIR_CONTRACT_SUBJECTS"  # when the option is not given
POSTGRES_OPTION = "--fhir-contract-postgres"
POSTGRES_ENV = "ORGUNIT_FHIR_CONTRACT_POSTGRES"
MODULE_SUBJECTS = "FHIR_CONTRACT_SUBJECTS"  # a test module's own subjects (a tuple of Subject), which it runs over
CONTEXT_OPTION = "--fhir-contract-context"  # subjects loaded before the checked ones, not checked (samples optional)
CONTEXT_ENV = "ORGUNIT_FHIR_CONTRACT_CONTEXT"
MODULE_CONTEXT = "FHIR_CONTRACT_CONTEXT"  # a test module's own context subjects
PREFIX_OPTION = "--fhir-contract-database-prefix"  # the scratch PostgreSQL database's name prefix
PREFIX_ENV = "ORGUNIT_FHIR_CONTRACT_DATABASE_PREFIX"
DEFAULT_PREFIX = "fhir_contract_"
CHECKS = "server.contract.checks"


def _option(config: pytest.Config, option: str) -> object:
    """The option's value; None when it is not given or the plugin that adds it is not loaded."""
    return config.getoption(option.lstrip("-").replace("-", "_"), default=None)


def requested(config: pytest.Config) -> str:
    """The subjects named for this run, `module[:ATTRIBUTE],...` ("": none, the plugin stays inert)."""
    given = _option(config, SUBJECTS_OPTION)
    return ",".join(given) if isinstance(given, list) and given else os.environ.get(SUBJECTS_ENV, "")


def subjects_of(config: pytest.Config, module: ModuleType) -> tuple[Subject, ...]:
    """The subjects `module`'s checks run over: its FHIR_CONTRACT_SUBJECTS, else those named for the run."""
    own = getattr(module, MODULE_SUBJECTS, None)
    found = tuple(own) if own is not None else load_subjects(requested(config))
    if not found:
        raise pytest.UsageError(f"{module.__name__} runs the contract checks over no subject: give {MODULE_SUBJECTS} "
                                f"or {SUBJECTS_OPTION}=module:SUBJECT")
    return found


def context_of(config: pytest.Config, module: ModuleType) -> tuple[Subject, ...]:
    """The subjects loaded as context of `module`'s checks (their plugins enabled, their data loaded first), never
    checked: its FHIR_CONTRACT_CONTEXT, else --fhir-contract-context (or its environment variable)."""
    own = getattr(module, MODULE_CONTEXT, None)
    if own is not None:
        return tuple(own)
    given = _option(config, CONTEXT_OPTION)
    return load_subjects(",".join(given) if isinstance(given, list) and given else os.environ.get(CONTEXT_ENV, ""))


def database_prefix(config: pytest.Config) -> str:
    """The name prefix of the scratch PostgreSQL databases (a role allowed to create `team_*` only gives `team_`):
    lower-case letters, digits and underscores, starting with a letter."""
    given = _option(config, PREFIX_OPTION)
    prefix = str(given) if given else os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", prefix):
        raise pytest.UsageError(f"{PREFIX_OPTION}={prefix!r}: lower-case letters, digits and _, starting with a "
                                "letter, at most 41 characters")
    return prefix


def postgres_server(config: pytest.Config) -> str | None:
    """The PostgreSQL server the PostgreSQL cases make their scratch database on (None: those cases skip)."""
    given = _option(config, POSTGRES_OPTION)
    return str(given) if given else os.environ.get(POSTGRES_ENV) or None
