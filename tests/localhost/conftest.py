"""The local host's tests use the end-to-end tests' supplier stub (it keeps a request log)."""

from tests.e2e.conftest import supplier  # noqa: F401 - a pytest fixture, provided to this folder
