"""`server.contract.load_files` hands a load format the arguments `orgunit-fhir load FORMAT PATH` would (trial of
issue 41, finding 1): every option the format declares with the command line's default, the given ones over them;
an option the format does not declare, or a required one left out, refused naming the format's options."""
from __future__ import annotations

import argparse
from typing import Any

import pytest

from plugins.orgunits.plugin import register_load_formats
from server import LoadFormat, LoadReport
from server.cli.data import format_arguments

FORMATS = {fmt.name: fmt for fmt in register_load_formats(None)}  # type: ignore[arg-type]


def _typed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, default="500")
    parser.add_argument("--label", default=None)


TYPED = LoadFormat("typed", "a format whose default goes through its type", lambda call: LoadReport(), _typed)
UNIT_DEFAULTS = {"data_source": None, "version": 1, "delete_missing": False, "account": "default",
                 "allow_reparent": False, "allow_mass_delete": False, "dry_run": False, "json": False}


@pytest.mark.parametrize("fmt, options, expected", [
    pytest.param(FORMATS["organizations"], {"data_source": "moh"},
                 {"data_source": "moh", "account": "default", "system": None, "delete_missing": False,
                  "dry_run": False, "json": False}, id="organizations-defaults-filled-in"),
    pytest.param(FORMATS["organizations"], {"data_source": "moh", "account": "partner", "dry_run": True},
                 {"data_source": "moh", "account": "partner", "system": None, "dry_run": True},
                 id="given-options-over-the-defaults"),
    pytest.param(FORMATS["dhis2"], {}, UNIT_DEFAULTS, id="unit-format-defaults"),
    pytest.param(FORMATS["dhis2"], {"delete_missing": True, "version": 2},
                 {**UNIT_DEFAULTS, "delete_missing": True, "version": 2}, id="unit-format-given"),
    pytest.param(TYPED, {}, {"batch": 500, "label": None, "json": False}, id="string-default-through-its-type"),
])
def test_a_format_gets_what_the_command_line_would_give(fmt: LoadFormat, options: dict[str, Any],
                                                        expected: dict[str, Any]) -> None:
    args = format_arguments(fmt, "file.json", options)
    assert {name: getattr(args, name) for name in expected} == expected
    assert (args.path, args.format, args.command) == ("file.json", fmt.name, "load")


@pytest.mark.parametrize("fmt, options, words", [
    pytest.param(FORMATS["organizations"], {"data_source": "moh", "sytem": "x"},
                 "load format 'organizations' has no option 'sytem'; its options: account, data_source, "
                 "delete_missing, dry_run, json, system", id="unknown-option-names-the-valid-ones"),
    pytest.param(FORMATS["organizations"], {"account": "default"},
                 "load format 'organizations' needs the option 'data_source'", id="required-option-left-out"),
    pytest.param(TYPED, {"dry_run": False}, "has no option 'dry_run'", id="dry-run-of-a-format-without-it"),
    pytest.param(FORMATS["dhis2"], {"database": "sqlite:///x.db"}, "has no option 'database'",
                 id="the-settings-are-the-calls-not-an-option"),
    pytest.param(FORMATS["dhis2"], {"data-source": "moh"}, "has no option 'data-source'",
                 id="option-names-are-dest-names"),
])
def test_a_mistaken_option_is_refused_naming_the_options(fmt: LoadFormat, options: dict[str, Any],
                                                         words: str) -> None:
    with pytest.raises(TypeError) as refused:
        format_arguments(fmt, "file.json", options)
    assert words in str(refused.value)
