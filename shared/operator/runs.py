"""Moved to :mod:`shared.views.runs` (the read model the pages, the API and the commands share); these names
stay importable from here for scripts written against the old place."""

from shared.views.runs import (
    PROBLEM_TEXT,
    RUN_TEXT,
    Build,
    CheckpointView,
    Problem,
    RunState,
    graph_hash_of,
    inspect_checkpoint,
)

__all__ = [
    "PROBLEM_TEXT",
    "RUN_TEXT",
    "Build",
    "CheckpointView",
    "Problem",
    "RunState",
    "graph_hash_of",
    "inspect_checkpoint",
]
