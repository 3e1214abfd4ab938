"""The supplier portal: the one external system the workflow acts on (it requests credit notes).

:mod:`shared.supplier.portal` holds :class:`SupplierPortal`, the HTTP client, which turns every answer
into a credit note, ``DownstreamRejected`` or ``OutcomeUnknown``. The local stand-in for trying it out
and for tests is a dev tool: ``devhost.supplier_stub`` (``casekeeper supplier-stub``).
"""

from shared.supplier.portal import SupplierPortal

__all__ = ["SupplierPortal"]
