"""The dependencies the routers share (FastAPI's "bigger applications"
shape): what the application serves, kept in ``app.state``, and the
:class:`Scope` each request works on, which the path decides: the served
catalog, or under ``/txn/{txn_id}/`` the open transaction ``txn_id``
(spec/rest.md §8), and in either, the namespaces ``sys.dtxns.<id>...`` of
the distributed transactions (§9)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.concurrency import contextmanager_in_threadpool
from pyiceberg.catalog import Catalog
from pyiceberg.typedef import Identifier

from olympia.codec import CommitInfo
from olympia.rest.errors import RestError, bad_request
from olympia.rest.models import RenameTableRequest
from olympia.rest.routes.names import check_level, check_namespace
from olympia.rest.sessions import OpenTransactions, commit_info_of

#: The path parameter of the routes under ``/txn/{txn_id}/``.
TXN_ID = "txn_id"


@dataclass(frozen=True)
class Served:
    """What an application serves (its ``state.olympia``): ``catalog`` under
    ``/v1/{prefix}/``; ``sessions``, the transactions that span requests
    (none when the catalog is not olympia's, which has no ``/txn`` routes)."""

    catalog: Catalog
    prefix: str
    sessions: OpenTransactions | None


def served(request: Request) -> Served:
    """What the application of ``request`` serves (a dependency)."""
    found: Served = request.app.state.olympia
    return found


def open_transactions(request: Request) -> OpenTransactions:
    """The transactions that span requests (a dependency of the ``/txn`` routes)."""
    sessions = served(request).sessions
    if sessions is None:
        raise RuntimeError("the /txn routes need an olympia catalog")
    return sessions


async def resolve(request: Request) -> AsyncIterator[Scope]:
    """The :class:`Scope` of ``request`` (a dependency): the served catalog,
    or under ``/txn/{txn_id}/`` the open transaction ``txn_id``, held for the
    request (one request at a time per transaction).

    Asynchronous, so that the common case (the served catalog) costs no
    worker-thread hop; holding a transaction (which may wait for another
    request's turn, or resume it from storage) runs in a worker thread."""
    here = served(request)
    txn_id = request.path_params.get(TXN_ID)
    if txn_id is None:
        yield Scope(here.catalog, here.catalog, sessions=here.sessions)
        return
    async with contextmanager_in_threadpool(open_transactions(request).using(txn_id)) as txn:
        yield Scope(here.catalog, txn.catalog, txn)


@contextmanager
def transaction(catalog: Catalog, info: CommitInfo | None = None) -> Iterator[Any]:
    """A transaction of ``catalog`` with commit metadata ``info``, yielding
    its Catalog view; committed on a clean exit."""
    begin = getattr(catalog, "transaction", None)
    if begin is None:
        raise RestError(
            406,
            "UnsupportedOperationException",
            f"the catalog {type(catalog).__name__} has no multi-table transactions",
        )
    given = (
        {"message": info.message, "author": info.author, "properties": info.properties}
        if info is not None and not info.empty
        else {}
    )
    with begin(**given) as txn:
        # A plain multi-table commit: its requirements hold against the newest
        # metadata, as a single table commit's (spec/rest.md §3).
        if hasattr(txn, "strict_requirements"):
            txn.strict_requirements = True
        # The transaction's Catalog view: tables loaded through it read the
        # transaction's snapshot, and their commits are staged in it.
        yield txn.catalog


DTXNS = ("sys", "dtxns")


@dataclass(frozen=True)
class Scope:
    """What a request works on: ``root`` is the served catalog; ``catalog``
    receives the calls (``root``, or the Catalog view of the open transaction
    ``txn`` for requests under ``/txn/{id}/``). ``sessions`` (top-level
    requests only) resolves the namespaces ``sys.dtxns.<id>...`` (§9)."""

    root: Catalog
    catalog: Any
    txn: Any | None = None
    sessions: OpenTransactions | None = None

    def _dtxn(self, levels: Identifier) -> str | None:
        if self.sessions is not None and len(levels) > 3 and levels[:2] == DTXNS:
            return levels[2]
        return None

    def scope_key(self, levels: Identifier) -> str:
        return self._dtxn(levels) or ""

    @contextmanager
    def route(self, levels: Identifier) -> Iterator[tuple[Any, Identifier, Identifier]]:
        """``(catalog, levels inside it, the prefix taken off)`` for a namespace:
        ``sys.dtxns.<id>.<rest>`` is ``<rest>`` in transaction ``<id>``."""
        txn_id = self._dtxn(levels)
        if txn_id is None or self.sessions is None:
            yield self.catalog, levels, ()
            return
        with self.sessions.using(txn_id) as txn:
            yield txn.catalog, levels[3:], levels[:3]

    def system(self, levels: Identifier) -> System | None:
        """The system namespace ``sys``, ``sys.dtxns`` or ``sys.dtxns.<id>``, if ``levels`` is one."""
        if self.sessions is None or not levels or levels[0] != "sys" or len(levels) > 3:
            return None
        if len(levels) >= 2 and levels[1] != "dtxns":
            return None
        return System(self.sessions, levels, self.root)

    def atomic(self, catalog: Any, info: CommitInfo | None = None) -> AbstractContextManager[Any]:
        """A catalog transaction for a multi-step change, with commit metadata
        ``info``; inside a transaction (``/txn/{id}/`` or ``sys.dtxns.<id>``)
        that transaction itself, which takes no metadata here.

        Raises:
            RestError: 400, ``info`` given inside a transaction.
        """
        if catalog is self.root:
            return transaction(self.root, info)
        if info is not None and not info.empty:
            raise bad_request(
                "commit-message, commit-author and commit-properties cannot be given inside a "
                "transaction: give them when it begins (POST /txn, or the commit.* properties "
                "of sys.dtxns.<id>) or when it commits"
            )
        return nullcontext(catalog)


@dataclass(frozen=True)
class System:
    """``sys``, ``sys.dtxns`` (the open distributed transactions) and
    ``sys.dtxns.<id>`` (one of them), spec/rest.md §9."""

    sessions: OpenTransactions
    levels: Identifier
    root: Catalog

    @property
    def txn_id(self) -> str | None:
        return self.levels[2] if len(self.levels) == 3 else None

    def children(self) -> list[Identifier]:
        if self.txn_id is not None:
            with self.sessions.using(self.txn_id) as txn:
                return [(*self.levels, *n) for n in txn.catalog.list_namespaces(())]
        if len(self.levels) == 1:
            real = (
                self.root.list_namespaces(self.levels)
                if self.root.namespace_exists(self.levels)
                else []
            )
            return sorted({DTXNS, *real})
        return [(*DTXNS, i) for i in self.sessions.distributed_ids()]

    def properties(self) -> dict[str, str]:
        if self.txn_id is None:
            return {}
        return self.sessions.describe(self.txn_id)

    def create(self, properties: dict[str, str]) -> dict[str, str]:
        if self.txn_id is None:
            raise RestError(
                409, "AlreadyExistsException", f"{'.'.join(self.levels)} is a system namespace"
            )
        isolation = properties.get("isolation-level", properties.get("isolation"))
        if isolation is not None and isolation.lower() not in ("snapshot", "serializable"):
            raise bad_request(
                f"isolation-level must be snapshot or serializable, got {isolation!r}"
            )
        info = commit_info_of(properties)
        self.sessions.begin(isolation.lower() if isolation else None, name=self.txn_id, info=info)
        return self.sessions.describe(self.txn_id)

    def drop(self) -> None:
        if self.txn_id is None:
            raise bad_request(f"{'.'.join(self.levels)} is a system namespace")
        self.sessions.rollback(self.txn_id)

    def update(self, removals: list[str], updates: dict[str, str]) -> dict[str, list[str]]:
        if self.txn_id is None:
            raise bad_request(f"{'.'.join(self.levels)} is a system namespace")
        metadata = {k: v for k, v in updates.items() if k.startswith("commit.")}
        action = {k: v.lower() for k, v in updates.items() if k not in metadata}
        if removals or set(action) - {"commit", "rollback"} or set(action.values()) != {"true"}:
            raise bad_request(
                f"a transaction namespace takes only 'commit'='true' (with commit.message, "
                f"commit.author, commit.property.<key>) or 'rollback'='true', "
                f"got updates {sorted(updates)} and removals {sorted(removals)}"
            )
        if len(action) != 1:
            raise bad_request("set either 'commit' or 'rollback', not both")
        if metadata and "commit" not in action:
            raise bad_request("commit metadata (commit.*) goes with 'commit'='true' only")
        if "commit" in action:
            self.sessions.commit(self.txn_id, commit_info_of(metadata))
        else:
            self.sessions.rollback(self.txn_id)
        return {"updated": sorted(updates), "removed": [], "missing": []}


def rename(s: Scope, request: RenameTableRequest, kind: str) -> Response:
    """``tables/rename`` or ``views/rename`` (``kind``: ``table`` or ``view``):
    both names checked, and the destination in the same transaction scope as
    the source."""
    source_ns = check_namespace(request.source.namespace)
    dest_ns = check_namespace(request.destination.namespace)
    source_name = check_level("source name", request.source.name)
    dest_name = check_level("destination name", request.destination.name)
    with s.route(source_ns) as (cat, rest, pre):
        if dest_ns[: len(pre)] != pre or (pre and len(dest_ns) <= len(pre)):
            raise bad_request(f"a {kind} cannot be renamed into or out of a transaction")
        rename_object = cat.rename_table if kind == "table" else cat.rename_view
        rename_object((*rest, source_name), (*dest_ns[len(pre) :], dest_name))
    return Response(status_code=204)
