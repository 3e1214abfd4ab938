"""The approver's and the operator's pages: identity, CSRF and rendering, independent of the host.

``identity`` reads who is signed in (App Service Authentication's ``X-MS-CLIENT-PRINCIPAL``, or the
local host's stand-in), ``csrf`` guards the forms, ``render`` turns views into autoescaped HTML from
``templates/``. The handlers that use them are in :mod:`shared.handlers.pages`.
"""
