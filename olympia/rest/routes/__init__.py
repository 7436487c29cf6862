"""The routes of the REST server, one ``APIRouter`` per resource; each
route is a thin translation: parse and validate the request, check the
names, call one Catalog method (or, for ``transactions/commit``, one catalog
transaction), and serialise the result. Routes are plain functions, so
FastAPI runs them in its worker threads; the catalog calls block.

- :mod:`.config`: ``/v1/config``, included at the root and under ``/txn/{txn_id}``;
- :mod:`.namespaces`, :mod:`.tables`, :mod:`.views`, :mod:`.transactions`
  (``transactions/commit``): the Iceberg REST catalog API, the routers of
  :data:`CATALOG`, included below ``/v1/{prefix}`` and below
  ``/txn/{txn_id}/v1/{prefix}``;
- :mod:`.unsupported`: operations answered with an error;
- :mod:`.txn`: olympia's ``/txn`` (transactions that span requests);
- :mod:`.dependencies`: what the routers share: the served catalog and the
  scope (catalog or transaction) of a request; :mod:`.names` and
  :mod:`.common`: name checks, the route class, error wrapping, paging.
"""

from olympia.rest.routes import namespaces, tables, transactions, views

#: The routers of the catalog API below ``/v1/{prefix}``, in routing order.
CATALOG = (namespaces.router, tables.router, views.router, transactions.router)
