from __future__ import annotations

from tests.support.contract import contract_context, subjects
from tests.support.fixtures import client_fixture, context_fixture

# every subject's plugins enabled and sample data loaded, on each backend; a client whose token sees its whole account
contract_ctx = context_fixture(lambda url, var: contract_context(url, var, subjects()))
api = client_fixture(authorized=True, context="contract_ctx")
