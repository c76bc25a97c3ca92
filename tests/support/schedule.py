"""In what order the test files run (tests/conftest.py)."""
from __future__ import annotations

# The files that take longest (a minute or more each on two cores, both backends), longest first. They run first:
# `make test` runs each file whole on one worker, and one of them started last would run alone at the end while the
# other workers wait. Every other file keeps its place; a file's own tests keep their order.
LONGEST_FIRST = (
    "tests/html/test_explorer_scale.py",
    "tests/http/test_fuzz.py",
    "tests/orgunits/test_operating.py",
    "tests/http/test_live.py",
    "tests/search/test_sync.py",
    "tests/html/test_explorer_users.py",
    "tests/orgunits/test_demo.py",
    "tests/contract/test_plugin.py",
    "tests/bulk/test_client.py",
    "tests/orgunits/test_accounts_cli.py",
    "tests/search/test_plans.py",
    "tests/ops/test_lifecycle.py",
    "tests/ops/test_deployment.py",
    "tests/proof/test_plugin_api.py",
)
