"""Moved to :mod:`casekeeper.checkpoint_decoding` (the exact allow-list decoder is the guard package's, for any
workflow). These names stay importable from here for the app's modules that still use them; the handler
:func:`on_refused` installs lives in :mod:`casekeeper.checkpoint_decoding`."""

from casekeeper.checkpoint_decoding import (
    FRAMEWORK_CHECKPOINT_TYPES,
    RefusalHandler,
    decode_checkpoint_value,
    on_refused,
)

__all__ = ["FRAMEWORK_CHECKPOINT_TYPES", "RefusalHandler", "decode_checkpoint_value", "on_refused"]
