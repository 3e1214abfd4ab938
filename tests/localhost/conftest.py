"""The local host's tests use the end-to-end tests' supplier stub (it keeps a request log)."""

from tests.e2e import conftest as e2e

supplier = e2e.supplier
