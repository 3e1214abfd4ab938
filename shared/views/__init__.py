"""The read model: what a case, the pending effects, the alerts, the counts by status and the drain check look
like, built once and used alike by the JSON API, the web pages and the operator commands (which only parse
arguments and print).

Every view is bounded by what is stuck, not by what exists: counts come from aggregate queries
(``DocumentStore.count``), lists are keyset pages (``casekeeper.core.ports.next_page``), and the drain check asks
the indexed question ``shared.workflow.run_marker`` keeps. Nothing here imports what shows the views (the
handlers, the pages, the commands) or the composition root (the import-linter contract ``views``). One module
writes: :mod:`.resolution`, an effect's resolution, which the operations page and ``casekeeper effects
resolve`` perform alike.
"""
