"""The namespace routes, below ``/v1/{prefix}``: the catalog's namespaces
and the system namespaces ``sys.dtxns.<id>`` of distributed transactions
(spec/rest.md §9)."""

from __future__ import annotations

from collections import Counter
from urllib.parse import unquote

from fastapi import Depends, Query, Response
from pyiceberg.typedef import Identifier

from olympia.rest.errors import RestError, bad_request, not_found
from olympia.rest.models import CreateNamespaceRequest, UpdateNamespacePropertiesRequest
from olympia.rest.responses import json_response
from olympia.rest.routes.common import MAX_PAGE_SIZE, errors, new_router, one_page
from olympia.rest.routes.dependencies import Scope, resolve
from olympia.rest.routes.names import check_namespace, parse_namespace

router = new_router()


@router.get("/namespaces")
@errors()
def list_namespaces(
    parent: str | None = None,
    page_token: str | None = Query(default=None, alias="pageToken"),
    page_size: int | None = Query(default=None, alias="pageSize", ge=1, le=MAX_PAGE_SIZE),
    s: Scope = Depends(resolve),
) -> Response:
    levels = parse_namespace(parent) if parent else ()
    system = s.system(levels)
    if system is not None:
        found = system.children()
    else:
        listed = _children(s, levels)
        if listed is None and any("%" in level for level in levels):
            # PyIceberg 0.12's RestCatalog percent-encodes each level of
            # ``parent`` and its HTTP library encodes the query once more
            # (Iceberg's Java client encodes once): a parent that is not
            # there as given is looked up decoded once more (spec/rest.md §5).
            try:
                listed = _children(s, check_namespace([unquote(level) for level in levels]))
            except RestError:
                listed = None
        if listed is None:
            raise not_found("Namespace", f"Namespace does not exist: {'.'.join(levels)}")
        found = listed
    page, next_token = one_page(sorted(found), page_token, page_size)
    return json_response({"namespaces": [list(n) for n in page], "next-page-token": next_token})


def _children(s: Scope, levels: Identifier) -> list[Identifier] | None:
    """The namespaces one level below ``levels`` (all first levels for
    ``()``), or None when ``levels`` is no namespace."""
    with s.route(levels) as (cat, rest, pre):
        if rest and not cat.namespace_exists(rest):
            return None
        return [(*pre, *n) for n in cat.list_namespaces(rest)]


@router.post("/namespaces")
@errors(commit=True)
def create_namespace(request: CreateNamespaceRequest, s: Scope = Depends(resolve)) -> Response:
    levels = check_namespace(request.namespace)
    system = s.system(levels)
    if system is not None:
        props = system.create(request.properties)
    else:
        with s.route(levels) as (cat, rest, _):
            cat.create_namespace(rest, request.properties)
            props = cat.load_namespace_properties(rest)
    return json_response({"namespace": list(levels), "properties": props})


@router.get("/namespaces/{namespace}")
@errors()
def load_namespace(namespace: str, s: Scope = Depends(resolve)) -> Response:
    levels = parse_namespace(namespace)
    system = s.system(levels)
    if system is not None:
        props = system.properties()
    else:
        with s.route(levels) as (cat, rest, _):
            props = cat.load_namespace_properties(rest)
    return json_response({"namespace": list(levels), "properties": props})


@router.head("/namespaces/{namespace}")
@errors()
def namespace_exists(namespace: str, s: Scope = Depends(resolve)) -> Response:
    levels = parse_namespace(namespace)
    system = s.system(levels)
    if system is not None:
        system.properties()
        return Response(status_code=204)
    with s.route(levels) as (cat, rest, _):
        if not cat.namespace_exists(rest):
            raise not_found("Namespace", f"Namespace does not exist: {'.'.join(levels)}")
    return Response(status_code=204)


@router.delete("/namespaces/{namespace}")
@errors(commit=True)
def drop_namespace(namespace: str, s: Scope = Depends(resolve)) -> Response:
    levels = parse_namespace(namespace)
    system = s.system(levels)
    if system is not None:
        system.drop()
    else:
        with s.route(levels) as (cat, rest, _):
            cat.drop_namespace(rest)
    return Response(status_code=204)


@router.post("/namespaces/{namespace}/properties")
@errors(commit=True)
def update_properties(
    namespace: str, request: UpdateNamespacePropertiesRequest, s: Scope = Depends(resolve)
) -> Response:
    levels = parse_namespace(namespace)
    repeated = sorted(k for k, n in Counter(request.removals).items() if n > 1)
    if repeated:  # the specification's removals are unique items
        raise bad_request(f"removals name {repeated} more than once")
    both = sorted(set(request.removals) & set(request.updates))
    if both:
        raise RestError(
            422, "UnprocessableEntityException", f"keys both removed and updated: {both}"
        )
    system = s.system(levels)
    if system is not None:
        return json_response(system.update(request.removals, request.updates))
    with s.route(levels) as (cat, rest, _):
        summary = cat.update_namespace_properties(
            rest, removals=set(request.removals), updates=request.updates
        )
    return json_response(
        {
            "updated": summary.updated,
            "removed": summary.removed,
            "missing": summary.missing or [],
        }
    )
