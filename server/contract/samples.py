"""What a provider package tells the contract suite about its sample data: a `Subject` (the settings that enable
its plugins, a loader of its sample data, one `Samples` per resource type it serves), and how a subject is named
on the command line (`module[:ATTRIBUTE]`)."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.settings import Settings

DEFAULT_ATTRIBUTE = "SUBJECT"  # the attribute a subject's module holds it in when its name gives none


@dataclass(frozen=True)
class Search:
    """`GET [type]?{param}={value}` finds the resource `finds` among its matches (and only resources of
    `Samples.ids`, its `total` their number). `param` may carry a modifier (`name:exact`, `partof:below`): it counts
    for its base parameter. On a reference parameter without modifier, `value` (`Location/20` or `20`) also names
    the target the `_include` and `_revinclude` checks expect: its last path segment is the target's id, its type
    the parameter's first reference target."""

    param: str
    value: str
    finds: str


@dataclass(frozen=True)
class Scope:
    """A token of the sample data's account whose `roots` claim holds `roots` (`Location/10`, ...) sees exactly
    `sees` of the sample resources: its search without parameters lists `sees` less `Samples.deleted`; a read of an
    id of `sees` answers 200 (410 for a deleted one), of any other sample id 404 as an unknown id would; so do the
    history and versions of a versioned id outside `sees`.

    `versions`: the versions of an id (of `Samples.versions`) this token sees where they are not all of them (the id
    in `sees`) or none (outside): of a provider whose kept versions are each scoped by what scoped them while
    current (`Tenancy.versions`, `Via.versions`), those held inside its subtrees; of one that cannot scope each
    version, the current one alone. Its `_history` lists exactly these (404 when none), a vread of one of them
    answers it (410 for a deletion), of another 404."""

    roots: tuple[str, ...]
    sees: frozenset[str]
    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # id -> the versions (of `versions`) this token is shown as deletions: the resource left its view there (moved
    # out of its subtrees; of a provider scoped per version): a DELETE in `_history` (and `_since`), a vread 410
    departures: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Samples:
    """What the sample data holds of one resource type, as a caller of the HTTP API sees it."""

    resource_type: str
    # every live (not deleted) resource of the sample data that a token of the account sees whole: each read answers
    # it, and a search without parameters finds exactly these (paged with _count=1 and 2, each once)
    ids: frozenset[str]
    # at least one per search parameter the provider declares (the suite fails on a declared parameter without one)
    searches: tuple[Search, ...] = ()
    # (parameter, value) pairs each answering 400 with an OperationOutcome: a value the parameter refuses
    bad_values: tuple[tuple[str, str], ...] = (("_count", "many"),)
    # id -> its version ids, newest first, for a few ids (some at least when the provider declares versioning; none
    # when it does not: its _history answers 404). `_history` of the id lists exactly these, each vread answers
    # its version (a deleted id's newest one 410), a read the newest, and the type's history holds them all
    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # ids whose newest version is a deletion: a read answers 410 "deleted"; never found by a search; not in `ids`
    deleted: frozenset[str] = frozenset()
    # ids the sample data holds that no token of the account may see (of a provider scoped through a reference
    # without partitions, on a server of several accounts, a row that refers to nothing: it belongs to no account;
    # a trusted look-up finds it): a read answers 404 "not-found", as an unknown id; not in `ids`
    hidden: frozenset[str] = frozenset()
    # tokens limited to subtrees and what each sees (an account-wide provider: sees nothing, frozenset())
    scopes: tuple[Scope, ...] = ()
    # True: the resources belong to `account`, a token of another account sees none of them (search total 0,
    # reads 404), and the _include/_revinclude and history checks run. False for resources every caller sees
    # whatever its account (a StaticProvider's canonical resources): those checks are skipped
    tenanted: bool = True
    # the account the sample data belongs to: the database's first account, the one a token without an `account`
    # claim (the suite's client) sees; the other-account check uses a token of "not-<account>"
    account: str = "default"


@dataclass(frozen=True)
class Subject:
    """A provider package under contract: its plugins' settings, its sample data, its samples."""

    name: str
    # entries of `settings.plugins` (plugin name -> its settings, e.g. {"my_plugin": {"enabled": True}}); every
    # subject's entries are merged into one server's settings
    plugins: Mapping[str, Any]
    # writes the sample data into the server's database (`writing_engine(settings)`): its schema is migrated, the
    # data of the subjects named before this one is there
    load: Callable[[Settings], None]
    # one per resource type the package's providers serve: every registered provider must have one
    samples: tuple[Samples, ...]
    # a directory holding the package and its .dist-info (its entry points) when it is not installed: put on
    # sys.path while the server is built and runs (None: the package is installed)
    site: Path | None = None


def load_subjects(names: str) -> tuple[Subject, ...]:
    """The subjects `module[:ATTRIBUTE],module[:ATTRIBUTE]...` names, in that (loading) order; ATTRIBUTE is
    SUBJECT unless given."""
    found = []
    for name in filter(None, (n.strip() for n in names.split(","))):
        module, _, attribute = name.partition(":")
        subject = getattr(importlib.import_module(module), attribute or DEFAULT_ATTRIBUTE)
        if not isinstance(subject, Subject):
            raise TypeError(f"{name} is a {type(subject).__name__}, not a server.contract.Subject")
        found.append(subject)
    return tuple(found)
