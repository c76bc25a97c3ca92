"""The provider contract suite's inputs (tests/contract): what a provider package supplies about its sample data,
and the server context built over every package's data.

A package supplies a `Subject`: the settings that enable its plugins, a loader of its sample data, and one
`Samples` per resource type it serves. The suite checks every registered provider against them."""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from server.engine.context import ServerContext, create_context
from server.settings import Settings
from server.storage.prerender import refresh
from tests.support.contexts import SECRET, make_settings

SUBJECTS_ENV = "ORGUNIT_FHIR_CONTRACT_SUBJECTS"  # "module:attribute,module:attribute", in loading order
BUILT_IN = "tests.orgunits.contract_samples:SUBJECT,tests.proof.contract_samples:SUBJECT"


@dataclass(frozen=True)
class Search:
    """`param=value` (param may carry a modifier) must find the resource `finds` among its matches."""

    param: str
    value: str
    finds: str


@dataclass(frozen=True)
class Scope:
    """A token of the sample data's account limited to the subtrees `roots` sees exactly `sees` of the sample
    resources (`Samples.ids` and `Samples.deleted`: a deleted one in scope answers 410, out of scope 404)."""

    roots: tuple[str, ...]
    sees: frozenset[str]


@dataclass(frozen=True)
class Samples:
    resource_type: str
    ids: frozenset[str]  # every live resource of the sample data: a full-scope search without parameters finds these
    searches: tuple[Search, ...] = ()  # at least one per declared search parameter
    bad_values: tuple[tuple[str, str], ...] = (("_count", "many"),)  # each answers 400
    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # id -> its version ids, newest first
    deleted: frozenset[str] = frozenset()  # ids whose newest version is a deletion (410)
    hidden: frozenset[str] = frozenset()  # ids the sample data holds that no token may see (404, as unknown)
    scopes: tuple[Scope, ...] = ()
    tenanted: bool = True  # a token of another account sees none of it
    account: str = "default"


@dataclass(frozen=True)
class Subject:
    """A provider package under contract: its plugins' settings, its sample data, its samples."""

    name: str
    plugins: Mapping[str, Any]  # settings.plugins entries
    load: Callable[[Settings], None]  # writes the sample data (the schema is migrated; earlier subjects' data is there)
    samples: tuple[Samples, ...]
    site: Path | None = None  # a directory holding the package and its dist-info (not installed): put on sys.path


def subjects() -> tuple[Subject, ...]:
    """The subjects under contract: those SUBJECTS_ENV names, else the shipped packages and the proof."""
    found = []
    for name in filter(None, (os.environ.get(SUBJECTS_ENV) or BUILT_IN).split(",")):
        module, _, attribute = name.strip().partition(":")
        found.append(getattr(importlib.import_module(module), attribute or "SUBJECT"))
    return tuple(found)


def all_samples() -> tuple[Samples, ...]:
    return tuple(s for subject in subjects() for s in subject.samples)


@contextmanager
def installed(sites: Sequence[Path]) -> Iterator[None]:
    """Packages found through their entry points while inside (their directories on sys.path)."""
    with pytest.MonkeyPatch.context() as patch:
        for site in sites:
            patch.syspath_prepend(str(site))
        yield


@contextmanager
def contract_context(url: str, var: Path, chosen: Sequence[Subject]) -> Iterator[ServerContext]:
    """A server context over every subject's sample data (each loaded in turn), bodies pre-rendered."""
    with ExitStack() as stack:
        stack.enter_context(installed([s.site for s in chosen if s.site is not None]))
        plugins = {name: spec for s in chosen for name, spec in s.plugins.items()}
        settings = make_settings(url, var, auth={"secret": SECRET}, plugins=plugins)
        ctx = create_context(settings)
        stack.callback(ctx.db.dispose)
        ctx.extensions.schema.upgrade(ctx.db)
        for subject in chosen:
            subject.load(settings)
        refresh(ctx.db, ctx.registry)
        yield ctx


def entries(bundle: dict[str, Any], mode: str = "match") -> list[tuple[str, str]]:
    """(resource type, id) of a searchset's entries in that search mode."""
    return [(e["resource"]["resourceType"], e["resource"]["id"]) for e in bundle.get("entry", ())
            if e.get("search", {}).get("mode", "match") == mode]


def every_page(client: Any, url: str, headers: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The bundle at `url` and every one its next links lead to (at most 100)."""
    pages: list[dict[str, Any]] = []
    while url and len(pages) < 100:
        answer = client.get(url, headers=headers or {})
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        url = next((link["url"] for link in pages[-1].get("link", ()) if link["relation"] == "next"), "")
    return pages


def outcome_code(answer: Any, status: int) -> str:
    """The issue code of an OperationOutcome answered with `status`."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["resourceType"] == "OperationOutcome", body
    return str(body["issue"][0]["code"])
