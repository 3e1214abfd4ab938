"""The invoice domain, pure: the facts and statuses, the money rule, what each fact event does.

Imports only :mod:`casekeeper.core` (an import-linter contract in ``pyproject.toml`` checks it)."""
