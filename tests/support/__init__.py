"""Test helpers, apart from the tests: databases, data, servers, validators."""
