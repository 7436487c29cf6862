"""``POST /v1/{prefix}/transactions/commit``: several table commits as one
catalog transaction (spec/rest.md §3)."""

from __future__ import annotations

from fastapi import Depends, Response
from pyiceberg.typedef import Identifier

from olympia.rest.errors import bad_request
from olympia.rest.models import CommitTableRequest, CommitTransactionRequest
from olympia.rest.routes.common import errors, new_router
from olympia.rest.routes.dependencies import Scope, resolve
from olympia.rest.routes.names import check_level, check_namespace
from olympia.rest.routes.tables import commit_one
from olympia.rest.sessions import checked_commit_info

router = new_router()


@router.post("/transactions/commit")
@errors(commit=True)
def commit_transaction(request: CommitTransactionRequest, s: Scope = Depends(resolve)) -> Response:
    info = checked_commit_info(
        request.commit_message, request.commit_author, request.commit_properties
    )
    changes: list[tuple[Identifier, CommitTableRequest]] = []
    seen: set[Identifier] = set()
    for i, change in enumerate(request.table_changes):
        if change.identifier is None:
            raise bad_request(f"table-changes[{i}] has no identifier")
        identifier = (
            *check_namespace(change.identifier.namespace),
            check_level(f"table-changes[{i}] name", change.identifier.name),
        )
        if identifier in seen:
            raise bad_request(f"table-changes names {'.'.join(identifier)!r} twice")
        seen.add(identifier)
        changes.append((identifier, change))
    if not changes:
        return Response(status_code=204)
    scopes = {s.scope_key(identifier[:-1]) for identifier, _ in changes}
    if len(scopes) > 1:
        raise bad_request("table-changes name tables inside and outside a transaction")
    with s.route(changes[0][0][:-1]) as (cat, _, pre), s.atomic(cat, info) as txn:
        for identifier, change in changes:
            commit_one(
                s.root, txn, identifier[len(pre) :], change, open_transaction=cat is not s.root
            )
    return Response(status_code=204)
