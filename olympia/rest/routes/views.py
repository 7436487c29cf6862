"""The view routes, below ``/v1/{prefix}``."""

from __future__ import annotations

from fastapi import Depends, Query, Response

from olympia.rest.errors import not_found
from olympia.rest.models import (
    CommitViewRequest,
    CreateViewRequest,
    RegisterViewRequest,
    RenameTableRequest,
)
from olympia.rest.responses import view_body, view_result
from olympia.rest.routes.common import MAX_PAGE_SIZE, errors, identifiers_page, new_router
from olympia.rest.routes.dependencies import Scope, rename, resolve
from olympia.rest.routes.names import (
    check_level,
    check_metadata_location,
    metadata_file,
    parse_namespace,
)

router = new_router()


@router.get("/namespaces/{namespace}/views")
@errors()
def list_views(
    namespace: str,
    page_token: str | None = Query(default=None, alias="pageToken"),
    page_size: int | None = Query(default=None, alias="pageSize", ge=1, le=MAX_PAGE_SIZE),
    s: Scope = Depends(resolve),
) -> Response:
    levels = parse_namespace(namespace)
    with s.route(levels) as (cat, rest, pre):
        found = sorted((*pre, *v) for v in cat.list_views(rest))
    return identifiers_page(found, page_token, page_size)


@router.post("/namespaces/{namespace}/views")
@errors(commit=True)
def create_view(
    namespace: str, request: CreateViewRequest, s: Scope = Depends(resolve)
) -> Response:
    levels = parse_namespace(namespace)
    name = check_level("view name", request.name)
    with s.route(levels) as (cat, rest, _):
        cat.create_view(
            (*rest, name),
            request.view_schema,
            request.view_version,
            request.location,
            request.properties,
        )
        return view_result(cat, (*rest, name))


@router.post("/namespaces/{namespace}/register-view")
@errors(commit=True)
def register_view(
    namespace: str, request: RegisterViewRequest, s: Scope = Depends(resolve)
) -> Response:
    levels = parse_namespace(namespace)
    name = check_level("view name", request.name)
    location = check_metadata_location(request.metadata_location)
    with s.route(levels) as (cat, rest, _), metadata_file(location):
        cat.register_view((*rest, name), location)
        return view_result(cat, (*rest, name))


@router.get("/namespaces/{namespace}/views/{view}")
@errors()
def load_view(namespace: str, view: str, s: Scope = Depends(resolve)) -> Response:
    levels = parse_namespace(namespace)
    name = check_level("view name", view)
    with s.route(levels) as (cat, rest, _):
        return view_result(cat, (*rest, name))


@router.head("/namespaces/{namespace}/views/{view}")
@errors()
def view_exists(namespace: str, view: str, s: Scope = Depends(resolve)) -> Response:
    levels = parse_namespace(namespace)
    name = check_level("view name", view)
    with s.route(levels) as (cat, rest, _):
        if not cat.view_exists((*rest, name)):
            raise not_found("View", f"View does not exist: {'.'.join((*levels, name))}")
    return Response(status_code=204)


@router.delete("/namespaces/{namespace}/views/{view}")
@errors(commit=True)
def drop_view(namespace: str, view: str, s: Scope = Depends(resolve)) -> Response:
    levels = parse_namespace(namespace)
    name = check_level("view name", view)
    with s.route(levels) as (cat, rest, _):
        cat.drop_view((*rest, name))
    return Response(status_code=204)


@router.post("/namespaces/{namespace}/views/{view}")
@errors(commit=True)
def replace_view(
    namespace: str, view: str, request: CommitViewRequest, s: Scope = Depends(resolve)
) -> Response:
    levels = parse_namespace(namespace)
    name = check_level("view name", view)
    with s.route(levels) as (cat, rest, _):
        metadata, location = cat.commit_view((*rest, name), request.requirements, request.updates)
    return view_body(metadata, location)


@router.post("/views/rename")
@errors(commit=True)
def rename_view(request: RenameTableRequest, s: Scope = Depends(resolve)) -> Response:
    return rename(s, request, "view")
