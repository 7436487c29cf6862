"""``/txn``: transactions over HTTP (spec/rest.md §8). The Iceberg REST
routes included again under ``/txn/{txn_id}/`` work inside transaction
``txn_id`` (see :func:`~olympia.rest.routes.dependencies.resolve`)."""

from __future__ import annotations

from fastapi import Depends, Response

from olympia.rest.models import BeginRequest, TxnCommitRequest
from olympia.rest.responses import json_response
from olympia.rest.routes.common import errors, new_router
from olympia.rest.routes.dependencies import open_transactions
from olympia.rest.sessions import OpenTransactions, checked_commit_info

#: The prefix of the Iceberg REST routes inside a transaction.
TXN_ROOT = "/txn/{txn_id}"

router = new_router()


@router.post("/txn")
@errors()
def begin(
    request: BeginRequest, sessions: OpenTransactions = Depends(open_transactions)
) -> Response:
    info = checked_commit_info(request.message, request.author, request.properties)
    txn = sessions.begin(request.isolation, distributed=request.distributed, info=info)
    return json_response(
        {
            "id": txn.id,
            "isolation": txn.isolation,
            "begin-version": txn.begin_version,
            "idle-seconds": sessions.idle_seconds,
        }
    )


@router.get(TXN_ROOT)
@errors()
def status(txn_id: str, sessions: OpenTransactions = Depends(open_transactions)) -> Response:
    """The transaction, open: a request that uses it, so a client whose
    statement runs long keeps it from being rolled back as idle."""
    with sessions.using(txn_id) as txn:
        return json_response(
            {
                "id": txn.id,
                "isolation": txn.isolation,
                "begin-version": txn.begin_version,
                "idle-seconds": sessions.idle_seconds,
            }
        )


@router.get("/txn")
@errors()
def list_open(sessions: OpenTransactions = Depends(open_transactions)) -> Response:
    ids = sessions.local_ids() + sessions.distributed_ids()
    return json_response({"transactions": ids})


@router.post(TXN_ROOT + "/commit")
@errors(commit=True)
def commit(
    txn_id: str,
    request: TxnCommitRequest | None = None,
    sessions: OpenTransactions = Depends(open_transactions),
) -> Response:
    info = (
        checked_commit_info(request.message, request.author, request.properties)
        if request is not None
        else None
    )
    version = sessions.commit(txn_id, info)
    return json_response({"id": txn_id, "version": version})


@router.post(TXN_ROOT + "/rollback")
@errors()
def rollback(txn_id: str, sessions: OpenTransactions = Depends(open_transactions)) -> Response:
    sessions.rollback(txn_id)
    return Response(status_code=204)
