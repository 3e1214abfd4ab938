"""The supplier portal: the one external system the workflow acts on (it requests credit notes).

- :mod:`shared.supplier.portal`: :class:`SupplierPortal`, the HTTP client, which turns every answer
  into a credit note, ``DownstreamRejected`` or ``OutcomeUnknown``.
- :mod:`shared.supplier.stub`: a local portal on the standard library, with fault injection, for
  trying Casekeeper out and for tests (``casekeeper supplier-stub --port 8765``).
"""

from shared.supplier.portal import SupplierPortal

__all__ = ["SupplierPortal"]
