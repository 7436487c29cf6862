"""``olympia ls`` and ``olympia show``: what a version holds, with Iceberg
details for tables and views."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from olympia.catalog import CatalogVersion
from olympia.cli.base import (
    EXIT_OK,
    CliError,
    Command,
    Out,
    add_version_options,
    catalog_view,
    iceberg_layer,
    iso_time,
    open_catalog,
    storage_options,
    warehouse_uri,
)


def cmd_ls(args: argparse.Namespace, out: Out) -> int:
    cat = open_catalog(args)
    view = catalog_view(cat, args)
    names = view.list_namespaces()
    if args.namespace is None:
        rows = [[n, len(view.list_tables(n)), len(view.list_views(n))] for n in names]
        data = {
            "version": view.version,
            "namespaces": [{"name": r[0], "tables": r[1], "views": r[2]} for r in rows],
        }
        out.emit(
            data,
            lambda: out.table(
                f"version {view.version}: {len(rows)} namespace(s)",
                ["namespace", "tables", "views"],
                rows,
            ),
        )
        return EXIT_OK
    ns = args.namespace
    children = [n for n in names if n.startswith(ns + ".")]
    if ns in names or not children:  # an unknown namespace with no children: an error
        tables, views = view.list_tables(ns), view.list_views(ns)
    else:  # only nested namespaces: `ls sales` when there is `sales.eu`
        tables, views = [], []
    listing = {
        "version": view.version,
        "namespace": ns,
        "namespaces": children,
        "tables": tables,
        "views": views,
    }
    entries = [["namespace", n] for n in children]
    entries += [["table", f"{ns}.{t}"] for t in tables] + [["view", f"{ns}.{v}"] for v in views]
    out.emit(
        listing,
        lambda: out.table(f"version {view.version}: namespace {ns}", ["kind", "name"], entries),
    )
    return EXIT_OK


def _object_name(
    view: CatalogVersion, kind: str, first: str, second: str | None
) -> tuple[str, str]:
    """``(namespace, name)`` from ``NAMESPACE NAME`` or one dotted name.

    A dotted name is split at its last dot unless only another split names an
    existing object (a namespace ``a`` holding a table ``b.c``)."""
    if second is not None:
        return first, second
    splits = [(first[:i], first[i + 1 :]) for i in range(len(first) - 1, 0, -1) if first[i] == "."]
    splits = [(ns, name) for ns, name in splits if ns and name]
    if not splits:
        raise CliError(f"show {kind} needs NAMESPACE.NAME or NAMESPACE NAME, got {first!r}")
    exists = view.table_exists if kind == "table" else view.view_exists
    for ns, name in splits:
        if exists(ns, name):
            return ns, name
    return splits[0]


def cmd_show(args: argparse.Namespace, out: Out) -> int:
    cat = open_catalog(args)
    view = catalog_view(cat, args)
    data: dict[str, Any]
    if args.kind == "namespace":
        if args.name is not None:
            raise CliError("show namespace takes one name: olympia show namespace NAMESPACE")
        ns = view.describe_namespace(args.namespace)
        data = {"kind": "namespace", "name": ns.name, "properties": ns.properties}
    elif args.kind == "table":
        namespace, name = _object_name(view, "table", args.namespace, args.name)
        t = view.describe_table(namespace, name)
        data = {
            "kind": "table",
            "namespace": t.namespace,
            "name": t.name,
            "format": t.format,
            "metadata_location": t.metadata_location,
            "properties": t.properties,
        }
        if t.format == "iceberg" and t.metadata_location:
            data["iceberg"] = _iceberg_table(args, f"{namespace}.{name}", t.metadata_location)
    else:
        namespace, name = _object_name(view, "view", args.namespace, args.name)
        v = view.describe_view(namespace, name)
        data = {
            "kind": "view",
            "namespace": v.namespace,
            "name": v.name,
            "dialect": v.dialect,
            "sql_text": v.sql_text,
            "schema_json": v.schema_json,
            "metadata_location": v.metadata_location,
            "properties": v.properties,
        }
        if v.metadata_location:
            data["iceberg"] = _iceberg_view(args, f"{namespace}.{name}", v.metadata_location)
            if not v.sql_text and isinstance(data["iceberg"], dict):
                data["sql_text"] = data["iceberg"].get("sql", "")
                data["dialect"] = data["iceberg"].get("dialect", "")
    data["version"] = view.version
    out.emit(data, lambda: _render_object(out, data))
    return EXIT_OK


def _render_object(out: Out, data: dict[str, Any]) -> None:
    rows: list[list[Any]] = []
    iceberg = data.get("iceberg")
    for k, v in data.items():
        if k in ("iceberg", "schema_json") and v:
            continue
        if isinstance(v, dict):
            rows += [[f"{k}.{pk}", pv] for pk, pv in sorted(v.items())] or [[k, "{}"]]
        else:
            rows.append([k, v])
    out.table(None, ["field", "value"], rows)
    if not isinstance(iceberg, dict):
        if iceberg:
            out.console.print(f"iceberg: {iceberg}", markup=False)
        return
    facts = [[k, v] for k, v in iceberg.items() if not isinstance(v, (dict, list))]
    if "summary" in iceberg:
        facts += [[f"summary.{k}", v] for k, v in sorted(iceberg["summary"].items())]
    out.table("Iceberg", ["field", "value"], facts)
    if iceberg.get("schema"):
        out.table(
            "schema",
            ["id", "name", "type", "required"],
            [[f["id"], f["name"], f["type"], f["required"]] for f in iceberg["schema"]],
        )
    if iceberg.get("partition_spec"):
        out.table(
            "partition spec",
            ["source", "transform", "name"],
            [[p["source"], p["transform"], p["name"]] for p in iceberg["partition_spec"]],
        )


def _iceberg_table(args: argparse.Namespace, name: str, location: str) -> dict[str, Any] | str:
    """What an engine user asks about a table: schema, partition spec, the
    current snapshot and its summary (row and file counts), from its
    metadata file; a sentence instead when it cannot be read."""
    owner = _iceberg_reader(args, location)
    if isinstance(owner, str):
        return owner
    try:
        md = owner.read_metadata(location, what=f"table {name}'s metadata file")
    except (ValueError, OSError) as exc:
        return f"cannot read the metadata: {exc}"
    schema = md.schema()
    columns = {f.field_id: f.name for f in schema.fields}
    snapshot = md.current_snapshot()
    details: dict[str, Any] = {
        "format_version": md.format_version,
        "table_uuid": str(md.table_uuid),
        "location": md.location,
        "current_snapshot_id": snapshot.snapshot_id if snapshot else None,
        "snapshots": len(md.snapshots),
        "last_updated": iso_time(datetime.fromtimestamp(md.last_updated_ms / 1000, tz=UTC)),
        "schema": [
            {"id": f.field_id, "name": f.name, "type": str(f.field_type), "required": f.required}
            for f in schema.fields
        ],
        "partition_spec": [
            {
                "source": columns.get(p.source_id, p.source_id),
                "transform": str(p.transform),
                "name": p.name,
            }
            for p in md.spec().fields
        ],
        "sort_order": str(md.sort_order_by_id(md.default_sort_order_id) or "unsorted"),
    }
    if snapshot is not None and snapshot.summary is not None:
        summary = {"operation": str(snapshot.summary.operation.value)}
        summary.update(snapshot.summary.additional_properties)
        details["summary"] = summary
        details["rows"] = int(summary.get("total-records", 0))
    else:
        details["rows"] = 0
    return details


def _iceberg_view(args: argparse.Namespace, name: str, location: str) -> dict[str, Any] | str:
    owner = _iceberg_reader(args, location)
    if isinstance(owner, str):
        return owner
    try:
        md = owner.read_view_metadata(location, what=f"view {name}'s metadata file")
    except (ValueError, OSError) as exc:
        return f"cannot read the metadata: {exc}"
    current = next(v for v in md.versions if v.version_id == md.current_version_id)
    sql = [r for r in current.representations if getattr(r, "sql", None)]
    return {
        "format_version": md.format_version,
        "view_uuid": str(md.view_uuid),
        "location": md.location,
        "current_version_id": md.current_version_id,
        "versions": len(md.versions),
        "sql": sql[0].sql if sql else "",
        "dialect": sql[0].dialect if sql else "",
        "dialects": [r.dialect for r in sql],
    }


def _iceberg_reader(args: argparse.Namespace, location: str) -> Any:
    """The Iceberg layer, to read metadata files; a sentence when PyIceberg
    is not installed, or when the file is on S3 and nothing says how to
    reach S3 (a local catalog without ``-o`` options: trying would only wait
    for credentials that are not there)."""
    on_s3 = location.split("://", 1)[0].lower() in ("s3", "s3a", "s3n")
    if on_s3 and not warehouse_uri(args).startswith("s3") and not storage_options(args):
        return "not read: the metadata file is on S3; give -o s3.endpoint=... (and keys) to read it"
    try:
        return iceberg_layer(args, "the Iceberg details need PyIceberg")
    except CliError as exc:
        return str(exc)


def _ls_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", nargs="?", help="a namespace to list")
    add_version_options(p)


LS = Command(
    "ls",
    "List namespaces (with table and view counts), or the tables and views of one namespace.",
    ["olympia ls", "olympia ls sales", "olympia ls sales --version 12"],
    cmd_ls,
    _ls_arguments,
)


def _show_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("kind", choices=("namespace", "table", "view"))
    p.add_argument("namespace", help="a namespace, or NAMESPACE.NAME of a table or view")
    p.add_argument("name", nargs="?", help="the table's or view's name")
    add_version_options(p)


SHOW = Command(
    "show",
    "Show one object's definition; for an Iceberg table also its schema, partition "
    "spec, current snapshot and row count, for a view its SQL.",
    [
        "olympia show namespace sales.eu",
        "olympia show table sales.eu.orders",
        "olympia show table sales.eu orders --version 12",
        "olympia show view sales recent --as-of 2026-11-23T12:00:00Z",
    ],
    cmd_show,
    _show_arguments,
)
